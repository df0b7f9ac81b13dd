package localpg

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// start starts a NoSync cluster in dir and stops it at cleanup.
func start(t *testing.T, dir string) *Cluster {
	t.Helper()
	c, err := Start(t.Context(), Config{Dir: dir, DBName: "erp", NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, c.Stop(context.WithoutCancel(t.Context())))
	})
	return c
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.WithoutCancel(t.Context())) })
	return conn
}

func postmasterPID(t *testing.T, c *Cluster) int {
	t.Helper()
	pid, ok := lockPID(filepath.Join(c.dir, "postmaster.pid"))
	require.True(t, ok, "postmaster.pid in %s", c.dir)
	return pid
}

// The tests that Start again in a directory whose owner lock they have
// just released are not parallel: a sibling test's fork holds a copy of
// this process's descriptors, the lock's among them, until its child
// execs, and a Start in that moment finds the lock held (it failed CI
// once; with two goroutines running exec, 0.7 % of relocks right after a
// close find the flock held).
func TestStartStopRestart(t *testing.T) {
	// A space and a quote exercise the quoting of pg_ctl's -o and of URL.
	dir := filepath.Join(t.TempDir(), "it's pg")

	c := start(t, dir)
	require.True(t, filepath.IsAbs(c.dir))
	conn := connect(t, c.URL())
	var one int
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT 1").Scan(&one))
	require.Equal(t, 1, one)
	var db, encoding, collate string
	require.NoError(t, conn.QueryRow(t.Context(),
		"SELECT current_database(), pg_encoding_to_char(encoding), datcollate FROM pg_database WHERE datname = current_database()").
		Scan(&db, &encoding, &collate))
	require.Equal(t, "erp", db)
	require.Equal(t, "UTF8", encoding)
	require.Contains(t, []string{"C.UTF-8", "C"}, collate)
	_, err := conn.Exec(t.Context(), "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('survives restart')")
	require.NoError(t, err)
	require.NoError(t, conn.Close(t.Context()))

	require.NoError(t, c.Stop(t.Context()))
	require.NoError(t, c.Stop(t.Context()), "second Stop")
	_, err = os.Stat(filepath.Join(dir, "postmaster.pid"))
	require.ErrorIs(t, err, os.ErrNotExist, "server still running after Stop")

	c2 := start(t, dir)
	require.Equal(t, c.URL(), c2.URL())
	var v string
	require.NoError(t, connect(t, c2.URL()).QueryRow(t.Context(), "SELECT v FROM kept").Scan(&v))
	require.Equal(t, "survives restart", v)
}

func TestSocketOnly(t *testing.T) {
	t.Parallel()
	c := start(t, filepath.Join(t.TempDir(), "pg"))
	conn := connect(t, c.AdminURL())

	settings := map[string]string{
		"listen_addresses":        "",
		"unix_socket_directories": c.socketDir,
		"unix_socket_permissions": "0700",
		"max_connections":         "200",
		"fsync":                   "off",
		"port":                    "5432",
	}
	for name, want := range settings {
		var got string
		require.NoError(t, conn.QueryRow(t.Context(), "SELECT current_setting($1)", name).Scan(&got))
		require.Equal(t, want, got, name)
	}
	var db, role string
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT current_database(), current_user").Scan(&db, &role))
	require.Equal(t, "postgres", db)
	require.Equal(t, "postgres", role)

	info, err := os.Stat(c.socketDir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), info.Mode().Perm(), "socket directory mode")

	// The postmaster lives in a process group of its own, away from the
	// terminal's Ctrl-C.
	pid := postmasterPID(t, c)
	pgid, err := syscall.Getpgid(pid)
	require.NoError(t, err)
	require.NotEqual(t, syscall.Getpgrp(), pgid)

	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		require.NoError(t, err)
		info, err := os.Stat("/proc/" + strconv.Itoa(pid))
		require.NoError(t, err)
		require.Equal(t, u.Uid, strconv.Itoa(int(info.Sys().(*syscall.Stat_t).Uid)), "postmaster's OS user")
	}
}

func TestStartAfterKill(t *testing.T) { // not parallel: see TestStartStopRestart
	dir := filepath.Join(t.TempDir(), "pg")
	// With fsync and synchronous_commit on, as in the dev cluster, a
	// committed row survives the crash.
	c, err := Start(t.Context(), Config{Dir: dir, DBName: "erp"})
	require.NoError(t, err)
	_, err = connect(t, c.URL()).Exec(t.Context(), "CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)")
	require.NoError(t, err)

	pid := postmasterPID(t, c)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	require.Eventually(t, func() bool { return !alive(pid) }, 10*time.Second, 10*time.Millisecond, "postmaster %d survived SIGKILL", pid)
	_, err = os.Stat(filepath.Join(dir, "postmaster.pid"))
	require.NoError(t, err, "the killed server left no postmaster.pid to test with")
	c.releaseOwner() // the process that started it went down with it

	c2 := start(t, dir)
	var v int
	require.NoError(t, connect(t, c2.URL()).QueryRow(t.Context(), "SELECT v FROM kept").Scan(&v))
	require.Equal(t, 42, v)
	require.NotEqual(t, pid, postmasterPID(t, c2))
}

// alive reports whether pid runs, counting a zombie as dead.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return err == nil && !strings.Contains(string(stat), ") Z ")
}

func TestStartTwiceSaysTheDirectoryIsInUse(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "pg")
	c := start(t, dir)

	_, err := Start(t.Context(), Config{Dir: dir, NoSync: true})
	require.EqualError(t, err, fmt.Sprintf("start postgres in %s: another process uses this data directory (it holds %s.lock), "+
		"probably another erp (make run, erp serve); stop it first, or set DATABASE_URL to use its server", dir, dir))
	connect(t, c.URL()) // and the first one still serves
}

// A process that started the server and died without stopping it (kill -9)
// leaves the server running and the lock free: the next Start stops that
// server and starts its own, keeping the data.
func TestStartStopsTheServerACrashedProcessLeft(t *testing.T) { // not parallel: see TestStartStopRestart
	dir := filepath.Join(t.TempDir(), "pg")
	c := start(t, dir)
	_, err := connect(t, c.URL()).Exec(t.Context(), "CREATE TABLE kept (v int); INSERT INTO kept VALUES (7)")
	require.NoError(t, err)
	orphan := postmasterPID(t, c)
	c.releaseOwner() // what the kernel does when the owning process dies

	c2 := start(t, dir)
	require.NotEqual(t, orphan, postmasterPID(t, c2))
	require.False(t, alive(orphan), "the orphaned server %d still runs", orphan)
	var v int
	require.NoError(t, connect(t, c2.URL()).QueryRow(t.Context(), "SELECT v FROM kept").Scan(&v))
	require.Equal(t, 7, v)
}

func TestLongDirUsesShortSocketDir(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60), "pg")
	c := start(t, dir)
	require.True(t, c.tmpSocket)
	require.True(t, strings.HasPrefix(filepath.Base(c.socketDir), "erp-pg-"), c.socketDir)
	require.LessOrEqual(t, len(filepath.Join(c.socketDir, ".s.PGSQL.5432")), maxSocketPath)

	var one int
	require.NoError(t, connect(t, c.URL()).QueryRow(t.Context(), "SELECT 1").Scan(&one))
	require.NoError(t, c.Stop(t.Context()))
	_, err := os.Stat(c.socketDir)
	require.ErrorIs(t, err, os.ErrNotExist, "Stop leaves the temp socket directory")
}

func TestNonEmptyDirWithoutCluster(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o600))

	_, err := Start(t.Context(), Config{Dir: dir, NoSync: true})
	require.ErrorContains(t, err, "not empty and holds no PG_VERSION")
	data, err := os.ReadFile(filepath.Join(dir, "notes.txt"))
	require.NoError(t, err)
	require.Equal(t, "mine", string(data))
}

func TestUnquotableDir(t *testing.T) {
	t.Parallel()
	_, err := Start(t.Context(), Config{Dir: filepath.Join(t.TempDir(), "$HOME")})
	require.ErrorContains(t, err, "contains a character pg_ctl cannot quote")
}

func TestFindBinaries(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	fake := func(dir string, names ...string) string {
		require.NoError(t, os.MkdirAll(dir, 0o755))
		for _, n := range names {
			require.NoError(t, os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\n"), 0o755))
		}
		return dir
	}
	all := []string{"initdb", "pg_ctl", "postgres"}
	lib := filepath.Join(root, "lib", "postgresql")
	fake(filepath.Join(lib, "9.6", "bin"), all...)
	v10 := fake(filepath.Join(lib, "10", "bin"), all...)
	fake(filepath.Join(lib, "16", "bin"), "initdb", "pg_ctl") // incomplete
	pattern := filepath.Join(lib, "*", "bin")

	// A PATH entry linking initdb resolves to the link's target directory.
	linked := fake(filepath.Join(root, "local", "bin"))
	require.NoError(t, os.Symlink(filepath.Join(v10, "initdb"), filepath.Join(linked, "initdb")))
	otherBin := fake(filepath.Join(root, "other", "bin"), all...)

	tests := []struct {
		name, path, pattern, want string
	}{
		{"newest complete version", "", pattern, v10},
		{"PATH before lib dirs", strings.Join([]string{"relative", filepath.Join(root, "empty"), otherBin}, ":"), pattern, otherBin},
		{"PATH symlink resolved", linked, pattern, v10},
	}
	for _, tt := range tests {
		got, err := findBinaries(tt.path, tt.pattern)
		require.NoError(t, err, tt.name)
		require.Equal(t, tt.want, got, tt.name)
	}

	_, err := findBinaries(filepath.Join(root, "empty"), filepath.Join(root, "nowhere", "*", "bin"))
	require.EqualError(t, err, "no PostgreSQL server binaries (initdb, pg_ctl) found in PATH or /usr/lib/postgresql/*/bin: install the distro's postgresql package (apt-get install postgresql) or set DATABASE_URL")
	require.True(t, errors.Is(err, errNoBinaries))
}

func TestCompareVersions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b string
		want int // sign
	}{
		{"9.6", "10", -1},
		{"15", "15", 0},
		{"16", "15", 1},
		{"9.6", "9.5", 1},
	}
	for _, tt := range tests {
		got := compareVersions(tt.a, tt.b)
		require.Equal(t, tt.want, sign(got), fmt.Sprintf("compareVersions(%q, %q) = %d", tt.a, tt.b, got))
	}
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}

func TestQuoteValue(t *testing.T) {
	t.Parallel()
	c := &Cluster{socketDir: `/tmp/it's a \dir`, dbName: "erp"}
	cfg, err := pgx.ParseConfig(c.URL())
	require.NoError(t, err)
	require.Equal(t, `/tmp/it's a \dir`, cfg.Host)
	require.Equal(t, uint16(5432), cfg.Port)
	require.Equal(t, "erp", cfg.Database)
	require.Equal(t, "postgres", cfg.User)
}

// BenchmarkStartCold measures Start with initdb plus Stop, fsync on as in the
// dev cluster.
func BenchmarkStartCold(b *testing.B) {
	for b.Loop() {
		c, err := Start(b.Context(), Config{Dir: filepath.Join(b.TempDir(), "pg"), DBName: "erp"})
		require.NoError(b, err)
		require.NoError(b, c.Stop(b.Context()))
	}
}

// BenchmarkStartWarm measures Start and Stop of an existing cluster.
func BenchmarkStartWarm(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "pg")
	c, err := Start(b.Context(), Config{Dir: dir, DBName: "erp"})
	require.NoError(b, err)
	require.NoError(b, c.Stop(b.Context()))
	for b.Loop() {
		c, err := Start(b.Context(), Config{Dir: dir, DBName: "erp"})
		require.NoError(b, err)
		require.NoError(b, c.Stop(b.Context()))
	}
}
