// Package pgtest gives every test its own real PostgreSQL database, cloned
// from a template that is migrated once per test binary.
//
// A package's TestMain calls Main; its tests call NewDB or NewPool. Because
// pgtest imports package db, tests of db itself must live in package db_test.
//
// The server is the one TEST_DATABASE_URL names (a superuser connection
// string, PostgreSQL 13 or newer), else a private cluster that Main starts
// with localpg in a temp directory and removes afterwards.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"erp/db"
	"erp/db/localpg"
)

// tempPrefix names Main's temp directories: erp-pgtest-<pid>-<random>. The
// pid lets a later run remove the cluster of a test binary that died
// (a test panic or a -timeout) before its cleanup ran.
const tempPrefix = "erp-pgtest-"

// mainRan is set by Main before m.Run and read-only while tests run.
var mainRan bool

// Set once, by the first test that needs the server (startServer), and
// read-only afterwards.
var (
	serverOnce    sync.Once
	serverErr     error
	serverCleanup func()
	adminURL      string        // superuser connection string
	adminPool     *pgxpool.Pool // for CREATE and DROP DATABASE
)

var (
	tmplOnce sync.Once
	tmplName string // set when the template database exists, even if unmigrated
	tmplErr  error

	// createMu serialises CREATE DATABASE ... TEMPLATE: PostgreSQL refuses to
	// copy a database that another session is using, and the copying
	// session counts.
	createMu sync.Mutex
)

// Main is called from TestMain: it provides a PostgreSQL for the package's
// tests and exits with m.Run's code. The server is found or started when
// the first test asks for a database, so that a run of tests that need
// none (a fuzz target, a pure function) starts none. If TEST_DATABASE_URL
// is unset and no PostgreSQL binaries are installed, every test that asks
// fails with why: tests that need the database never skip.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	mainRan = true
	// A test binary killed by Ctrl-C or SIGTERM still stops its server.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-signals
		fmt.Fprintf(os.Stderr, "pgtest: %v: stopping PostgreSQL\n", sig)
		stopServer()
		os.Exit(1)
	}()
	defer stopServer() // also runs when m.Run panics on this goroutine
	return m.Run()
}

// startServer finds or starts the server and opens adminPool, on its
// first call; later calls return the first one's error.
func startServer() error {
	serverOnce.Do(func() {
		if !mainRan {
			serverErr = errors.New("pgtest: the package's TestMain must call pgtest.Main")
			return
		}
		// The server outlives every test, like the process that Main
		// roots: its context is the process's.
		logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		serverCleanup, serverErr = setup(context.Background(), logger)
		if serverErr != nil {
			serverErr = fmt.Errorf("pgtest: %w", serverErr)
		}
	})
	return serverErr
}

// stopServer stops a server startServer started (waiting for a start
// under way), and keeps any from starting afterwards.
func stopServer() {
	serverOnce.Do(func() { serverErr = errors.New("pgtest: the tests are over") })
	if serverCleanup != nil {
		serverCleanup()
	}
}

// setup finds or starts the server and opens adminPool. The returned cleanup
// drops the template, closes the pool and stops and removes a cluster we
// started; it is safe to call more than once.
func setup(ctx context.Context, logger *slog.Logger) (cleanup func(), err error) {
	var (
		cluster *localpg.Cluster
		tempDir string
	)
	stop := func() {
		if cluster != nil {
			if err := cluster.Stop(ctx); err != nil {
				fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
			}
		}
		if tempDir != "" {
			if err := os.RemoveAll(tempDir); err != nil {
				fmt.Fprintf(os.Stderr, "pgtest: remove %s: %v\n", tempDir, err)
			}
		}
	}
	if adminURL = os.Getenv("TEST_DATABASE_URL"); adminURL == "" {
		reapStale(ctx, logger)
		tempDir, err = os.MkdirTemp("", tempPrefix+strconv.Itoa(os.Getpid())+"-")
		if err != nil {
			return nil, fmt.Errorf("create temp dir for postgres: %w", err)
		}
		cluster, err = localpg.Start(ctx, localpg.Config{Dir: filepath.Join(tempDir, "pg"), NoSync: true, Logger: logger})
		if err != nil {
			stop()
			return nil, fmt.Errorf("start a PostgreSQL for the tests (or set TEST_DATABASE_URL to a superuser URL): %w", err)
		}
		adminURL = cluster.AdminURL()
	}
	adminPool, err = pgxpool.New(ctx, adminURL)
	if err == nil {
		err = adminPool.Ping(ctx)
	}
	if err != nil {
		if adminPool != nil {
			adminPool.Close()
		}
		stop()
		return nil, fmt.Errorf("connect to the test server: %w", err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			if tmplName != "" {
				if err := dropDatabase(ctx, tmplName); err != nil {
					fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
				}
			}
			adminPool.Close()
			stop()
		})
	}, nil
}

// NewDB creates a fresh database for t, cloned from a template that was
// migrated once per process with db.Migrate, and drops it at t.Cleanup. It
// returns its URL. It fails t if Main did not run or the server refuses.
func NewDB(t testing.TB) string {
	t.Helper()
	require.NoError(t, startServer())
	tmpl, err := template(t.Context())
	require.NoError(t, err, "pgtest: prepare the template database")

	name := "t_" + randomHex(8)
	require.NoError(t, createDatabase(t.Context(), name, tmpl))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), time.Minute)
		defer cancel()
		if err := dropDatabase(ctx, name); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	u, err := withDatabase(adminURL, name)
	require.NoError(t, err)
	return u
}

// NewPool is NewDB plus db.Connect; the pool is closed at cleanup, before
// its database is dropped.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	u := NewDB(t)
	pool, err := db.Connect(t.Context(), u)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// template returns the migrated template database, creating it on the
// first call. Later calls return the first call's result.
func template(ctx context.Context) (string, error) {
	tmplOnce.Do(func() {
		// Stays the result if createTemplate panics.
		tmplErr = errors.New("template creation panicked")
		tmplErr = createTemplate(ctx)
	})
	return tmplName, tmplErr
}

func createTemplate(ctx context.Context) error {
	name := fmt.Sprintf("erp_tmpl_%d_%s", os.Getpid(), randomHex(4))
	if _, err := adminPool.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return fmt.Errorf("create template database %s: %w", name, err)
	}
	tmplName = name
	u, err := withDatabase(adminURL, name)
	if err != nil {
		return err
	}
	pool, err := db.Connect(ctx, u)
	if err != nil {
		return fmt.Errorf("connect to template database %s: %w", name, err)
	}
	// Close before the first clone: a session on the template blocks it.
	defer pool.Close()
	if err := db.Migrate(ctx, pool, slog.New(slog.DiscardHandler)); err != nil {
		return fmt.Errorf("migrate template database %s: %w", name, err)
	}
	return nil
}

// createDatabase clones tmpl as name. It retries for up to about 5 s while
// the template is still in use, e.g. by a backend of the just-closed
// migration pool that has not exited yet.
func createDatabase(ctx context.Context, name, tmpl string) error {
	createMu.Lock()
	defer createMu.Unlock()
	const attempts = 50
	for i := 1; ; i++ {
		_, err := adminPool.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+tmpl)
		var pgErr *pgconn.PgError
		if err == nil || i == attempts || !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.ObjectInUse {
			if err != nil {
				return fmt.Errorf("create database %s from %s: %w", name, tmpl, err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("create database %s from %s: %w", name, tmpl, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// dropDatabase drops name, disconnecting its sessions.
func dropDatabase(ctx context.Context, name string) error {
	if _, err := adminPool.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// withDatabase returns connection string conn (a URL or key=value pairs)
// with its database replaced by name, which must be a plain identifier.
func withDatabase(conn, name string) (string, error) {
	if strings.HasPrefix(conn, "postgres://") || strings.HasPrefix(conn, "postgresql://") {
		u, err := url.Parse(conn)
		if err != nil {
			return "", fmt.Errorf("parse database url: %w", err)
		}
		u.Path, u.RawPath = "/"+name, ""
		return u.String(), nil
	}
	// A later key overrides an earlier one.
	return conn + " dbname=" + name, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand panics instead)
	return hex.EncodeToString(b)
}

// reapStale stops and removes the clusters of earlier test binaries that
// died without cleaning up. It only touches a postmaster whose command line
// names that directory, and only when the binary's pid is gone.
func reapStale(ctx context.Context, logger *slog.Logger) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempPrefix+"*"))
	for _, dir := range dirs {
		pidText, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(dir), tempPrefix), "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			continue // not ours, or its test binary may still run
		}
		data := filepath.Join(dir, "pg")
		if pm, ok := postmasterOf(data); ok {
			// Immediate shutdown: the data is thrown away anyway.
			_ = syscall.Kill(pm, syscall.SIGQUIT)
			for i := 0; i < 50 && syscall.Kill(pm, 0) == nil && !zombie(pm); i++ {
				time.Sleep(100 * time.Millisecond)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			logger.WarnContext(ctx, "remove stale test cluster", slog.String("dir", dir), slog.Any("err", err))
			continue
		}
		logger.WarnContext(ctx, "removed stale test cluster", slog.String("dir", dir), slog.Int("test_pid", pid))
	}
}

// postmasterOf returns the live postmaster serving data directory data.
func postmasterOf(data string) (int, bool) {
	raw, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return 0, false
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || !strings.Contains(string(cmdline), "postgres") {
		return 0, false
	}
	for _, arg := range strings.Split(string(cmdline), "\x00") {
		if arg == data {
			return pid, true
		}
	}
	return 0, false
}

func zombie(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return err == nil && strings.Contains(string(stat), ") Z ")
}
