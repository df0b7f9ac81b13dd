package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"erp/db"
	"erp/db/pgtest"
)

// TestMain doubles as the server binary for tests that need a real child
// process (kill -9, several instances): with ERP_TEST_RUN_MAIN=1 it runs
// main's subcommands instead of the tests.
func TestMain(m *testing.M) {
	if os.Getenv("ERP_TEST_RUN_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Getenv, os.Stderr))
	}
	pgtest.Main(m)
}

// testServer is the whole product in-process on its own database: River
// started, the feed listening, the GraphQL handler served by serveHTTP on
// a loopback port.
type testServer struct {
	URL   string // base URL, e.g. http://127.0.0.1:41234
	Token string // the admin's bearer token
	Pool  *pgxpool.Pool
	app   *app

	stopServing context.CancelFunc
	served      chan error // serveHTTP's result, once it returned
	stopOnce    sync.Once
	stopErr     error
}

type serverOpts struct {
	dispatchInterval time.Duration
	// pool, when set, is used instead of a fresh database: a second
	// instance on the same database.
	pool *pgxpool.Pool
	// The rest go to appOptions as they are.
	keepAlive, initTimeout, shutdownTimeout time.Duration
	allowedOrigins                          []string
	apiOnly                                 bool
	feedBuffer                              int
	noIntrospection, noPlayground           bool
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.DiscardHandler)
}

// newTestServer starts a server; everything stops at test cleanup, through
// the same graceful shutdown as the binary's.
func newTestServer(t testing.TB, opts serverOpts) *testServer {
	t.Helper()
	ctx := context.Background()
	pool := opts.pool
	if pool == nil {
		pool = pgtest.NewPool(t)
	}
	if opts.dispatchInterval == 0 {
		opts.dispatchInterval = time.Minute
	}
	token, err := db.NewToken()
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := db.EnsureAdmin(ctx, tx, token)
		return err
	}))
	a, err := newApp(pool, appOptions{
		DispatchInterval: opts.dispatchInterval,
		AllowedOrigins:   opts.allowedOrigins,
		KeepAlive:        opts.keepAlive,
		InitTimeout:      opts.initTimeout,
		ShutdownTimeout:  opts.shutdownTimeout,
		APIOnly:          opts.apiOnly,
		FeedBuffer:       opts.feedBuffer,
		NoIntrospection:  opts.noIntrospection,
		NoPlayground:     opts.noPlayground,
	}, testLogger(t))
	require.NoError(t, err)
	require.NoError(t, a.start(ctx))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serveCtx, stopServing := context.WithCancel(ctx)
	s := &testServer{
		URL: "http://" + ln.Addr().String(), Token: token, Pool: pool, app: a,
		stopServing: stopServing, served: make(chan error, 1),
	}
	go func() { s.served <- a.serveHTTP(serveCtx, ln, nil) }()
	t.Cleanup(func() {
		if err := s.shutdown(); err != nil {
			t.Errorf("server shutdown: %v", err)
		}
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		a.stop(stopCtx)
	})
	select {
	case <-a.feed.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("feed did not start listening")
	}
	return s
}

// shutdown stops serving as SIGTERM would and returns serveHTTP's result;
// River and the feed keep running until cleanup. Safe to call again.
func (s *testServer) shutdown() error {
	s.stopOnce.Do(func() {
		s.stopServing()
		s.stopErr = <-s.served
	})
	return s.stopErr
}

// gqlResponse is a GraphQL response body.
type gqlResponse struct {
	Data   json.RawMessage `json:"data"`
	Errors []gqlError      `json:"errors"`
}

type gqlError struct {
	Message    string         `json:"message"`
	Path       []any          `json:"path"`
	Extensions map[string]any `json:"extensions"`
}

// do posts one GraphQL request with the given token ("" for none) and
// returns the HTTP status and the decoded body.
func (s *testServer) do(t testing.TB, token, query string, vars map[string]any) (int, gqlResponse) {
	t.Helper()
	status, res, err := s.post(token, query, vars)
	require.NoError(t, err)
	return status, res
}

// post is do for callers that expect the server may be gone.
func (s *testServer) post(token, query string, vars map[string]any) (int, gqlResponse, error) {
	body, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err != nil {
		return 0, gqlResponse{}, err
	}
	req, err := http.NewRequest(http.MethodPost, s.URL+"/graphql", bytes.NewReader(body))
	if err != nil {
		return 0, gqlResponse{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, gqlResponse{}, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, gqlResponse{}, err
	}
	var out gqlResponse
	if err := json.Unmarshal(raw, &out); err != nil {
		return 0, gqlResponse{}, fmt.Errorf("decode %q: %w", raw, err)
	}
	return res.StatusCode, out, nil
}

// gql runs a request as the admin, requires no errors and decodes data
// into a value of type T.
func gql[T any](t testing.TB, s *testServer, query string, vars map[string]any) T {
	t.Helper()
	status, res := s.do(t, s.Token, query, vars)
	require.Equal(t, http.StatusOK, status)
	require.Empty(t, res.Errors, "query: %s", query)
	var v T
	require.NoError(t, json.Unmarshal(res.Data, &v))
	return v
}

// gqlErr runs a request as the admin that must fail, and returns its
// first error.
func gqlErr(t testing.TB, s *testServer, query string, vars map[string]any) gqlError {
	t.Helper()
	_, res := s.do(t, s.Token, query, vars)
	require.NotEmpty(t, res.Errors, "query should have failed: %s", query)
	return res.Errors[0]
}

// waitFor polls cond every 20 ms until it holds or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
