package main

import (
	"bytes"
	"context"
	"encoding/json"
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

func TestMain(m *testing.M) { pgtest.Main(m) }

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
	body, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, s.URL+"/graphql", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	var out gqlResponse
	require.NoError(t, json.Unmarshal(raw, &out), "body: %s", raw)
	return res.StatusCode, out
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
