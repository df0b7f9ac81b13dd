package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"erp/db"
	"erp/db/pgtest"
	"erp/demo"
	"erp/jobs"
)

// scrape reads /metrics and sums each family's samples by metric name
// (labels dropped), e.g. "erp_deliveries_total".
func scrape(t *testing.T, s *testServer) map[string]float64 {
	t.Helper()
	res, err := http.Get(s.URL + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	sums := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, rest, _ := strings.Cut(line, " ")
		if i := strings.IndexByte(line, '{'); i >= 0 {
			name = line[:i]
			_, rest, _ = strings.Cut(line[strings.LastIndexByte(line, '}'):], " ")
		}
		v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		require.NoError(t, err, "line %q", line)
		sums[name] += v
	}
	require.NoError(t, sc.Err())
	return sums
}

func TestMetricsAfterDemoReplay(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, serverOpts{})
	// A webhook that cannot be reached, one attempt only: a dead delivery
	// for every order.received, so the failure counters move too.
	gql[map[string]any](t, s, `mutation { createWebhookSubscriber(input: {name: "unreachable", url: "http://127.0.0.1:1/", eventTypes: ["order.received"], maxAttempts: 1, timeoutMs: 1000}) { id } }`, nil)
	// A live subscriber, open during the replay.
	c := dialWS(t, s, protoLegacyWS)
	c.init(s.Token)
	c.subscribe("1", feedSubscription, nil)

	var out bytes.Buffer
	_, err := demo.Replay(t.Context(), s.URL+"/graphql", s.Token, &out)
	require.NoError(t, err, "output:\n%s", out.String())
	c.nextEvent("1")

	m := scrape(t, s)
	for _, name := range []string{
		"erp_events_written_total",
		"erp_events_dispatched_total",
		"erp_events_failed_total",
		"erp_event_dispatch_latency_seconds_count",
		"erp_deliveries_total",
		"erp_feed_subscriptions",
		"erp_websocket_messages_total",
		"erp_graphql_requests_total",
		"erp_graphql_request_duration_seconds_count",
		"erp_river_jobs",
		"erp_db_pool_connections",
		"erp_db_pool_acquires_total",
		"go_goroutines",
	} {
		require.Positive(t, m[name], "metric %s", name)
	}
	require.GreaterOrEqual(t, m["erp_events_dispatched_total"], m["erp_events_written_total"]-m["erp_events_failed_total"]-5,
		"most written events are dispatched by now")
}

func TestRequestIDInHeaderAndExtensions(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, serverOpts{})
	req, err := http.NewRequest(http.MethodPost, s.URL+"/graphql", strings.NewReader(`{"query":"{ items { id } }"}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+s.Token)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	id := res.Header.Get("X-Request-Id")
	require.NotEmpty(t, id)
	require.Contains(t, string(body), `"requestId":"`+id+`"`)
}

// get returns the status of GET path.
func (s *testServer) get(t *testing.T, path string) int {
	t.Helper()
	res, err := http.Get(s.URL + path)
	require.NoError(t, err)
	res.Body.Close()
	return res.StatusCode
}

func TestReadyzFollowsTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestServer(t, serverOpts{})
	require.Equal(t, http.StatusOK, s.get(t, "/readyz"))
	require.Equal(t, http.StatusOK, s.get(t, "/healthz"))

	var dbName string
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT current_database()`).Scan(&dbName))
	admin, err := pgxConnectAdmin(s)
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, `ALTER DATABASE "`+dbName+`" ALLOW_CONNECTIONS false`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.Exec(ctx, `ALTER DATABASE "`+dbName+`" ALLOW_CONNECTIONS true`) })
	_, err = admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, dbName)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "/readyz unready", func() bool { return s.get(t, "/readyz") == http.StatusServiceUnavailable })
	require.Equal(t, http.StatusOK, s.get(t, "/healthz"), "the process is up all the same")

	_, err = admin.Exec(ctx, `ALTER DATABASE "`+dbName+`" ALLOW_CONNECTIONS true`)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "/readyz ready again", func() bool { return s.get(t, "/readyz") == http.StatusOK })
}

func TestSIGTERMDuringBurstLosesNothing(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	token := adminToken(t)
	const shutdownTimeout = 5 * time.Second
	a := startChild(t, url, token, "DISPATCH_INTERVAL=1s", "SHUTDOWN_TIMEOUT="+shutdownTimeout.String())
	api := clientFor(a, token)
	gql[map[string]any](t, api, `mutation { createItem(input: {sku: "A1", name: "Стол", unit: "шт"}) { id } }`, nil)

	var sent time.Time
	acked := crmBurst(t, a, token, 80000, func() {
		sent = time.Now()
		require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
		select {
		case <-a.done:
		case <-time.After(shutdownTimeout + 10*time.Second):
			t.Fatal("the server did not exit within its shutdown deadline")
		}
	})
	t.Logf("exited %s after SIGTERM", time.Since(sent).Round(time.Millisecond))
	require.Equal(t, 0, a.cmd.ProcessState.ExitCode(), "exit code")
	ackedN := len(acked)

	startChild(t, url, token, "DISPATCH_INTERVAL=1s")
	waitDBProcessed(t, url)
	// Every acknowledged order is in the journal with its events, processed.
	require.Equal(t, ackedN, countRows(t, url, fmt.Sprintf(`SELECT count(DISTINCT e.entity_id) FROM events e JOIN sales_orders so ON so.id = e.entity_id AND e.entity = 'sales_orders' WHERE e.type = 'order.received' AND e.processed_at IS NOT NULL AND so.external_id = ANY(ARRAY[%s])`, quotedKeys(acked))))
	require.Zero(t, countRows(t, url, `SELECT count(*) FROM deliveries WHERE status <> 'delivered'`))
}

func TestParseConfigNamesEachBadSetting(t *testing.T) {
	t.Parallel()
	tests := []struct {
		setting, value string
		flag           bool // given as a flag instead of the variable
	}{
		{"DATABASE_URL", "postgres://host:notaport/db", false},
		{"DATA_DIR", " ", false},
		{"ADDR", "localhost", false},
		{"ADDR", ":99999", false},
		{"DISPATCH_INTERVAL", "10ms", false},
		{"DISPATCH_INTERVAL", "soon", true},
		{"ADMIN_TOKEN", "two words", false},
		{"ALLOWED_ORIGINS", "not an origin", false},
		{"DEMO_URL", "localhost:8080", false},
		{"DEMO_TOKEN", "a\tb", false},
		{"TIME_ZONE", "Mars/Olympus", false},
		{"SHUTDOWN_TIMEOUT", "0s", false},
		{"SHUTDOWN_TIMEOUT", "-5s", true},
		{"RETENTION", "10m", false},
		{"RETENTION", "week", true},
		{"LOG_FORMAT", "xml", false},
		{"LOG_LEVEL", "loud", false},
		{"LOG_LEVEL", "verbose", true},
		{"INTROSPECTION", "maybe", false},
		{"PLAYGROUND", "nah", true},
		{"PPROF_ADDR", ":6060", false}, // every interface
		{"PPROF_ADDR", "0.0.0.0:6060", false},
		{"PPROF_ADDR", "10.0.0.5:6060", true},
		{"PPROF_ADDR", "localhost", false},
	}
	for _, tt := range tests {
		t.Run(tt.setting+"="+tt.value, func(t *testing.T) {
			env := map[string]string{}
			var args []string
			if tt.flag {
				args = []string{"-" + strings.ReplaceAll(strings.ToLower(tt.setting), "_", "-"), tt.value}
			} else {
				env[tt.setting] = tt.value
			}
			_, err := parseConfig("serve", args, func(k string) string { return env[k] }, io.Discard)
			require.Error(t, err)
			msg := err.Error()
			require.True(t, strings.HasPrefix(msg, tt.setting+": "), "got %q", msg)
			require.NotContains(t, msg, "\n", "one error only")
		})
	}

	// The user subcommand's own flags, before anything starts: a negative
	// lifetime must not become a token that never expires.
	for _, args := range [][]string{
		{"-login", "x2", "-token-ttl", "-5h"},
		{"-login", "x2", "-role", "boss"},
	} {
		_, err := parseConfig("user", args, func(string) string { return "" }, io.Discard)
		require.Error(t, err, "%v", args)
		require.True(t, strings.HasPrefix(err.Error(), args[2]+": "), "got %q", err)
	}
	cfg, err := parseConfig("user", []string{"-login", "x2", "-role", db.RoleSales, "-token-ttl", "720h"}, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 720*time.Hour, cfg.TokenTTL)

	// All bad at once: one line each.
	env := map[string]string{"LOG_LEVEL": "loud", "RETENTION": "1s", "ADDR": "x"}
	_, err = parseConfig("serve", nil, func(k string) string { return env[k] }, io.Discard)
	require.Error(t, err)
	require.Len(t, strings.Split(err.Error(), "\n"), 3, "got %q", err)

	// The defaults are valid.
	cfg, err = parseConfig("serve", nil, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 15*time.Second, cfg.ShutdownTimeout)
	require.Equal(t, 7*24*time.Hour, cfg.Retention)
}

func TestServeHelpListsEverySetting(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.Zero(t, run([]string{"serve", "-help"}, func(string) string { return "" }, &out))
	for _, setting := range []string{"DATABASE_URL", "DATA_DIR", "ADDR", "DISPATCH_INTERVAL", "ADMIN_TOKEN", "ALLOWED_ORIGINS",
		"DEMO_URL", "DEMO_TOKEN", "TIME_ZONE", "SHUTDOWN_TIMEOUT", "RETENTION", "LOG_FORMAT", "LOG_LEVEL", "PPROF_ADDR"} {
		require.Contains(t, out.String(), "("+setting+")")
	}
	require.Contains(t, out.String(), `(default "15s")`)
}

func TestSecondSignalExitsAtOnce(t *testing.T) {
	t.Parallel()
	// A webhook that hangs keeps a delivery job running, so the first
	// SIGTERM's shutdown waits for it (up to SHUTDOWN_TIMEOUT).
	reached := make(chan struct{}, 1)
	release := make(chan struct{})
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case reached <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); hook.Close() })
	url := pgtest.NewDB(t)
	token := adminToken(t)
	a := startChild(t, url, token, "SHUTDOWN_TIMEOUT=60s")
	api := clientFor(a, token)
	gql[map[string]any](t, api, `mutation($url: String!) { createWebhookSubscriber(input: {name: "slow", url: $url, eventTypes: ["doc.created"], timeoutMs: 60000}) { id } }`, map[string]any{"url": hook.URL})
	gql[map[string]any](t, api, `mutation { createItem(input: {sku: "A1", name: "Стол", unit: "шт"}) { id } }`, nil)
	gql[map[string]any](t, api, `mutation { createSalesOrder(input: {customer: "X", lines: [{sku: "A1", quantity: "1"}]}) { id } }`, nil)
	select {
	case <-reached:
	case <-time.After(30 * time.Second):
		t.Fatal("the webhook was not called")
	}

	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-a.done:
		t.Fatal("the first signal should wait for the running delivery")
	case <-time.After(500 * time.Millisecond):
	}
	sent := time.Now()
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the second signal did not end the process")
	}
	t.Logf("exited %s after the second signal", time.Since(sent).Round(time.Millisecond))
	require.Equal(t, 1, a.cmd.ProcessState.ExitCode())
}

func TestRetentionPrunesDeliveredAndPurgesDead(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, serverOpts{})
	seedItem(t, s)
	gql[map[string]any](t, s, `mutation { createWebhookSubscriber(input: {name: "gone", url: "http://127.0.0.1:1/", eventTypes: ["doc.created"], maxAttempts: 1, timeoutMs: 1000}) { id } }`, nil)
	gql[map[string]any](t, s, createSalesOrder, map[string]any{"customer": "r"})
	waitAllProcessed(t, s)
	count := func(status string) int {
		var n int
		require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM deliveries WHERE status = $1`, status).Scan(&n))
		return n
	}
	require.Equal(t, 1, count("dead"))
	delivered := count("delivered")
	require.Positive(t, delivered)

	// Nothing is old enough yet.
	n, err := jobs.PruneDeliveries(t.Context(), s.Pool, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Zero(t, n)
	purged := gql[struct{ PurgeDeadDeliveries int }](t, s, `mutation($t: DateTime!) { purgeDeadDeliveries(olderThan: $t, subscriber: "other") }`,
		map[string]any{"t": time.Now().Add(time.Hour).Format(time.RFC3339)})
	require.Zero(t, purged.PurgeDeadDeliveries, "another subscriber's")

	// Later: delivered records go, dead ones stay until purged.
	n, err = jobs.PruneDeliveries(t.Context(), s.Pool, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, int64(delivered), n)
	require.Zero(t, count("delivered"))
	require.Equal(t, 1, count("dead"))
	purged = gql[struct{ PurgeDeadDeliveries int }](t, s, `mutation($t: DateTime!) { purgeDeadDeliveries(olderThan: $t, subscriber: "gone") }`,
		map[string]any{"t": time.Now().Add(time.Hour).Format(time.RFC3339)})
	require.Equal(t, 1, purged.PurgeDeadDeliveries)
	require.Zero(t, count("dead"))
	var events int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM events WHERE processed_at IS NULL`).Scan(&events))
	require.Zero(t, events, "events stay processed")
}

func TestServeHelpPrintsNoSecrets(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": "postgres://erp:s3cret@db/erp", "ADMIN_TOKEN": "admin-secret", "DEMO_TOKEN": "demo-secret"}
	var out bytes.Buffer
	require.Zero(t, run([]string{"serve", "-help"}, func(k string) string { return env[k] }, &out))
	for _, secret := range []string{"s3cret", "admin-secret", "demo-secret"} {
		require.NotContains(t, out.String(), secret)
	}
	cfg, err := parseConfig("serve", nil, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	require.Equal(t, env["DATABASE_URL"], cfg.DatabaseURL)
	require.Equal(t, env["ADMIN_TOKEN"], cfg.AdminToken)
	cfg, err = parseConfig("serve", []string{"-admin-token", "flag-wins"}, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "flag-wins", cfg.AdminToken)
}

func TestPprofListenerIsOptInLoopbackAndStopsWithTheServer(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"127.0.0.1:6060", "localhost:0", "[::1]:6060"} {
		cfg, err := parseConfig("serve", nil, func(k string) string { return map[string]string{"PPROF_ADDR": addr}[k] }, io.Discard)
		require.NoError(t, err, addr)
		require.Equal(t, addr, cfg.PprofAddr)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	pprofAddr := ln.Addr().String()
	require.NoError(t, ln.Close())
	a := startChild(t, pgtest.NewDB(t), adminToken(t), "PPROF_ADDR="+pprofAddr)

	res, err := http.Get("http://" + pprofAddr + "/debug/pprof/heap?debug=1")
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, string(body), "# HeapAlloc = ", "MemStats follow the heap profile")

	res, err = http.Get(a.URL + "/debug/pprof/heap")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusNotFound, res.StatusCode, "profiles are not on the API's address")

	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not exit")
	}
	_, err = net.DialTimeout("tcp", pprofAddr, time.Second)
	require.Error(t, err, "the pprof listener closed with the server")
}
