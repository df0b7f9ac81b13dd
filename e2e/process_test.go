package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"erp/app/apptest"
	"erp/db"
	"erp/db/pgtest"
)

// child is the server running as a separate OS process (the erp binary
// TestMain built), so that it can be killed for real.
type child struct {
	t    *testing.T
	cmd  *exec.Cmd
	URL  string
	done chan struct{}
}

// startChild runs `serve` against databaseURL with the given admin token
// and waits until /healthz answers.
func startChild(t *testing.T, databaseURL, token string, env ...string) *child {
	t.Helper()
	return startChildOutput(t, nil, databaseURL, token, env...)
}

// startChildOutput is startChild with the process's stdout and stderr both
// written to out, when out is not nil; read it once the process ended.
func startChildOutput(t *testing.T, out io.Writer, databaseURL, token string, env ...string) *child {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	cmd := exec.Command(erpBinary, "serve")
	cmd.Env = append(os.Environ(),
		"DATABASE_URL="+databaseURL,
		"ADDR="+addr,
		"ADMIN_TOKEN="+token,
		"DATA_DIR="+t.TempDir(),
		// The tests' webhook receivers are on loopback.
		"WEBHOOK_ALLOW_PRIVATE=true",
	)
	cmd.Env = append(cmd.Env, env...)
	switch {
	case out != nil:
		cmd.Stdout, cmd.Stderr = out, out
	case testing.Verbose():
		cmd.Stderr = os.Stderr
	}
	require.NoError(t, cmd.Start())
	c := &child{t: t, cmd: cmd, URL: "http://" + addr, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(c.done) }()
	t.Cleanup(c.kill)
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := http.Get(c.URL + "/healthz")
		if err == nil {
			_ = res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return c
			}
		}
		select {
		case <-c.done:
			t.Fatalf("server process exited during start: %v", cmd.ProcessState)
		default:
		}
		require.False(t, time.Now().After(deadline), "server did not start")
		time.Sleep(50 * time.Millisecond)
	}
}

// kill sends SIGKILL: no shutdown code runs, open transactions die with
// the connections.
func (c *child) kill() {
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// clientFor addresses a child process with the test server helpers.
func clientFor(c *child, token string) *apptest.Server {
	return apptest.Client(c.URL, token)
}

func adminToken(t *testing.T) string {
	t.Helper()
	token, err := db.NewToken()
	require.NoError(t, err)
	return token
}

func countRows(t *testing.T, url, sql string) int {
	t.Helper()
	pool, err := db.Connect(context.Background(), url)
	require.NoError(t, err)
	defer pool.Close()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), sql).Scan(&n))
	return n
}

func TestProcessKillDuringDispatchLosesNothing(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	token := adminToken(t)
	a := startChild(t, url, token, "DISPATCH_INTERVAL=1s")
	api := clientFor(a, token)
	apptest.GQL[map[string]any](t, api, `mutation { createItem(input: {sku: "A1", name: "Стол", unit: "шт"}) { id } }`, nil)

	// Four writers send CRM orders; the server is killed while they run.
	acked := crmBurst(t, a, token, 70000, a.kill)
	ackedN := len(acked)
	unprocessed := countRows(t, url, `SELECT count(*) FROM events WHERE processed_at IS NULL`)
	t.Logf("killed after %d acknowledged orders; %d events unprocessed at the kill", ackedN, unprocessed)

	// Restart: the sweep runs at start (RunOnStart) and picks up the rest.
	startChild(t, url, token, "DISPATCH_INTERVAL=1s")
	waitDBProcessed(t, url)
	// Every acknowledged order exists with its three events (doc.created,
	// order.received, order_acceptance's doc.status_changed), processed;
	// the built-in subscriber's delivery happened once per event.
	require.Equal(t, ackedN, countRows(t, url, fmt.Sprintf(`SELECT count(*) FROM sales_orders WHERE external_id = ANY(ARRAY[%s])`, quotedKeys(acked))))
	require.Zero(t, countRows(t, url, `SELECT count(*) FROM sales_orders so WHERE (SELECT count(*) FROM events e WHERE e.entity = 'sales_orders' AND e.entity_id = so.id) <> 3`))
	require.Zero(t, countRows(t, url, `SELECT count(*) FROM sales_orders so WHERE (SELECT count(*) FROM events e WHERE e.entity = 'sales_orders' AND e.entity_id = so.id AND e.type = 'doc.status_changed') <> 1`))
	require.Zero(t, countRows(t, url, `SELECT count(*) FROM sales_orders WHERE status <> 'accepted'`))
	require.Zero(t, countRows(t, url, `SELECT count(*) FROM deliveries WHERE status <> 'delivered'`))
	require.Equal(t, countRows(t, url, `SELECT count(*) FROM events WHERE type = 'order.received'`),
		countRows(t, url, `SELECT count(*) FROM deliveries d JOIN subscribers s ON s.id = d.subscriber_id WHERE s.name = 'order_acceptance'`))
	require.Zero(t, countRows(t, url, `SELECT count(*) FROM events WHERE processed_at < created_at`))
}

// crmBurst sends 4 × 60 CRM orders (external ids base, base+1, …) from
// four writers to c until c exits, calls interrupt once, from the calling
// goroutine, when half of them are acknowledged, waits for the writers and
// returns the acknowledged external ids.
func crmBurst(t *testing.T, c *child, token string, base int, interrupt func()) map[string]bool {
	t.Helper()
	const writers, perWriter = 4, 60
	api := clientFor(c, token)
	var mu sync.Mutex
	acked := map[string]bool{}
	half := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				id := fmt.Sprint(base + w*perWriter + i)
				status, res, err := api.Post(token, `mutation($id: String!) { receiveOrder(input: {source: CRM, externalId: $id, customer: "X", lines: [{sku: "A1", quantity: "1"}]}) { order { id } } }`, map[string]any{"id": id})
				if err == nil && status == http.StatusOK && len(res.Errors) == 0 {
					mu.Lock()
					acked[id] = true
					if len(acked) == writers*perWriter/2 {
						close(half)
					}
					mu.Unlock()
				}
				select {
				case <-c.done:
					return
				default:
				}
			}
		})
	}
	<-half
	interrupt()
	wg.Wait()
	require.GreaterOrEqual(t, len(acked), writers*perWriter/2)
	return acked
}

// waitDBProcessed waits up to a minute until no event of the database at
// url is unprocessed.
func waitDBProcessed(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for countRows(t, url, `SELECT count(*) FROM events WHERE processed_at IS NULL`) > 0 {
		require.False(t, time.Now().After(deadline), "events still unprocessed a minute after restart")
		time.Sleep(100 * time.Millisecond)
	}
}

func quotedKeys(m map[string]bool) string {
	out := ""
	for k := range m {
		if out != "" {
			out += ","
		}
		out += "'" + k + "'"
	}
	return out
}

func TestProcessTwoInstancesOneSweepPerTick(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	token := adminToken(t)
	a := startChild(t, url, token, "DISPATCH_INTERVAL=1s")
	b := startChild(t, url, token, "DISPATCH_INTERVAL=1s")
	apptest.GQL[map[string]any](t, clientFor(a, token), `mutation { createItem(input: {sku: "A1", name: "Стол", unit: "шт"}) { id } }`, nil)

	// Both instances take mutations; each event is delivered once.
	var wg sync.WaitGroup
	for i := range 40 {
		c := a
		if i%2 == 1 {
			c = b
		}
		wg.Go(func() {
			apptest.GQL[map[string]any](t, clientFor(c, token), `mutation($id: String!) { receiveOrder(input: {source: CRM, externalId: $id, customer: "X", lines: [{sku: "A1", quantity: "1"}]}) { order { id } } }`,
				map[string]any{"id": fmt.Sprint(80000 + i)})
		})
	}
	wg.Wait()
	start := time.Now()
	time.Sleep(4 * time.Second)
	elapsed := time.Since(start)

	require.Zero(t, countRows(t, url, `SELECT count(*) FROM events WHERE processed_at IS NULL`))
	require.Zero(t, countRows(t, url, `SELECT count(*) FROM deliveries WHERE attempts <> 1 OR status <> 'delivered'`),
		"a delivery was attempted twice")
	// One sweep per tick cluster-wide: River's leader alone schedules them.
	sweeps := countRows(t, url, `SELECT count(*) FROM river_job WHERE kind = 'sweep_events' AND created_at >= now() - interval '4 seconds'`)
	maxSweeps := int(elapsed/time.Second) + 2
	require.LessOrEqual(t, sweeps, maxSweeps, "two instances must not both run the periodic sweep")
	// The leader sweeps every second; its election can lag on a busy
	// machine, so the lower bound waits rather than counting a window.
	apptest.WaitFor(t, 15*time.Second, "the leader's periodic sweeps", func() bool {
		return countRows(t, url, `SELECT count(*) FROM river_job WHERE kind = 'sweep_events'`) >= 2
	})

	// Kill the leader, mid-interval: the other instance takes over within
	// River's leadership TTL and sweeps what no job would process (an event
	// journaled without its dispatch job).
	var leader string
	pool, err := db.Connect(context.Background(), url)
	require.NoError(t, err)
	defer pool.Close()
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT leader_id FROM river_leader`).Scan(&leader))
	survivor := b
	switch {
	case strings.Contains(leader, fmt.Sprintf("_pid%d_", a.cmd.Process.Pid)):
		a.kill()
	case strings.Contains(leader, fmt.Sprintf("_pid%d_", b.cmd.Process.Pid)):
		b.kill()
		survivor = a
	default:
		t.Fatalf("leader %q is neither child", leader)
	}
	_, err = pool.Exec(context.Background(), `INSERT INTO events (type, entity, entity_id, payload) VALUES ('test.orphan', 'sales_orders', 1, '{}')`)
	require.NoError(t, err)
	deadline := time.Now().Add(45 * time.Second)
	for countRows(t, url, `SELECT count(*) FROM events WHERE processed_at IS NULL`) > 0 {
		require.False(t, time.Now().After(deadline), "the orphaned event was not swept after the leader died")
		time.Sleep(200 * time.Millisecond)
	}
	var newLeader string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT leader_id FROM river_leader`).Scan(&newLeader))
	require.Contains(t, newLeader, fmt.Sprintf("_pid%d_", survivor.cmd.Process.Pid))
}

func TestProcessSIGTERMDuringBurstLosesNothing(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	token := adminToken(t)
	const shutdownTimeout = 5 * time.Second
	a := startChild(t, url, token, "DISPATCH_INTERVAL=1s", "SHUTDOWN_TIMEOUT="+shutdownTimeout.String())
	api := clientFor(a, token)
	apptest.GQL[map[string]any](t, api, `mutation { createItem(input: {sku: "A1", name: "Стол", unit: "шт"}) { id } }`, nil)

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

func TestProcessSecondSignalExitsAtOnce(t *testing.T) {
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
	apptest.GQL[map[string]any](t, api, `mutation($url: String!) { createWebhookSubscriber(input: {name: "slow", url: $url, eventTypes: ["doc.created"], timeoutMs: 60000}) { id } }`, map[string]any{"url": hook.URL})
	apptest.GQL[map[string]any](t, api, `mutation { createItem(input: {sku: "A1", name: "Стол", unit: "шт"}) { id } }`, nil)
	apptest.GQL[map[string]any](t, api, `mutation { createSalesOrder(input: {customer: "X", lines: [{sku: "A1", quantity: "1"}]}) { id } }`, nil)
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

func TestProcessPprofListenerIsOptInLoopbackAndStopsWithTheServer(t *testing.T) {
	t.Parallel()
	// Which addresses PPROF_ADDR takes: app/config's TestPprofAddrIsLoopbackOnly.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	pprofAddr := ln.Addr().String()
	require.NoError(t, ln.Close())
	a := startChild(t, pgtest.NewDB(t), adminToken(t), "PPROF_ADDR="+pprofAddr)

	res, err := http.Get("http://" + pprofAddr + "/debug/pprof/heap?debug=1")
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, string(body), "# HeapAlloc = ", "MemStats follow the heap profile")

	res, err = http.Get(a.URL + "/debug/pprof/heap")
	require.NoError(t, err)
	_ = res.Body.Close()
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

func TestProcessMetricsAfterDemoReplay(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	// A webhook that cannot be reached, one attempt only: a dead delivery
	// for every order.received, so the failure counters move too.
	apptest.GQL[map[string]any](t, s, `mutation { createWebhookSubscriber(input: {name: "unreachable", url: "http://127.0.0.1:1/", eventTypes: ["order.received"], maxAttempts: 1, timeoutMs: 1000}) { id } }`, nil)
	// A live subscriber, open during the replay.
	c := apptest.DialWS(t, s, apptest.ProtoLegacyWS)
	c.Init(s.Token)
	c.Subscribe("1", apptest.FeedSubscription, nil)

	runDemo(t, t.Context(), s.URL+"/graphql", s.Token)
	c.NextEvent("1")

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

// scrape reads /metrics and sums each family's samples by metric name
// (labels dropped), e.g. "erp_deliveries_total".
func scrape(t *testing.T, s *apptest.Server) map[string]float64 {
	t.Helper()
	res, err := http.Get(s.URL + "/metrics")
	require.NoError(t, err)
	defer func() { _ = res.Body.Close() }()
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

// runDemo runs `erp demo` (the binary) against endpoint with token and
// returns what it printed: the journal table and its summary line.
func runDemo(t *testing.T, ctx context.Context, endpoint, token string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, erpBinary, "demo")
	cmd.Env = append(os.Environ(), "DEMO_URL="+endpoint, "DEMO_TOKEN="+token, "DATA_DIR="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "erp demo\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	return stdout.String()
}

// TestProcessHelpExitsZero: -help prints the settings and exits 0 (the
// table itself: app/config's TestServeHelpListsEverySetting).
func TestProcessHelpExitsZero(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	cmd := exec.Command(erpBinary, "serve", "-help")
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Run(), "exit status")
	require.Contains(t, stderr.String(), "(DATABASE_URL)")
}
