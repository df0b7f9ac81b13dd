package app

import (
	"bytes"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"erp/app/config"
	"erp/db"
	"erp/db/pgtest"
)

// TestAdminTokenBootstrapOnce: instances starting at once on an empty
// database, each with a DATA_DIR of its own, give the admin one token
// between them; later starts, whatever their DATA_DIR, make none; the
// token reaches neither the log nor a stdout that is not a terminal.
func TestAdminTokenBootstrapOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	var mu sync.Mutex
	var logs, stdout bytes.Buffer // stdout: not a terminal
	logger := slog.New(slog.NewJSONHandler(lockedWriter{&mu, &logs}, nil))
	start := func(dataDir, adminToken string) {
		t.Helper()
		cfg := config.Default()
		cfg.DataDir, cfg.AdminToken = dataDir, adminToken
		require.NoError(t, ensureAdminToken(t.Context(), pool, cfg, logger, lockedWriter{&mu, &stdout}))
	}
	tokens := func() int {
		var n int
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM api_tokens k JOIN users u ON u.id = k.user_id WHERE u.login = 'admin'`).Scan(&n))
		return n
	}

	dirs := make([]string, 4)
	var wg sync.WaitGroup
	for i := range dirs {
		dirs[i] = t.TempDir()
		wg.Go(func() { start(dirs[i], "") })
	}
	wg.Wait()
	require.Equal(t, 1, tokens(), "one admin token between the instances")
	var token string
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, AdminTokenFile))
		if os.IsNotExist(err) {
			continue
		}
		require.NoError(t, err)
		require.Empty(t, token, "a second token file")
		token = strings.TrimSpace(string(b))
		st, err := os.Stat(filepath.Join(dir, AdminTokenFile))
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	}
	require.NotEmpty(t, token, "the token is in one DATA_DIR")
	u, _, err := db.UserByToken(t.Context(), pool, token)
	require.NoError(t, err)
	require.Equal(t, db.RoleAdmin, u.Role)

	// Later starts: the token's DATA_DIR, another one, a fresh one.
	start(dirs[0], "")
	start(dirs[1], "")
	fresh := t.TempDir()
	start(fresh, "")
	require.Equal(t, 1, tokens())
	require.NoFileExists(t, filepath.Join(fresh, AdminTokenFile))
	require.Contains(t, logs.String(), "the admin has one already")

	// ADMIN_TOKEN still gives the admin that token.
	given, err := db.NewToken()
	require.NoError(t, err)
	start(t.TempDir(), given)
	require.Equal(t, 2, tokens())

	require.Empty(t, stdout.String(), "stdout is not a terminal: the token is only in the file")
	require.NotContains(t, logs.String(), token)
	require.NotContains(t, logs.String(), given)
	require.Contains(t, logs.String(), `"msg":"admin token generated"`)
}

// An admin-token file written by a start whose transaction then failed (or
// kept from a private PostgreSQL made again) gives its token to the next
// start on a database whose admin has none.
func TestAdminTokenFileOfAFailedStartIsUsed(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	dir := t.TempDir()
	saved, err := db.NewToken()
	require.NoError(t, err)
	require.NoError(t, writeAdminToken(dir, filepath.Join(dir, AdminTokenFile), saved))
	cfg := config.Default()
	cfg.DataDir = dir
	var stdout bytes.Buffer
	require.NoError(t, ensureAdminToken(t.Context(), pool, cfg, slog.New(slog.DiscardHandler), &stdout))
	_, _, err = db.UserByToken(t.Context(), pool, saved)
	require.NoError(t, err)
	require.Empty(t, stdout.String())

	// An empty file is an error, not an admin without a token.
	require.NoError(t, os.WriteFile(filepath.Join(dir, AdminTokenFile), []byte("\n"), 0o600))
	err = ensureAdminToken(t.Context(), pgtest.NewPool(t), cfg, slog.New(slog.DiscardHandler), &stdout)
	require.ErrorContains(t, err, "admin-token is empty")
}

// lockedWriter serialises writes to w under mu.
type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestServeWithItsPortTakenMakesNothing: a start whose port is taken fails
// naming the address before it makes a data directory, a database or an
// admin token.
func TestServeWithItsPortTakenMakesNothing(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	cfg := config.Default()
	cfg.Addr = taken.Addr().String()
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	var stdout bytes.Buffer
	err = Serve(t.Context(), cfg, slog.New(slog.DiscardHandler), &stdout)
	require.ErrorContains(t, err, "listen on "+cfg.Addr)
	_, statErr := os.Stat(cfg.DataDir)
	require.ErrorIs(t, statErr, os.ErrNotExist, "the data directory was made")
	require.Empty(t, stdout.String())
}
