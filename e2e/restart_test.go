package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"erp/app/apptest"
	"erp/db"
	"erp/db/localpg"
)

// TestProcessPostgresRestartMidLoad restarts PostgreSQL (fast mode: every
// session is cut, as in a failover) during 20 s of mutations and a live
// subscription. Afterwards every acknowledged mutation is in the journal
// and processed, the subscriber (resuming by cursor when its socket went)
// has every event once in feed order, and /readyz went 503 and back to
// 200 without a restart of the server.
func TestProcessPostgresRestartMidLoad(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "pg")
	cluster, err := localpg.Start(t.Context(), localpg.Config{Dir: dir, DBName: "erp", NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cluster.Stop(t.Context()) })
	url := cluster.URL()

	token := adminToken(t)
	c := startChild(t, url, token)
	s := clientFor(c, token)
	apptest.WaitFor(t, 20*time.Second, "/readyz", func() bool { return s.Get(t, "/readyz") == http.StatusOK })
	apptest.GQL[map[string]any](t, s, `mutation { createItem(input: {sku: "A1", name: "Стол", unit: "шт"}) { id } }`, nil)

	sub := &resumingSubscriber{t: t, s: s, token: token, seen: map[string]bool{}}
	sub.connect("")

	// /readyz, every 100 ms: did it go 503, and 200 after that?
	var went503, back200 atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			code := s.Get(t, "/readyz")
			if code == http.StatusServiceUnavailable {
				went503.Store(true)
			} else if code == http.StatusOK && went503.Load() {
				back200.Store(true)
			}
		}
	})

	// Mutations for 20 s from two clients; an acknowledged one is an answer
	// with data and no errors. Refusals while PostgreSQL is away are fine.
	var mu sync.Mutex
	var acked []string
	var next atomic.Int64
	deadline := time.Now().Add(20 * time.Second)
	for range 2 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				id := fmt.Sprint(60000 + next.Add(1))
				status, res, err := s.Post(token, `mutation($id: String!) { receiveOrder(input: {source: CRM, externalId: $id, customer: "X", lines: [{sku: "A1", quantity: "1"}]}) { order { id } } }`,
					map[string]any{"id": id})
				if err == nil && status == http.StatusOK && len(res.Errors) == 0 && string(res.Data) != "null" && len(res.Data) > 0 {
					mu.Lock()
					acked = append(acked, id)
					mu.Unlock()
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}

	time.Sleep(7 * time.Second)
	require.NoError(t, cluster.Stop(t.Context()), "stop PostgreSQL (fast)")
	time.Sleep(time.Second)
	cluster, err = localpg.Start(t.Context(), localpg.Config{Dir: dir, DBName: "erp", NoSync: true})
	require.NoError(t, err, "start PostgreSQL again")
	require.Equal(t, url, cluster.URL())

	time.Sleep(time.Until(deadline))
	apptest.WaitFor(t, 60*time.Second, "/readyz back to 200", back200.Load)
	close(stop)
	wg.Wait()
	require.True(t, went503.Load(), "/readyz never said 503 while PostgreSQL was down")
	waitDBProcessed(t, url)

	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, acked)
	for _, id := range acked {
		require.Equal(t, 1, countRows(t, url, fmt.Sprintf(`SELECT count(*) FROM sales_orders WHERE source = 'crm' AND external_id = '%s'`, id)),
			"acknowledged order %s is not in the journal", id)
	}
	pool, err := db.Connect(t.Context(), url)
	require.NoError(t, err)
	defer pool.Close()
	journal := apptest.JournalIDs(t, pool, "order.received")
	require.GreaterOrEqual(t, len(journal), len(acked))
	sub.waitFor(len(journal))
	require.Equal(t, journal, sub.ids, "the subscriber has every event once, in feed order")
}

// resumingSubscriber follows order.received on the live feed and, when
// its socket goes, dials again and resumes after its last cursor, as the
// docs/live-feed.md tells clients to.
type resumingSubscriber struct {
	t     *testing.T
	s     *apptest.Server
	token string

	mu     sync.Mutex
	ids    []string
	seen   map[string]bool
	twice  []string
	cursor string
	done   chan struct{}
}

func (r *resumingSubscriber) connect(after string) {
	ws := apptest.DialWS(r.t, r.s, apptest.ProtoTransportWS)
	ws.Init(r.token)
	vars := map[string]any{"filter": map[string]any{"types": []string{"order.received"}}}
	if after != "" {
		vars["after"] = after
	}
	ws.Subscribe("1", apptest.FeedSubscription, vars)
	done := make(chan struct{})
	r.mu.Lock()
	r.done = done
	r.mu.Unlock()
	go func() {
		defer close(done)
		for {
			// Read on this goroutine without require: the socket
			// ending is what it waits for.
			_ = ws.Conn.SetReadDeadline(time.Now().Add(time.Minute))
			var m apptest.Message
			if err := ws.Conn.ReadJSON(&m); err != nil {
				return
			}
			switch m.Type {
			case "ping":
				_ = ws.Conn.WriteJSON(apptest.Message{Type: "pong"})
				continue
			case "pong":
				continue
			case "next":
			default:
				return
			}
			var p struct {
				Data struct {
					EventProcessed apptest.FeedEvent `json:"eventProcessed"`
				} `json:"data"`
			}
			if json.Unmarshal(m.Payload, &p) != nil {
				return
			}
			ev := p.Data.EventProcessed
			r.mu.Lock()
			if r.seen[ev.ID] {
				r.twice = append(r.twice, ev.ID)
			}
			r.seen[ev.ID] = true
			r.ids = append(r.ids, ev.ID)
			r.cursor = ev.Cursor
			r.mu.Unlock()
		}
	}()
}

// waitFor waits until n events arrived, reconnecting after the cursor
// whenever the socket ended.
func (r *resumingSubscriber) waitFor(n int) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		r.mu.Lock()
		got, done, cursor := len(r.ids), r.done, r.cursor
		twice := append([]string(nil), r.twice...)
		r.mu.Unlock()
		require.Empty(r.t, twice, "events delivered twice")
		if got >= n {
			return
		}
		require.True(r.t, time.Now().Before(deadline), "the subscriber has %d of %d events", got, n)
		select {
		case <-done:
			r.connect(cursor)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
