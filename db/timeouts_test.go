package db_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"erp/db"
	"erp/db/pgtest"
)

// SetTimeouts bounds the transaction only, and what it returns puts the
// session's own bounds back: a connection with a statement_timeout of its
// own keeps it, within the transaction once restored and after it.
func TestSetTimeoutsRestoresTheSessionsBounds(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	conn, err := pgtest.NewPool(t).Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "SET statement_timeout = '7s'")
	require.NoError(t, err)

	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	settings := func() db.Timeouts {
		var got db.Timeouts
		require.NoError(t, tx.QueryRow(ctx, "SELECT current_setting('lock_timeout'), current_setting('statement_timeout')").Scan(&got.Lock, &got.Statement))
		return got
	}
	bounded := db.Timeouts{Lock: "1s", Statement: "5s"}

	previous, err := db.SetTimeouts(ctx, tx, bounded)
	require.NoError(t, err)
	require.Equal(t, db.Timeouts{Lock: "0", Statement: "7s"}, previous)
	require.Equal(t, bounded, settings())

	_, err = db.SetTimeouts(ctx, tx, previous)
	require.NoError(t, err)
	require.Equal(t, previous, settings())

	// An empty bound is left as it is.
	before, err := db.SetTimeouts(ctx, tx, db.Timeouts{Lock: "250ms"})
	require.NoError(t, err)
	require.Equal(t, previous, before)
	require.Equal(t, db.Timeouts{Lock: "250ms", Statement: "7s"}, settings())

	_, err = db.SetTimeouts(ctx, tx, bounded)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	var statement string
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_setting('statement_timeout')").Scan(&statement))
	require.Equal(t, "7s", statement, "the session's bound after the transaction")
}

// A bound PostgreSQL cannot parse is an error naming it.
func TestSetTimeoutsRefusesAnUnreadableBound(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	tx, err := pgtest.NewPool(t).Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = db.SetTimeouts(ctx, tx, db.Timeouts{Lock: "soon", Statement: "0"})
	require.ErrorContains(t, err, `lock_timeout "soon"`)
}
