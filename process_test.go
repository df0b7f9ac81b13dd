package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"erp/db"
	"erp/db/pgtest"
)

// child is the server running as a separate OS process (this test binary
// re-executed through TestMain), so that it can be killed for real.
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	cmd := exec.Command(os.Args[0], "serve")
	cmd.Env = append(os.Environ(),
		"ERP_TEST_RUN_MAIN=1",
		"DATABASE_URL="+databaseURL,
		"ADDR="+addr,
		"ADMIN_TOKEN="+token,
		"DATA_DIR="+t.TempDir(),
	)
	cmd.Env = append(cmd.Env, env...)
	if testing.Verbose() {
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
			res.Body.Close()
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
func clientFor(c *child, token string) *testServer {
	return &testServer{URL: c.URL, Token: token}
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

func TestKillDuringDispatchLosesNothing(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	token := adminToken(t)
	a := startChild(t, url, token, "DISPATCH_INTERVAL=1s")
	api := clientFor(a, token)
	gql[map[string]any](t, api, `mutation { createItem(input: {sku: "A1", name: "Стол", unit: "шт"}) { id } }`, nil)

	// Four writers send CRM orders; the server is killed while they run.
	acked := crmBurst(t, a, token, 70000, a.kill)
	ackedN := len(acked)
	unprocessed := countRows(t, url, `SELECT count(*) FROM events WHERE processed_at IS NULL`)
	t.Logf("killed after %d acknowledged orders; %d events unprocessed at the kill", ackedN, unprocessed)

	// Restart: the sweep runs at start (RunOnStart) and picks up the rest.
	startChild(t, url, token, "DISPATCH_INTERVAL=1s")
	waitDBProcessed(t, url)
	// Every acknowledged order exists with both events, processed; the
	// built-in subscriber's delivery happened once per event.
	require.Equal(t, ackedN, countRows(t, url, fmt.Sprintf(`SELECT count(*) FROM sales_orders WHERE external_id = ANY(ARRAY[%s])`, quotedKeys(acked))))
	require.Zero(t, countRows(t, url, `SELECT count(*) FROM sales_orders so WHERE (SELECT count(*) FROM events e WHERE e.entity = 'sales_orders' AND e.entity_id = so.id) <> 2`))
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
				status, res, err := api.post(token, `mutation($id: String!) { receiveOrder(input: {source: CRM, externalId: $id, customer: "X", lines: [{sku: "A1", quantity: "1"}]}) { order { id } } }`, map[string]any{"id": id})
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

func TestTwoInstancesOneSweepPerTick(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	token := adminToken(t)
	a := startChild(t, url, token, "DISPATCH_INTERVAL=1s")
	b := startChild(t, url, token, "DISPATCH_INTERVAL=1s")
	gql[map[string]any](t, clientFor(a, token), `mutation { createItem(input: {sku: "A1", name: "Стол", unit: "шт"}) { id } }`, nil)

	// Both instances take mutations; each event is delivered once.
	var wg sync.WaitGroup
	for i := range 40 {
		c := a
		if i%2 == 1 {
			c = b
		}
		wg.Go(func() {
			gql[map[string]any](t, clientFor(c, token), `mutation($id: String!) { receiveOrder(input: {source: CRM, externalId: $id, customer: "X", lines: [{sku: "A1", quantity: "1"}]}) { order { id } } }`,
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
	waitFor(t, 15*time.Second, "the leader's periodic sweeps", func() bool {
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
