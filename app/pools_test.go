package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"erp/app"
	"erp/app/apptest"
	"erp/app/config"
	"erp/db"
	"erp/db/pgtest"
)

// answerWithin bounds each request of the pool tests: far above any
// answer's time, it only turns a request stuck behind the work pool into a
// failure instead of a hung test.
const answerWithin = 30 * time.Second

// documentedSizes are the pools' sizes docs/operations.md (Connections) gives without
// pool_max_conns: API max(4, GOMAXPROCS) + 4, work max(4, GOMAXPROCS) + 5.
func documentedSizes() db.PoolSizes {
	return db.PoolSizes{API: int32(max(4, runtime.GOMAXPROCS(0)) + 4), Work: int32(max(4, runtime.GOMAXPROCS(0)) + 5)}
}

// poolsBundle is a running application and a client signed in to River UI.
type poolsBundle struct {
	s      *apptest.Server
	client *http.Client // with the admin's River UI session
}

func setupPools(t *testing.T) *poolsBundle {
	t.Helper()
	s := apptest.New(t)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	client := &http.Client{Jar: jar}
	// As the sign-in form posts it: from the server's own page.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL+"/riverui/login", strings.NewReader(url.Values{"token": {s.Token}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	res, err := client.Do(req)
	require.NoError(t, err)
	_ = res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode, "signed in, and sent on to River UI")
	return &poolsBundle{s: s, client: client}
}

// get answers GET path within answerWithin with its status and body.
func (b *poolsBundle) get(t *testing.T, path string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), answerWithin)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.s.URL+path, nil)
	require.NoError(t, err)
	res, err := b.client.Do(req)
	require.NoError(t, err, "GET %s", path)
	defer func() { _ = res.Body.Close() }()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(body)
}

// gql runs a GraphQL request as the admin within answerWithin, requires no
// errors and returns its data.
func (b *poolsBundle) gql(t *testing.T, query string, vars map[string]any) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), answerWithin)
	defer cancel()
	body, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.s.URL+"/graphql", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+b.s.Token)
	res, err := b.client.Do(req)
	require.NoError(t, err, "query: %s", query)
	defer func() { _ = res.Body.Close() }()
	var out struct {
		Data   map[string]any
		Errors []apptest.Error
	}
	require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
	require.Empty(t, out.Errors, "query: %s", query)
	return out.Data
}

// With every connection of the work pool held in a transaction, as busy
// delivery workers would hold them, the API still answers: queries,
// mutations (their dispatch jobs enqueued in their own transaction), the
// admin's mutations that enqueue deliveries, River UI, /metrics and
// /readyz. Background work resumes once the connections are back.
func TestAPIAnswersWhileTheWorkPoolIsFull(t *testing.T) {
	t.Parallel()
	b := setupPools(t)
	s := b.s
	want := documentedSizes()
	require.NotSame(t, s.DB.Pool, s.DB.Work, "the API and background work have a pool each")
	require.Equal(t, want, s.DB.Sizes)
	require.Equal(t, want.API, s.DB.Pool.Config().MaxConns)
	require.Equal(t, want.Work, s.DB.Work.Config().MaxConns)
	require.Zero(t, s.DB.MaxConns, "no pool_max_conns in the URL")

	apptest.SeedItem(t, s)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(rcv.Close)
	webhook := apptest.CreateWebhook(t, s, "busy-test", rcv.URL, "", []string{"doc.created"})
	apptest.WaitAllProcessed(t, s)

	// Take every connection the work pool has, each in a transaction.
	work := s.DB.Work
	held := make([]pgx.Tx, want.Work)
	for i := range held {
		ctx, cancel := context.WithTimeout(t.Context(), answerWithin)
		tx, err := work.Begin(ctx)
		cancel()
		require.NoError(t, err)
		held[i] = tx
	}
	release := func() {
		for _, tx := range held {
			_ = tx.Rollback(context.WithoutCancel(t.Context()))
		}
		held = nil
	}
	t.Cleanup(release)
	require.Equal(t, want.Work, work.Stat().AcquiredConns(), "the work pool is full")

	items := b.gql(t, `{ items { sku } }`, nil)
	require.Len(t, items["items"], 1)
	order := b.gql(t, apptest.CreateSalesOrder, map[string]any{"customer": "Пока заняты"})
	require.NotEmpty(t, order["createSalesOrder"])
	paused := b.gql(t, `mutation($id: ID!) { pauseSubscriber(id: $id) { paused } }`, map[string]any{"id": webhook})
	require.Equal(t, map[string]any{"paused": true}, paused["pauseSubscriber"])
	resumed := b.gql(t, `mutation($id: ID!) { resumeSubscriber(id: $id) { paused } }`, map[string]any{"id": webhook})
	require.Equal(t, map[string]any{"paused": false}, resumed["resumeSubscriber"])
	status, body := b.get(t, "/riverui/api/jobs?state=available")
	require.Equal(t, http.StatusOK, status, body)
	status, body = b.get(t, "/metrics")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, fmt.Sprintf(`erp_db_pool_connections{pool="work",state="acquired"} %d`, want.Work))
	require.Contains(t, body, `erp_db_pool_max_connections{pool="api"}`)
	status, body = b.get(t, "/readyz")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "\npools: "+want.String()+"\n")
	require.Equal(t, want.Work, work.Stat().AcquiredConns(), "all of it, all along")

	release()
	apptest.WaitAllProcessed(t, s)
}

// pool_max_conns in DATABASE_URL is the total of the two pools: the work
// pool keeps its size when there is room and the API gets the rest; when
// there is not, the API keeps half. The start log and /readyz say the
// sizes, and an application squeezed into 6 connections still works.
func TestPoolMaxConnsIsTheTotalOfBothPools(t *testing.T) {
	t.Parallel()
	want := documentedSizes()

	// The binary's path: DATABASE_URL through db.Open, the sizes in the
	// start log.
	var logs bytes.Buffer
	cfg := config.Default()
	cfg.DatabaseURL = pgtest.NewDB(t) + " pool_max_conns=100"
	cfg.DataDir = t.TempDir()
	require.NoError(t, app.Migrate(t.Context(), cfg, slog.New(slog.NewJSONHandler(&logs, nil))))
	var connected map[string]any
	for line := range bytes.Lines(logs.Bytes()) {
		var rec map[string]any
		require.NoError(t, json.Unmarshal(line, &rec))
		if rec["msg"] == "database connected" {
			connected = rec
		}
	}
	require.NotNil(t, connected, "the start log names the pools: %s", logs.String())
	require.Equal(t, "direct", connected["mode"])
	require.EqualValues(t, 100-want.Work, connected["api_conns"], "the API gets what the work pool leaves")
	require.EqualValues(t, want.Work, connected["work_conns"])
	require.EqualValues(t, 100, connected["pool_max_conns"])

	// Squeezed: 6 connections, half each; the application works on them.
	pool, err := db.Connect(t.Context(), pgtest.NewDB(t)+" pool_max_conns=6")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := apptest.NewOn(t, pool)
	require.Equal(t, db.PoolSizes{API: 3, Work: 3}, s.DB.Sizes)
	require.EqualValues(t, 3, s.DB.Pool.Config().MaxConns)
	require.EqualValues(t, 3, s.DB.Work.Config().MaxConns)
	b := &poolsBundle{s: s, client: http.DefaultClient}
	status, body := b.get(t, "/readyz")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "\npools: api 3, work 3 of pool_max_conns 6\n")
	apptest.SeedItem(t, s)
	b.gql(t, apptest.CreateSalesOrder, map[string]any{"customer": "Тесно"})
	apptest.WaitAllProcessed(t, s)
}
