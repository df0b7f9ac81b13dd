package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// NewOwnedDB creates an ordinary login role (no superuser, no CREATEDB, no
// CREATEROLE) and an empty database it owns, not migrated, and returns the
// URL of that database as that role: how a managed PostgreSQL hands out a
// database. Both are dropped at t's cleanup.
func NewOwnedDB(t testing.TB) string {
	t.Helper()
	require.NoError(t, startServer())
	suffix := randomHex(8)
	role, name, password := "owner_"+suffix, "o_"+suffix, randomHex(16)
	ctx := t.Context()
	_, err := adminPool.Exec(ctx, fmt.Sprintf("CREATE ROLE %s LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD '%s'",
		pgx.Identifier{role}.Sanitize(), password))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), time.Minute)
		defer cancel()
		if err := dropDatabase(ctx, name); err != nil {
			t.Errorf("pgtest: %v", err)
		}
		if _, err := adminPool.Exec(ctx, "DROP ROLE IF EXISTS "+pgx.Identifier{role}.Sanitize()); err != nil {
			t.Errorf("pgtest: drop role %s: %v", role, err)
		}
	})
	_, err = adminPool.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s OWNER %s TEMPLATE template0",
		pgx.Identifier{name}.Sanitize(), pgx.Identifier{role}.Sanitize()))
	require.NoError(t, err)
	u, err := withDatabase(adminURL, name)
	require.NoError(t, err)
	u, err = withUser(u, role, password)
	require.NoError(t, err)
	return u
}

// withUser returns connection string conn (a URL or key=value pairs) with
// its user and password replaced.
func withUser(conn, user, password string) (string, error) {
	if strings.HasPrefix(conn, "postgres://") || strings.HasPrefix(conn, "postgresql://") {
		u, err := url.Parse(conn)
		if err != nil {
			return "", fmt.Errorf("parse database url: %w", err)
		}
		u.User = url.UserPassword(user, password)
		return u.String(), nil
	}
	return conn + " user=" + user + " password=" + password, nil
}
