package db

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// AdminLogin and AdminDisplayName name the user bootstrapped at start.
const (
	AdminLogin       = "admin"
	AdminDisplayName = "Администратор"
	tokenPrefix      = "erp_"
)

// Roles, as stored in users.role. RoleAdmin may do everything.
const (
	RoleAdmin       = "admin"
	RoleSales       = "sales"
	RoleWarehouse   = "warehouse"
	RolePlanner     = "planner"
	RoleIntegration = "integration"
	RoleViewer      = "viewer"
)

// Roles lists every role.
var Roles = []string{RoleAdmin, RoleSales, RoleWarehouse, RolePlanner, RoleIntegration, RoleViewer}

// Event types about users and tokens (entity users).
const (
	EventUserCreated     = "user.created"
	EventUserRoleChanged = "user.role_changed"
	EventTokenIssued     = "token.issued"
	EventTokenRevoked    = "token.revoked"
)

// User is a row of users: a person or an integration account.
type User struct {
	ID          int64  `db:"id"`
	Login       string `db:"login"`
	DisplayName string `db:"display_name"`
	Role        string `db:"role"`
}

// APIToken is a row of api_tokens, without the hash.
type APIToken struct {
	ID         int64      `db:"id"`
	UserID     int64      `db:"user_id"`
	Name       string     `db:"name"`
	CreatedAt  time.Time  `db:"created_at"`
	ExpiresAt  *time.Time `db:"expires_at"`
	RevokedAt  *time.Time `db:"revoked_at"`
	LastUsedAt *time.Time `db:"last_used_at"`
}

const tokenColumns = `t.id, t.user_id, t.name, t.created_at, t.expires_at, t.revoked_at, t.last_used_at`

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
// "Администратор", role admin) if missing and, when token is not empty,
// makes token one of its API tokens. It returns the admin's id. Safe to run
// at every start and from several instances at once.
func EnsureAdmin(ctx context.Context, tx pgx.Tx, token string) (int64, error) {
	var id int64
	err := tx.QueryRow(ctx, `
		INSERT INTO users (login, display_name, role) VALUES ($1, $2, $3)
		ON CONFLICT (login) DO UPDATE SET role = EXCLUDED.role
		RETURNING id`, AdminLogin, AdminDisplayName, RoleAdmin).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("ensure admin user: %w", err)
	}
	if token == "" {
		return id, nil
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO api_tokens (user_id, token_hash, name) VALUES ($1, $2, 'bootstrap')
		ON CONFLICT (token_hash) DO NOTHING`, id, hashToken(token)); err != nil {
		return 0, fmt.Errorf("store admin token: %w", err)
	}
	return id, nil
}

// UserByToken returns the user owning a valid API token (not revoked, not
// expired) and when the token expires (nil: never), or ErrNotFound, and
// notes the token's use (at most one write a minute per token).
func UserByToken(ctx context.Context, q Querier, token string) (User, *time.Time, error) {
	type owner struct {
		User
		ExpiresAt *time.Time `db:"expires_at"`
	}
	o, err := getOne[owner](ctx, q, `
		WITH t AS (
			SELECT id, user_id, expires_at FROM api_tokens
			WHERE token_hash = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
		), touch AS (
			UPDATE api_tokens a SET last_used_at = now() FROM t
			WHERE a.id = t.id AND (a.last_used_at IS NULL OR a.last_used_at < now() - interval '1 minute')
		)
		SELECT u.id, u.login, u.display_name, u.role, t.expires_at FROM t JOIN users u ON u.id = t.user_id`, hashToken(token))
	if err != nil {
		return User{}, nil, fmt.Errorf("find token owner: %w", err)
	}
	return o.User, o.ExpiresAt, nil
}

// UserInput creates a user.
type UserInput struct {
	Login       string
	DisplayName string
	Role        string
}

func validRole(field, role string) error {
	if !slices.Contains(Roles, role) {
		return inputErr(field, "unknown role %q", role)
	}
	return nil
}

// CreateUser inserts a user and journals user.created by actorID. Errors:
// *InputError (bad login, empty name; a taken login also matches
// ErrConflict).
func CreateUser(ctx context.Context, tx pgx.Tx, actorID *int64, in UserInput) (User, []Event, error) {
	if !validSubscriberName(in.Login) {
		return User{}, nil, inputErr("login", "1 to 64 lowercase letters, digits, '_', '.', '-', starting with a letter or digit")
	}
	name, err := requireText("displayName", in.DisplayName)
	if err != nil {
		return User{}, nil, err
	}
	if err := validRole("role", in.Role); err != nil {
		return User{}, nil, err
	}
	u, err := getOne[User](ctx, tx, `
		INSERT INTO users (login, display_name, role) VALUES ($1, $2, $3)
		RETURNING id, login, display_name, role`, in.Login, name, in.Role)
	if errors.Is(err, ErrConflict) {
		return User{}, nil, conflictOn("login", "user %q exists", in.Login)
	}
	if err != nil {
		return User{}, nil, fmt.Errorf("insert user %s: %w", in.Login, err)
	}
	ev, err := appendEvent(ctx, tx, actorID, EventUserCreated, EntityUsers, u.ID,
		map[string]any{"login": u.Login, "role": u.Role})
	if err != nil {
		return User{}, nil, err
	}
	return u, []Event{ev}, nil
}

// UserByLogin returns the user with login, or ErrNotFound.
func UserByLogin(ctx context.Context, q Querier, login string) (User, error) {
	u, err := getOne[User](ctx, q, `SELECT id, login, display_name, role FROM users WHERE login = $1`, login)
	if err != nil {
		return User{}, fmt.Errorf("get user %s: %w", login, err)
	}
	return u, nil
}

// UserByID returns user id, or ErrNotFound.
func UserByID(ctx context.Context, q Querier, id int64) (User, error) {
	u, err := getOne[User](ctx, q, `SELECT id, login, display_name, role FROM users WHERE id = $1`, id)
	if err != nil {
		return User{}, fmt.Errorf("get user %d: %w", id, err)
	}
	return u, nil
}

// Users lists every user by login.
func Users(ctx context.Context, q Querier) ([]User, error) {
	rows, err := q.Query(ctx, `SELECT id, login, display_name, role FROM users ORDER BY login`)
	if err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	us, err := pgx.CollectRows(rows, pgx.RowToStructByName[User])
	if err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	return us, nil
}

// SetUserRole changes login's role and journals user.role_changed.
// ErrNotFound for an unknown login.
func SetUserRole(ctx context.Context, tx pgx.Tx, actorID *int64, login, role string) (User, []Event, error) {
	if err := validRole("role", role); err != nil {
		return User{}, nil, err
	}
	if login == AdminLogin && role != RoleAdmin {
		// The bootstrap admin is how the system is recovered; start-up
		// would make it admin again anyway.
		return User{}, nil, inputErr("login", "the bootstrap admin keeps the admin role")
	}
	u, err := getOne[User](ctx, tx, `
		UPDATE users SET role = $2 WHERE login = $1 RETURNING id, login, display_name, role`, login, role)
	if err != nil {
		return User{}, nil, fmt.Errorf("set role of %s: %w", login, err)
	}
	ev, err := appendEvent(ctx, tx, actorID, EventUserRoleChanged, EntityUsers, u.ID, map[string]any{"role": role})
	if err != nil {
		return User{}, nil, err
	}
	return u, []Event{ev}, nil
}

// IssueToken creates an API token for login, optionally expiring at
// expiresAt (which must be in the future), and journals token.issued (id,
// name and expiry, never the token). It returns the token, shown once.
func IssueToken(ctx context.Context, tx pgx.Tx, actorID *int64, login, name string, expiresAt *time.Time) (string, APIToken, []Event, error) {
	if len(name) > 100 {
		return "", APIToken{}, nil, inputErr("name", "at most 100 characters")
	}
	if expiresAt != nil && !expiresAt.After(time.Now()) {
		return "", APIToken{}, nil, inputErr("expiresAt", "must be in the future")
	}
	u, err := UserByLogin(ctx, tx, login)
	if err != nil {
		return "", APIToken{}, nil, err
	}
	token, err := NewToken()
	if err != nil {
		return "", APIToken{}, nil, err
	}
	t, err := getOne[APIToken](ctx, tx, `
		WITH t AS (
			INSERT INTO api_tokens (user_id, token_hash, name, expires_at) VALUES ($1, $2, $3, $4) RETURNING *
		) SELECT `+tokenColumns+` FROM t`, u.ID, hashToken(token), name, expiresAt)
	if err != nil {
		return "", APIToken{}, nil, fmt.Errorf("insert token for %s: %w", login, err)
	}
	ev, err := appendEvent(ctx, tx, actorID, EventTokenIssued, EntityUsers, u.ID,
		map[string]any{"token_id": t.ID, "name": t.Name, "expires_at": t.ExpiresAt})
	if err != nil {
		return "", APIToken{}, nil, err
	}
	return token, t, []Event{ev}, nil
}

// RevokeToken revokes token id at once and journals token.revoked; a
// repeat is a no-op that journals nothing. ErrNotFound for an unknown id.
func RevokeToken(ctx context.Context, tx pgx.Tx, actorID *int64, id int64) (APIToken, []Event, error) {
	t, err := getOne[APIToken](ctx, tx, `
		WITH t AS (
			UPDATE api_tokens SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL RETURNING *
		) SELECT `+tokenColumns+` FROM t`, id)
	if errors.Is(err, ErrNotFound) {
		t, err = getOne[APIToken](ctx, tx, `SELECT `+tokenColumns+` FROM api_tokens t WHERE t.id = $1`, id)
		if err != nil {
			return APIToken{}, nil, fmt.Errorf("revoke token %d: %w", id, err)
		}
		return t, nil, nil
	}
	if err != nil {
		return APIToken{}, nil, fmt.Errorf("revoke token %d: %w", id, err)
	}
	ev, err := appendEvent(ctx, tx, actorID, EventTokenRevoked, EntityUsers, t.UserID, map[string]any{"token_id": t.ID})
	if err != nil {
		return APIToken{}, nil, err
	}
	return t, []Event{ev}, nil
}

// Tokens lists API tokens, newest first, of login's user when login is not
// nil (ErrNotFound for an unknown login).
func Tokens(ctx context.Context, q Querier, login *string) ([]APIToken, error) {
	var userID *int64
	if login != nil {
		u, err := UserByLogin(ctx, q, *login)
		if err != nil {
			return nil, err
		}
		userID = &u.ID
	}
	rows, err := q.Query(ctx, `SELECT `+tokenColumns+` FROM api_tokens t
		WHERE ($1::bigint IS NULL OR t.user_id = $1) ORDER BY t.id DESC`, userID)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	ts, err := pgx.CollectRows(rows, pgx.RowToStructByName[APIToken])
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return ts, nil
}

// TokenKey identifies a token in memory without keeping the token: its
// SHA-256, hex.
func TokenKey(token string) string { return hex.EncodeToString(hashToken(token)) }

// TokensEndedSince returns the keys (TokenKey) of tokens revoked or
// expired after since, and the database's now, to pass as since next time.
func TokensEndedSince(ctx context.Context, q Querier, since time.Time) ([]string, time.Time, error) {
	var now time.Time
	if err := q.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return nil, time.Time{}, fmt.Errorf("read clock: %w", err)
	}
	rows, err := q.Query(ctx, `SELECT encode(token_hash, 'hex') FROM api_tokens
		WHERE revoked_at > $1 OR (expires_at > $1 AND expires_at <= $2)`, since, now)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("list ended tokens: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("list ended tokens: %w", err)
	}
	return keys, now, nil
}
