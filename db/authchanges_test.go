package db_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"erp/db"
	"erp/db/pgtest"
)

// A revocation whose transaction started before a read and commits after
// it is read by the next read: its position is taken at commit. Read by
// revoked_at, the transaction's start, the next read, which starts after
// the first read's now, would pass over it.
func TestAuthChangesAreReadInCommitOrder(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t)
	var token string
	var tokenID int64
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, _, err := db.CreateUser(ctx, tx, nil, db.UserInput{Login: "clerk", DisplayName: "Клерк", Role: db.RoleSales}); err != nil {
			return err
		}
		var info db.APIToken
		var err error
		token, info, _, err = db.IssueToken(ctx, tx, nil, "clerk", "", nil)
		tokenID = info.ID
		return err
	}))
	start, err := db.AuthChangesAfter(ctx, pool, db.AuthPosition{})
	require.NoError(t, err)

	late, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = late.Rollback(ctx) }()
	_, _, err = db.RevokeToken(ctx, late, nil, tokenID)
	require.NoError(t, err)
	before, err := db.AuthChangesAfter(ctx, pool, start.Next)
	require.NoError(t, err)
	require.Empty(t, before.EndedTokens, "not committed yet")
	require.NoError(t, late.Commit(ctx))

	var revokedAt time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT revoked_at FROM api_tokens WHERE id = $1`, tokenID).Scan(&revokedAt))
	require.False(t, revokedAt.After(before.Next.At), "a reader of revoked_at > the last read's now would pass over it")

	after, err := db.AuthChangesAfter(ctx, pool, before.Next)
	require.NoError(t, err)
	require.Equal(t, []string{db.TokenKey(token)}, after.EndedTokens, "the late commit is read")
	again, err := db.AuthChangesAfter(ctx, pool, after.Next)
	require.NoError(t, err)
	require.Empty(t, again.EndedTokens, "and read once")
}

// A role change is read with the user's role now; writing the same role
// again (the admin's upsert at every start) is no change.
func TestAuthChangesCarryRoles(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t)
	var clerk db.User
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		clerk, _, err = db.CreateUser(ctx, tx, nil, db.UserInput{Login: "clerk", DisplayName: "Клерк", Role: db.RoleAdmin})
		return err
	}))
	start, err := db.AuthChangesAfter(ctx, pool, db.AuthPosition{})
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := db.EnsureAdmin(ctx, tx, ""); err != nil {
			return err
		}
		if _, _, err := db.SetUserRole(ctx, tx, nil, "clerk", db.RoleSales); err != nil {
			return err
		}
		_, _, err := db.SetUserRole(ctx, tx, nil, "clerk", db.RoleViewer)
		return err
	}))
	got, err := db.AuthChangesAfter(ctx, pool, start.Next)
	require.NoError(t, err)
	require.Equal(t, map[int64]string{clerk.ID: db.RoleViewer}, got.Roles, "the role now, once per user")
	require.Empty(t, got.EndedTokens)
}
