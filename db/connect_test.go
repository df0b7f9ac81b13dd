package db_test

import (
	"crypto/tls"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"erp/db"
	"erp/db/pgtest"
)

// TestOpenTellsAPoolerFromADirectConnection: Open's probe finds
// PostgreSQL itself direct and PgBouncer in transaction mode a pooler, and
// through the pooler a migrated database answers the statements whose
// parameters pgx would otherwise have to guess (numeric, jsonb, arrays).
func TestOpenTellsAPoolerFromADirectConnection(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	bouncer := pgtest.PgBouncer(t, url)

	direct, err := db.Open(t.Context(), url, "")
	require.NoError(t, err)
	defer direct.Close()
	require.False(t, direct.Pooled)
	require.Equal(t, "direct", direct.Mode())
	require.Same(t, direct.Pool, direct.Session)

	pooled, err := db.Open(t.Context(), bouncer, "")
	require.NoError(t, err)
	defer pooled.Close()
	require.True(t, pooled.Pooled, "PgBouncer in transaction mode is a pooler")
	require.Nil(t, pooled.Session)
	require.Equal(t, "transaction pooler, polling", pooled.Mode())

	_, err = db.Open(t.Context(), bouncer, bouncer)
	require.ErrorContains(t, err, "DATABASE_DIRECT_URL: it is a transaction pooler too", "a pooler as the session connection is refused")

	both, err := db.Open(t.Context(), bouncer, url)
	require.NoError(t, err)
	defer both.Close()
	require.True(t, both.Pooled)
	require.NotNil(t, both.Session)
	require.Equal(t, "transaction pooler, sessions on DATABASE_DIRECT_URL", both.Mode())

	// Through the pooler, many times over (each time perhaps on another
	// server session): numeric, jsonb and array parameters, also when the
	// URL asks for a query mode that cannot carry them.
	exec, err := db.Open(t.Context(), bouncer+" default_query_exec_mode=exec", "")
	require.NoError(t, err)
	defer exec.Close()
	for _, d := range []*db.Database{pooled, exec} {
		for i := range 50 {
			var n int
			require.NoError(t, d.Pool.QueryRow(t.Context(),
				`SELECT count(*) FROM (SELECT $1::numeric(18,3), $2::jsonb, unnest($3::bigint[])) AS x`,
				"2.500", []byte(`{"a":1}`), []int64{1, 2, int64(i)}).Scan(&n))
			require.Equal(t, 3, n)
		}
	}
	require.NoError(t, pooled.Migrate(t.Context(), slog.New(slog.DiscardHandler)), "migrations through the pooler: goose's lock table, not a session lock")
}

// TestOpenWithTLS: sslmode=verify-full with the pooler's CA connects over
// TLS (and through the pooler); without that CA the certificate is
// refused, and sslmode=require encrypts without checking it.
func TestOpenWithTLS(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	tlsURL, _ := pgtest.PgBouncerTLS(t, url)

	d, err := db.Open(t.Context(), tlsURL, url)
	require.NoError(t, err)
	defer d.Close()
	conn, err := d.Pool.Acquire(t.Context())
	require.NoError(t, err)
	_, isTLS := conn.Conn().PgConn().Conn().(*tls.Conn)
	conn.Release()
	require.True(t, isTLS, "the pool's connection is TLS")
	var one int
	require.NoError(t, d.Pool.QueryRow(t.Context(), `SELECT $1::int`, 1).Scan(&one))

	var fields []string
	for _, f := range strings.Fields(tlsURL) {
		if !strings.HasPrefix(f, "sslrootcert=") {
			fields = append(fields, f)
		}
	}
	noCA := strings.Join(fields, " ")
	unverified, err := db.Open(t.Context(), noCA, url)
	require.NoError(t, err, "the pool connects lazily")
	defer unverified.Close()
	require.ErrorContains(t, unverified.Pool.Ping(t.Context()), "certificate", "verify-full without the CA must refuse the certificate")

	require.NoError(t, func() error {
		d, err := db.Open(t.Context(), strings.Replace(noCA, "sslmode=verify-full", "sslmode=require", 1), url)
		if err == nil {
			defer d.Close()
			err = d.Pool.Ping(t.Context())
		}
		return err
	}(), "sslmode=require encrypts without verifying")
}

// TestOpenTakesPoolSettingsFromTheURL: pgxpool's pool_* settings in
// DATABASE_URL size the pool (the probe must not send them to the server,
// which refuses unknown parameters).
func TestOpenTakesPoolSettingsFromTheURL(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	d, err := db.Open(t.Context(), url+" pool_max_conns=9", "")
	require.NoError(t, err)
	defer d.Close()
	require.False(t, d.Pooled)
	require.EqualValues(t, 9, d.Pool.Config().MaxConns)
	require.NoError(t, d.Pool.Ping(t.Context()))
}
