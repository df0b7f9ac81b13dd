package db

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// AdminLogin and AdminDisplayName name the user bootstrapped at start.
const (
	AdminLogin       = "admin"
	AdminDisplayName = "Администратор"
	tokenPrefix      = "erp_"
)

// User is a row of users: a person or an integration account.
type User struct {
	ID          int64  `db:"id"`
	Login       string `db:"login"`
	DisplayName string `db:"display_name"`
}

// NewToken returns a fresh random API token ("erp_" + 43 base64url chars,
// 256 bits). Only its SHA-256 is stored.
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random token: %w", err)
	}
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

func hashToken(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// EnsureAdmin creates the admin user (login "admin", display name
// "Администратор") if missing and, when token is not empty, makes token one
// of its API tokens. It returns the admin's id. Safe to run at every start
// and from several instances at once.
func EnsureAdmin(ctx context.Context, tx pgx.Tx, token string) (int64, error) {
	var id int64
	err := tx.QueryRow(ctx, `
		INSERT INTO users (login, display_name) VALUES ($1, $2)
		ON CONFLICT (login) DO UPDATE SET login = EXCLUDED.login
		RETURNING id`, AdminLogin, AdminDisplayName).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("ensure admin user: %w", err)
	}
	if token == "" {
		return id, nil
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO api_tokens (user_id, token_hash) VALUES ($1, $2)
		ON CONFLICT (token_hash) DO NOTHING`, id, hashToken(token)); err != nil {
		return 0, fmt.Errorf("store admin token: %w", err)
	}
	return id, nil
}

// UserByToken returns the user owning a valid API token (not revoked, not
// expired), or ErrNotFound.
func UserByToken(ctx context.Context, q Querier, token string) (User, error) {
	rows, err := q.Query(ctx, `
		SELECT u.id, u.login, u.display_name
		FROM api_tokens t JOIN users u ON u.id = t.user_id
		WHERE t.token_hash = $1 AND t.revoked_at IS NULL
		  AND (t.expires_at IS NULL OR t.expires_at > now())`, hashToken(token))
	if err != nil {
		return User{}, fmt.Errorf("find token owner: %w", err)
	}
	u, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[User])
	if err != nil {
		return User{}, fmt.Errorf("find token owner: %w", translate(err))
	}
	return u, nil
}
