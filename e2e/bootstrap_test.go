package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"erp/db/pgtest"
)

// tokenLike matches an API token (db.NewToken) anywhere in a text.
var tokenLike = regexp.MustCompile(`erp_[A-Za-z0-9_-]{43}`)

// TestProcessOneBootstrapAdminToken starts the binary twice without
// ADMIN_TOKEN, each time with a DATA_DIR of its own, on one database: the
// first start makes the admin's token into its DATA_DIR/admin-token (mode
// 0600), the second makes none, and nothing either process writes to
// stdout or stderr (neither a terminal here) holds a token.
func TestProcessOneBootstrapAdminToken(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	adminTokens := func() int {
		return countRows(t, url, `SELECT count(*) FROM api_tokens k JOIN users u ON u.id = k.user_id WHERE u.login = 'admin'`)
	}
	serve := func(dataDir string) string {
		t.Helper()
		var out bytes.Buffer
		c := startChildOutput(t, &out, url, "", "DATA_DIR="+dataDir)
		require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
		select {
		case <-c.done:
		case <-time.After(30 * time.Second):
			t.Fatal("no exit 30 s after SIGTERM")
		}
		require.Zero(t, c.cmd.ProcessState.ExitCode(), "output:\n%s", out.String())
		return out.String()
	}

	first, second := t.TempDir(), t.TempDir()
	out1 := serve(first)
	file := filepath.Join(first, "admin-token")
	st, err := os.Stat(file)
	require.NoError(t, err, "the first start writes the token: %s", out1)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	token := strings.TrimSpace(string(b))
	require.Regexp(t, "^"+tokenLike.String()+"$", token)
	require.Equal(t, 1, adminTokens())
	require.Contains(t, out1, `"msg":"admin token generated"`)

	out2 := serve(second)
	require.Equal(t, 1, adminTokens(), "a second DATA_DIR makes no second admin token")
	require.NoFileExists(t, filepath.Join(second, "admin-token"))
	require.Contains(t, out2, "the admin has one already")

	for i, out := range []string{out1, out2} {
		require.NotEmpty(t, out)
		require.NotContains(t, out, token, "start %d wrote the token", i+1)
		require.Empty(t, tokenLike.FindAllString(out, -1), "start %d wrote a token", i+1)
	}

	// The token is the admin's.
	c := startChild(t, url, "", "DATA_DIR="+second)
	status, res, err := clientFor(c, token).Post(token, `{ users { login } }`, nil)
	require.NoError(t, err)
	require.Equal(t, 200, status)
	require.Empty(t, res.Errors)
	require.Equal(t, 1, adminTokens())
}
