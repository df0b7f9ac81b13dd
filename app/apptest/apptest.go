// Package apptest gives a test the whole application, running, on its own
// database, with clients for GraphQL over HTTP and websockets:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestX(t *testing.T) {
//		s := apptest.New(t, func(c *config.Config) { c.APIOnly = true })
//		got := apptest.GQL[struct{ Items []struct{ ID string } }](t, s, `{ items { id } }`, nil)
//		ws := apptest.DialWS(t, s, apptest.ProtoTransportWS)
//		…
//	}
//
// Options are fields of config.Config, starting from config.Default with
// WebhookAllowPrivate on (receivers in tests are on loopback). The
// package's tests must call pgtest.Main from TestMain.
package apptest

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
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"erp/app"
	"erp/app/config"
	"erp/db"
	"erp/db/catalog"
	"erp/db/pgtest"
)

// Server is the whole product in-process on its own database: River
// started, the feed listening, the handler served by App.Serve on a
// loopback port. A Server made by Client has only URL and Token: a client
// of a server running elsewhere (a child process).
type Server struct {
	URL   string // base URL, e.g. http://127.0.0.1:41234
	Token string // the admin's bearer token
	// Pool is the test's own pool on the database; the application runs on
	// DB's two pools, opened with Pool's configuration and sized as the
	// binary sizes its own (app.PoolSizes).
	Pool *pgxpool.Pool
	DB   *db.Database
	App  *app.App

	// logs keeps the application's log records of level info and above
	// (JSON lines).
	logs *lockedBuffer

	stopServing context.CancelFunc
	served      chan error // Serve's result, once it returned
	stopOnce    sync.Once
	stopErr     error
}

// Logger is the application's logger in tests: warnings and errors to
// stderr with -v, nothing otherwise.
func Logger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.DiscardHandler)
}

// New starts the application on a fresh database (pgtest.NewPool) with
// config.Default changed by each option in turn; everything stops at test
// cleanup, through the same graceful shutdown as the binary's.
func New(t testing.TB, opts ...func(*config.Config)) *Server {
	t.Helper()
	return NewOn(t, pgtest.NewPool(t), opts...)
}

// NewOn is New on an existing pool: a second instance on the same
// database. The application's pools take pool's configuration (its URL,
// pool_max_conns included, tracer and hooks).
func NewOn(t testing.TB, pool *pgxpool.Pool, opts ...func(*config.Config)) *Server {
	t.Helper()
	// Not cancelled with the test: cleanup stops everything in order.
	ctx := context.WithoutCancel(t.Context())
	cfg := config.Default()
	// Tests' webhook receivers are httptest servers on 127.0.0.1, which the
	// address guard refuses; the guard's own tests turn it back on.
	cfg.WebhookAllowPrivate = true
	// Listening first gives the server its own URL as PUBLIC_URL, so that
	// what it publishes under it (CloudEvents dataschema) resolves.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cfg.PublicURL = "http://" + ln.Addr().String()
	for _, o := range opts {
		o(&cfg)
	}
	token, err := db.NewToken()
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := db.EnsureAdmin(ctx, tx, token)
		return err
	}))
	d, err := db.OpenLike(ctx, pool, app.PoolSizes(cfg))
	require.NoError(t, err)
	t.Cleanup(d.Close) // after the application stopped
	logs := &lockedBuffer{}
	a, err := app.New(d, cfg, slog.New(slog.NewMultiHandler(Logger(t).Handler(),
		slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))))
	require.NoError(t, err)
	require.NoError(t, a.Start(ctx))
	serveCtx, stopServing := context.WithCancel(ctx)
	s := &Server{
		URL: "http://" + ln.Addr().String(), Token: token, Pool: pool, DB: d, App: a, logs: logs,
		stopServing: stopServing, served: make(chan error, 1),
	}
	go func() { s.served <- a.Serve(serveCtx, ln, nil) }()
	t.Cleanup(func() {
		if err := s.Shutdown(); err != nil {
			t.Errorf("server shutdown: %v", err)
		}
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		a.Stop(stopCtx)
		validateJournal(t, ctx, pool)
	})
	select {
	case <-a.Feed().Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("feed did not start listening")
	}
	return s
}

// validator compiles the catalog's schemas once for every test of the
// process.
var validator = sync.OnceValues(catalog.NewValidator)

// validateJournal fails t for every event in the database whose payload
// does not validate against its type's schema in the catalog (or whose type
// the catalog lacks), so that no payload drifts from what is published.
func validateJournal(t testing.TB, ctx context.Context, pool *pgxpool.Pool) {
	t.Helper()
	v, err := validator()
	if err != nil {
		t.Errorf("event catalog: %v", err)
		return
	}
	// Fresh connections: a test may have terminated the pool's backends
	// (a database that stopped answering), and a dead idle connection
	// would fail this read.
	pool.Reset()
	rows, err := pool.Query(ctx, "SELECT id, type, payload FROM events ORDER BY id")
	if err != nil {
		t.Errorf("read the journal to validate it: %v", err)
		return
	}
	var id int64
	var typ string
	var payload []byte
	_, err = pgx.ForEachRow(rows, []any{&id, &typ, &payload}, func() error {
		if err := v.Validate(typ, payload); err != nil {
			t.Errorf("event %d: %v", id, err)
		}
		return nil
	})
	if err != nil {
		t.Errorf("read the journal to validate it: %v", err)
	}
}

// Logs returns the records of level info and above the application logged
// so far, each its attributes by key ("msg", "level" and the record's own).
func (s *Server) Logs(t testing.TB) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range bytes.Lines(s.logs.Bytes()) {
		var rec map[string]any
		require.NoError(t, json.Unmarshal(line, &rec))
		out = append(out, rec)
	}
	return out
}

// lockedBuffer is a bytes.Buffer for concurrent writers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// Bytes returns a copy of what was written.
func (b *lockedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// Client addresses a server running elsewhere (a child process at url)
// with the same helpers.
func Client(url, token string) *Server {
	return &Server{URL: url, Token: token}
}

// As is s seen with another token (same URL, pool and application).
func (s *Server) As(token string) *Server {
	return &Server{URL: s.URL, Token: token, Pool: s.Pool, DB: s.DB, App: s.App}
}

// Shutdown stops serving as SIGTERM would and returns Serve's result;
// River and the feed keep running until cleanup. Safe to call again.
func (s *Server) Shutdown() error {
	s.stopOnce.Do(func() {
		s.stopServing()
		s.stopErr = <-s.served
	})
	return s.stopErr
}

// Response is a GraphQL response body.
type Response struct {
	Data   json.RawMessage `json:"data"`
	Errors []Error         `json:"errors"`
}

// Error is one GraphQL error of a Response.
type Error struct {
	Message    string         `json:"message"`
	Path       []any          `json:"path"`
	Extensions map[string]any `json:"extensions"`
}

// Do posts one GraphQL request with the given token ("" for none) and
// returns the HTTP status and the decoded body.
func (s *Server) Do(t testing.TB, token, query string, vars map[string]any) (int, Response) {
	t.Helper()
	status, res, err := s.Post(token, query, vars)
	require.NoError(t, err)
	return status, res
}

// Post is Do for callers that expect the server may be gone.
func (s *Server) Post(token, query string, vars map[string]any) (int, Response, error) {
	status, _, res, err := s.PostWith(token, query, vars, nil)
	return status, res, err
}

// PostWith is Post with header added to the request (an Idempotency-Key);
// it returns the response's headers too.
func (s *Server) PostWith(token, query string, vars map[string]any, header http.Header) (int, http.Header, Response, error) {
	body, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err != nil {
		return 0, nil, Response{}, err
	}
	req, err := http.NewRequest(http.MethodPost, s.URL+"/graphql", bytes.NewReader(body))
	if err != nil {
		return 0, nil, Response{}, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, Response{}, err
	}
	defer func() { _ = res.Body.Close() }()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, nil, Response{}, err
	}
	var out Response
	if err := json.Unmarshal(raw, &out); err != nil {
		return 0, nil, Response{}, fmt.Errorf("decode %q: %w", raw, err)
	}
	return res.StatusCode, res.Header, out, nil
}

// Get returns the status of GET path.
func (s *Server) Get(t testing.TB, path string) int {
	t.Helper()
	res, err := http.Get(s.URL + path)
	require.NoError(t, err)
	_ = res.Body.Close()
	return res.StatusCode
}

// GQL runs a request as the admin, requires no errors and decodes data
// into a value of type T.
func GQL[T any](t testing.TB, s *Server, query string, vars map[string]any) T {
	t.Helper()
	status, res := s.Do(t, s.Token, query, vars)
	require.Equal(t, http.StatusOK, status)
	require.Empty(t, res.Errors, "query: %s", query)
	var v T
	require.NoError(t, json.Unmarshal(res.Data, &v))
	return v
}

// GQLErr runs a request as the admin that must fail, and returns its
// first error.
func GQLErr(t testing.TB, s *Server, query string, vars map[string]any) Error {
	t.Helper()
	_, res := s.Do(t, s.Token, query, vars)
	require.NotEmpty(t, res.Errors, "query should have failed: %s", query)
	return res.Errors[0]
}

// WaitFor polls cond every 20 ms until it holds or timeout passes.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// SeedItem creates item A1 and warehouse MAIN, which CreateSalesOrder and
// most documents of the tests refer to.
func SeedItem(t testing.TB, s *Server) {
	t.Helper()
	GQL[map[string]any](t, s, `mutation { createItem(input: {sku: "A1", name: "Стол", unit: "шт"}) { id } }`, nil)
	GQL[map[string]any](t, s, `mutation { createWarehouse(input: {code: "MAIN", name: "Основной склад"}) { id } }`, nil)
}

// CreateSalesOrder is a mutation of one sales order for $customer, of 2.5
// A1 at 10 (SeedItem first).
const CreateSalesOrder = `mutation($customer: String!) {
	createSalesOrder(input: {customer: $customer, lines: [{sku: "A1", quantity: "2.500", price: "10"}]}) {
		id number status lines { lineNo sku quantity price }
	}
}`

// FeedSeq decodes the feed sequence of an eventProcessed cursor.
func FeedSeq(t testing.TB, cursor string) int64 {
	t.Helper()
	c, err := db.ParseCursor("cursor", cursor)
	require.NoError(t, err)
	require.NotNil(t, c.FeedSeq, "a processed event's cursor carries its feed sequence")
	return *c.FeedSeq
}

// JournalIDs lists the ids of the processed events of type typ in feed
// order.
func JournalIDs(t testing.TB, pool *pgxpool.Pool, typ string) []string {
	t.Helper()
	var ids []string
	for seq := int64(0); ; {
		page, err := db.EventsProcessedAfter(t.Context(), pool, db.EventFilter{Types: []string{typ}}, seq, 500)
		require.NoError(t, err)
		if len(page) == 0 {
			return ids
		}
		for _, ev := range page {
			ids = append(ids, strconv.FormatInt(ev.ID, 10))
		}
		seq = *page[len(page)-1].FeedSeq
	}
}

// RoleToken creates user login with role (the GraphQL enum, e.g. SALES)
// and returns a token of it. An INTEGRATION account is the web shop's:
// bound to source SHOP (IntegrationToken binds others).
func RoleToken(t testing.TB, s *Server, login, role string) string {
	t.Helper()
	if role == "INTEGRATION" {
		return IntegrationToken(t, s, login, "SHOP")
	}
	return userToken(t, s, map[string]any{"login": login, "displayName": login, "role": role})
}

// IntegrationToken creates INTEGRATION user login bound to sources (the
// GraphQL enum: SHOP, CRM) and returns a token of it.
func IntegrationToken(t testing.TB, s *Server, login string, sources ...string) string {
	t.Helper()
	return userToken(t, s, map[string]any{"login": login, "displayName": login, "role": "INTEGRATION", "sources": sources})
}

func userToken(t testing.TB, s *Server, in map[string]any) string {
	t.Helper()
	GQL[map[string]any](t, s, `mutation($in: UserInput!) { createUser(input: $in) { id } }`, map[string]any{"in": in})
	login := in["login"]
	res := GQL[struct {
		IssueToken struct{ Token string } `json:"issueToken"`
	}](t, s, `mutation($l: String!) { issueToken(login: $l, name: "test") { token } }`, map[string]any{"l": login})
	return res.IssueToken.Token
}

// CreateWebhook creates a webhook subscriber (3 attempts, 2 s timeout)
// for the event types with secret (a whsec_ one; "": the server generates
// one), requiring that it signs, and returns its id.
func CreateWebhook(t testing.TB, s *Server, name, url, secret string, types []string) string {
	t.Helper()
	in := map[string]any{"name": name, "url": url, "eventTypes": types, "maxAttempts": 3, "timeoutMs": 2000}
	if secret != "" {
		in["secret"] = secret
	}
	res := GQL[struct {
		CreateWebhookSubscriber struct {
			ID        string
			HasSecret bool
			Kind      string
		} `json:"createWebhookSubscriber"`
	}](t, s, `mutation($in: WebhookSubscriberInput!) { createWebhookSubscriber(input: $in) { id hasSecret kind } }`,
		map[string]any{"in": in})
	require.True(t, res.CreateWebhookSubscriber.HasSecret)
	require.Equal(t, "WEBHOOK", res.CreateWebhookSubscriber.Kind)
	return res.CreateWebhookSubscriber.ID
}

// WaitAllProcessed waits up to 20 s until no event of s's journal is
// unprocessed and no delivery is open (pending or failed): the journal
// and every subscriber, webhooks included, have caught up. An event is
// processed before its webhooks answer; WaitEventsProcessed waits for
// that alone.
func WaitAllProcessed(t testing.TB, s *Server) {
	t.Helper()
	type page struct {
		Deliveries struct{ Edges []struct{ Cursor string } } `json:"deliveries"`
	}
	WaitEventsProcessed(t, s)
	WaitFor(t, 20*time.Second, "every delivery finished", func() bool {
		for _, status := range []string{"PENDING", "FAILED"} {
			q := `query($s: DeliveryStatus) { deliveries(filter: {status: $s}, first: 1) { edges { cursor } } }`
			if len(GQL[page](t, s, q, map[string]any{"s": status}).Deliveries.Edges) > 0 {
				return false
			}
		}
		return true
	})
}

// WaitEventsProcessed waits up to 20 s until no event of s's journal is
// unprocessed.
func WaitEventsProcessed(t testing.TB, s *Server) {
	t.Helper()
	type page struct {
		Events struct{ Edges []struct{ Cursor string } } `json:"events"`
	}
	WaitFor(t, 20*time.Second, "every event processed", func() bool {
		return len(GQL[page](t, s, `{ events(filter: {processed: false}, first: 1) { edges { cursor } } }`, nil).Events.Edges) == 0
	})
}

// ConnectAdmin connects to the "postgres" database of s's cluster, to undo
// what a test did to its own database.
func ConnectAdmin(ctx context.Context, s *Server) (*pgx.Conn, error) {
	cfg := s.Pool.Config().ConnConfig.Copy()
	cfg.Database = "postgres"
	return pgx.ConnectConfig(ctx, cfg)
}
