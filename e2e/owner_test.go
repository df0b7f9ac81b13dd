package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"erp/app/apptest"
	"erp/db"
	"erp/db/pgtest"
)

// TestProcessAsAnOrdinaryOwnerRole runs the migrations, the server and
// `erp user` as a role that only owns its database (no superuser, no
// CREATEDB, no CREATEROLE), on a database nothing was migrated into: what
// a managed PostgreSQL gives.
func TestProcessAsAnOrdinaryOwnerRole(t *testing.T) {
	t.Parallel()
	url := pgtest.NewOwnedDB(t)
	pool, err := db.Connect(t.Context(), url)
	require.NoError(t, err)
	defer pool.Close()
	var super, createDB bool
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT rolsuper, rolcreatedb FROM pg_roles WHERE rolname = current_user`).Scan(&super, &createDB))
	require.False(t, super)
	require.False(t, createDB)

	migrate := exec.CommandContext(t.Context(), erpBinary, "migrate")
	migrate.Env = append(os.Environ(), "DATABASE_URL="+url, "DATA_DIR="+t.TempDir())
	out, err := migrate.CombinedOutput()
	require.NoError(t, err, "erp migrate as the owner: %s", out)

	token := adminToken(t)
	c := startChild(t, url, token)
	s := clientFor(c, token)
	apptest.WaitFor(t, 20*time.Second, "/readyz", func() bool { return s.Get(t, "/readyz") == http.StatusOK })
	apptest.GQL[map[string]any](t, s, `mutation { createItem(input: {sku: "A1", name: "Стол", unit: "шт"}) { id } }`, nil)
	apptest.GQL[map[string]any](t, s, `mutation { receiveOrder(input: {source: CRM, externalId: "70001", customer: "X", lines: [{sku: "A1", quantity: "2.5"}]}) { order { id } } }`, nil)
	waitDBProcessed(t, url)

	user := exec.CommandContext(context.WithoutCancel(t.Context()), erpBinary, "user", "-login", "clerk", "-role", "sales")
	user.Env = append(os.Environ(), "DATABASE_URL="+url, "DATA_DIR="+t.TempDir())
	out, err = user.CombinedOutput()
	require.NoError(t, err, "erp user as the owner: %s", out)
	require.Equal(t, 1, countRows(t, url, `SELECT count(*) FROM users WHERE login = 'clerk'`))
}
