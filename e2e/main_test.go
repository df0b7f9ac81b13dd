// Package e2e holds the process-level tests: the real erp binary (built
// once by TestMain) killed with SIGKILL, stopped with SIGTERM and run as
// two instances (TestProcess…), the npm GraphQL clients beside this file
// (TestNode…, *.mjs, node_modules from package-lock.json) and headless
// Chromium on the events page (TestBrowser…, browser/). Each test says
// what it needs; a missing tool fails the test when CI=true and skips it,
// saying what to install, otherwise. The in-process tests are next to the
// packages they test.
package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"erp/db/pgtest"
)

// erpBinary is the erp binary TestMain built from the module root (with
// -race when the tests run with it).
var erpBinary string

func TestMain(m *testing.M) {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	dir = filepath.Join(dir, "erp-e2e")
	if err := buildBinary(dir); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	pgtest.Main(m)
}

// buildBinary builds the erp binary into dir, under a name of its own
// for a race build, and renames it into place so that a concurrent run
// never starts a half-written file. The directory is kept: the next run
// overwrites the binary, and go build's cache makes that quick.
func buildBinary(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	name, args := "erp", []string{"build"}
	if raceEnabled {
		name, args = "erp-race", append(args, "-race")
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".%s.%d", name, os.Getpid()))
	cmd := exec.Command("go", append(args, "-o", tmp, "..")...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("go build the erp binary: %w", err)
	}
	erpBinary = filepath.Join(dir, name)
	return os.Rename(tmp, erpBinary)
}

// requireTool fails t when CI=true and skips it otherwise, saying what to
// install, unless the tool is there (missing is empty).
func requireTool(t *testing.T, missing, install string) {
	t.Helper()
	if missing == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is missing: %s", missing, install)
	}
	t.Skipf("%s is missing: %s (with CI=true this fails)", missing, install)
}
