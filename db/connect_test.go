package db_test

import (
	"crypto/tls"
	"log/slog"
	"strings"
	"testing"

	"github.com/shopspring/decimal"
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

	direct, err := db.Open(t.Context(), url, "", sizes)
	require.NoError(t, err)
	defer direct.Close()
	require.False(t, direct.Pooled)
	require.Equal(t, "direct", direct.Mode())
	require.Same(t, direct.Pool, direct.Session)

	pooled, err := db.Open(t.Context(), bouncer, "", sizes)
	require.NoError(t, err)
	defer pooled.Close()
	require.True(t, pooled.Pooled, "PgBouncer in transaction mode is a pooler")
	require.Nil(t, pooled.Session)
	require.Equal(t, "transaction pooler, polling", pooled.Mode())

	_, err = db.Open(t.Context(), bouncer, bouncer, sizes)
	require.ErrorContains(t, err, "DATABASE_DIRECT_URL: it is a transaction pooler too", "a pooler as the session connection is refused")

	both, err := db.Open(t.Context(), bouncer, url, sizes)
	require.NoError(t, err)
	defer both.Close()
	require.True(t, both.Pooled)
	require.NotNil(t, both.Session)
	require.Equal(t, "transaction pooler, sessions on DATABASE_DIRECT_URL", both.Mode())

	// Through the pooler, many times over (each time perhaps on another
	// server session): numeric, jsonb and array parameters, also when the
	// URL asks for a query mode that cannot carry them.
	exec, err := db.Open(t.Context(), bouncer+" default_query_exec_mode=exec", "", sizes)
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

	d, err := db.Open(t.Context(), tlsURL, url, sizes)
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
	unverified, err := db.Open(t.Context(), noCA, url, sizes)
	require.NoError(t, err, "the pool connects lazily")
	defer unverified.Close()
	require.ErrorContains(t, unverified.Pool.Ping(t.Context()), "certificate", "verify-full without the CA must refuse the certificate")

	require.NoError(t, func() error {
		d, err := db.Open(t.Context(), strings.Replace(noCA, "sslmode=verify-full", "sslmode=require", 1), url, sizes)
		if err == nil {
			defer d.Close()
			err = d.Pool.Ping(t.Context())
		}
		return err
	}(), "sslmode=require encrypts without verifying")
}

// sizes are what the tests of Open ask for.
var sizes = db.PoolSizes{API: 8, Work: 24}

// TestOpenSizesTwoPoolsWithinPoolMaxConns: Open makes two distinct pools
// of the sizes asked for, and pool_max_conns in DATABASE_URL is the total
// they are fitted into (PoolSizes.Within), taken off the URL before the
// probe and the connections (the server refuses unknown parameters).
func TestOpenSizesTwoPoolsWithinPoolMaxConns(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	for _, tt := range []struct {
		url          string
		want         db.PoolSizes
		wantMaxConns int32
	}{
		{url, sizes, 0},
		{url + " pool_max_conns=100", db.PoolSizes{API: 76, Work: 24}, 100},
		{url + " pool_max_conns=9 pool_min_conns=6", db.PoolSizes{API: 5, Work: 4}, 9},
	} {
		d, err := db.Open(t.Context(), tt.url, "", sizes)
		require.NoError(t, err, tt.url)
		defer d.Close()
		require.False(t, d.Pooled)
		require.NotSame(t, d.Pool, d.Work, "two pools")
		require.Same(t, d.Pool, d.Session)
		require.Equal(t, tt.want, d.Sizes, tt.url)
		require.Equal(t, tt.wantMaxConns, d.MaxConns, tt.url)
		require.Equal(t, tt.want.API, d.Pool.Config().MaxConns, tt.url)
		require.Equal(t, tt.want.Work, d.Work.Config().MaxConns, tt.url)
		require.LessOrEqual(t, d.Work.Config().MinConns, tt.want.Work, "pool_min_conns within each pool's size")
		require.NoError(t, d.Pool.Ping(t.Context()))
		require.NoError(t, d.Work.Ping(t.Context()))
	}
	_, err := db.Open(t.Context(), url+" pool_max_conns=1", "", sizes)
	require.ErrorContains(t, err, "DATABASE_URL: pool_max_conns=1 leaves no connection")
}

func TestPoolSizesWithin(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		want  db.PoolSizes
		total int32
		got   db.PoolSizes
	}{
		// Room for both: the work pool its size, the API the rest.
		{sizes, 32, db.PoolSizes{API: 8, Work: 24}},
		{sizes, 40, db.PoolSizes{API: 16, Work: 24}},
		{sizes, 100, db.PoolSizes{API: 76, Work: 24}},
		// Short: the API keeps its size, up to half; the work pool the rest.
		{sizes, 20, db.PoolSizes{API: 8, Work: 12}},
		{sizes, 10, db.PoolSizes{API: 5, Work: 5}},
		{sizes, 9, db.PoolSizes{API: 5, Work: 4}},
		{sizes, 3, db.PoolSizes{API: 2, Work: 1}},
		{sizes, 2, db.PoolSizes{API: 1, Work: 1}},
		// A work pool that needs little (an API-only instance) leaves the
		// API the rest, and a small API want leaves the work pool more.
		{db.PoolSizes{API: 8, Work: 1}, 10, db.PoolSizes{API: 9, Work: 1}},
		{db.PoolSizes{API: 1, Work: 24}, 10, db.PoolSizes{API: 1, Work: 9}},
	} {
		got, err := tt.want.Within(tt.total)
		require.NoError(t, err)
		require.Equal(t, tt.got, got, "%+v within %d", tt.want, tt.total)
		require.Equal(t, tt.total, got.API+got.Work, "the whole total is used")
	}
	for _, total := range []int32{1, 0} {
		_, err := sizes.Within(total)
		require.Error(t, err, "within %d", total)
	}
}

// TestDecimalsKeepTheirScale: a numeric value reads back with its
// column's scale, zero included (pgx's binary numeric drops a zero's
// scale), and a parameter round-trips exactly.
func TestDecimalsKeepTheirScale(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	var zero, some, echoed decimal.Decimal
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT 0::numeric(18,3), 237.1::numeric(18,3), $1::numeric`,
		decimal.RequireFromString("-12.340")).Scan(&zero, &some, &echoed))
	require.Equal(t, "0.000", zero.StringFixed(-zero.Exponent()))
	require.Equal(t, "237.100", some.StringFixed(-some.Exponent()))
	require.Equal(t, "-12.340", echoed.StringFixed(-echoed.Exponent()))
}
