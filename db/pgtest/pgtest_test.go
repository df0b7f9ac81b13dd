package pgtest

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { Main(m) }

func TestNewDBIsolated(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		names []string
	)
	t.Run("group", func(t *testing.T) {
		for _, sub := range []string{"a", "b"} {
			t.Run(sub, func(t *testing.T) {
				t.Parallel()
				pool := NewPool(t)
				var db string
				var events bool
				require.NoError(t, pool.QueryRow(t.Context(),
					"SELECT current_database(), to_regclass('public.events') IS NOT NULL").Scan(&db, &events))
				require.True(t, strings.HasPrefix(db, "t_"), "database %q", db)
				require.True(t, events, "migrated events table in %s", db)

				// The same statement in a shared database would fail for
				// the second test.
				_, err := pool.Exec(t.Context(), "CREATE TABLE mine (test text); INSERT INTO mine VALUES ('"+sub+"')")
				require.NoError(t, err)
				var rows int
				require.NoError(t, pool.QueryRow(t.Context(), "SELECT count(*) FROM mine").Scan(&rows))
				require.Equal(t, 1, rows)

				mu.Lock()
				names = append(names, db)
				mu.Unlock()
			})
		}
	})
	require.Len(t, names, 2)
	require.NotEqual(t, names[0], names[1])

	// Both were dropped at their tests' cleanup.
	var left int
	require.NoError(t, adminPool.QueryRow(t.Context(),
		"SELECT count(*) FROM pg_database WHERE datname = ANY($1)", names).Scan(&left))
	require.Zero(t, left)
}

func TestTemplateMigratedOnce(t *testing.T) {
	t.Parallel()
	NewDB(t)
	NewDB(t)
	var templates []string
	rows, err := adminPool.Query(t.Context(), "SELECT datname FROM pg_database WHERE datname LIKE $1",
		"erp\\_tmpl\\_"+strconv.Itoa(os.Getpid())+"\\_%")
	require.NoError(t, err)
	templates, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, templates, 1)
}

func TestNewDBURL(t *testing.T) {
	t.Parallel()
	u := NewDB(t)
	conn, err := pgx.Connect(t.Context(), u)
	require.NoError(t, err)
	defer conn.Close(t.Context())
	var db string
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT current_database()").Scan(&db))
	require.Contains(t, u, db)
}

func TestWithDatabase(t *testing.T) {
	t.Parallel()
	tests := []struct {
		conn, want string
	}{
		{"postgres://u:p@h:5433/postgres?sslmode=disable", "postgres://u:p@h:5433/t_1?sslmode=disable"},
		{"postgresql://u@h", "postgresql://u@h/t_1"},
		{"host='/tmp/x' port=5432 user=postgres dbname='postgres'", "host='/tmp/x' port=5432 user=postgres dbname='postgres' dbname=t_1"},
	}
	for _, tt := range tests {
		got, err := withDatabase(tt.conn, "t_1")
		require.NoError(t, err)
		require.Equal(t, tt.want, got, "withDatabase(%q)", tt.conn)
		cfg, err := pgx.ParseConfig(got)
		require.NoError(t, err)
		require.Equal(t, "t_1", cfg.Database, "database of %q", got)
	}
}

// BenchmarkNewDB measures cloning the template into a test database and
// dropping it, the per-test cost of NewDB.
func BenchmarkNewDB(b *testing.B) {
	tmpl, err := template(b.Context())
	require.NoError(b, err)
	for b.Loop() {
		name := "t_" + randomHex(8)
		require.NoError(b, createDatabase(b.Context(), name, tmpl))
		require.NoError(b, dropDatabase(b.Context(), name))
	}
}
