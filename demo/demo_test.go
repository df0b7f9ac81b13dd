package demo

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()

	_, err := Config{DataDir: dir}.token()
	require.ErrorContains(t, err, "DEMO_TOKEN")
	require.ErrorContains(t, err, "make run")

	require.NoError(t, os.WriteFile(filepath.Join(dir, adminTokenFile), []byte("  \n"), 0o600))
	_, err = Config{DataDir: dir}.token()
	require.ErrorContains(t, err, "is empty")

	require.NoError(t, os.WriteFile(filepath.Join(dir, adminTokenFile), []byte("  file-token\n"), 0o600))
	got, err := Config{DataDir: dir}.token()
	require.NoError(t, err)
	require.Equal(t, "file-token", got)

	got, err = Config{DataDir: dir, Token: "env-token"}.token()
	require.NoError(t, err)
	require.Equal(t, "env-token", got)
}
