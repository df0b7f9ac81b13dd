package app_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"erp/app/apptest"
)

// silentReceiver accepts every request and never answers it until the
// test ends (or the request's own context does).
type silentReceiver struct {
	url     string
	waiting atomic.Int32 // requests held right now
}

func newSilentReceiver(t *testing.T) *silentReceiver {
	t.Helper()
	r := &silentReceiver{}
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, req *http.Request) {
		r.waiting.Add(1)
		defer r.waiting.Add(-1)
		select {
		case <-release:
		case <-req.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // before srv.Close, which waits for handlers
	r.url = srv.URL
	return r
}

// longHeld counts the connections of the test's database that have been
// in a transaction, or running one statement, for more than a second.
func longHeld(t *testing.T, s *apptest.Server) int {
	t.Helper()
	var n int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()
		  AND (xact_start < now() - interval '1 second'
		       OR (state = 'active' AND query_start < now() - interval '1 second'))`).Scan(&n))
	return n
}

func TestReceiversThatNeverAnswerHoldNoConnectionAndNoRequest(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	a, b := newSilentReceiver(t), newSilentReceiver(t)
	for name, r := range map[string]*silentReceiver{"silent-a": a, "silent-b": b} {
		apptest.GQL[map[string]any](t, s, `mutation($in: WebhookSubscriberInput!) { createWebhookSubscriber(input: $in) { id } }`,
			map[string]any{"in": map[string]any{"name": name, "url": r.url, "eventTypes": []string{"doc.created"}, "timeoutMs": 60000}})
	}
	const backlog = 40
	for i := range backlog {
		apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": "К" + strconv.Itoa(i)})
	}
	// Every lease slot of both webhooks (4 each) holds a request that
	// will not be answered for a minute.
	apptest.WaitFor(t, 20*time.Second, "both receivers holding 4 requests", func() bool {
		return a.waiting.Load() == 4 && b.waiting.Load() == 4
	})
	// The events are processed though no receiver answered.
	apptest.WaitEventsProcessed(t, s)
	// The deliveries behind the hanging ones wait as rows, for a slot given
	// back, not as jobs polling for one: no deliver job is left waiting.
	apptest.WaitFor(t, 10*time.Second, "no deliver job waiting", func() bool {
		var waiting int
		require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM river_job
			WHERE kind = 'deliver_event' AND state IN ('available', 'scheduled', 'retryable', 'pending')`).Scan(&waiting))
		return waiting == 0
	})

	// Meanwhile the API works as usual, and no connection of the server
	// is held in a transaction or a statement while the requests hang,
	// nor taken from a pool: the 8 requests in flight would hold 8 all the
	// time (the jobs' short transactions come and go).
	deadline := time.Now().Add(3 * time.Second)
	done, minAcquired := 0, int32(1<<30)
	for time.Now().Before(deadline) {
		apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": "Во время"})
		apptest.GQL[map[string]any](t, s, `{ events(first: 5) { edges { node { id processedAt } } } }`, nil)
		require.Zero(t, longHeld(t, s), "a connection held for more than a second while the receivers hang")
		minAcquired = min(minAcquired, s.DB.Work.Stat().AcquiredConns())
		require.Equal(t, int32(4), a.waiting.Load(), "the requests still hang")
		require.Equal(t, int32(4), b.waiting.Load())
		done++
		time.Sleep(50 * time.Millisecond)
	}
	require.Positive(t, done)
	require.Less(t, minAcquired, int32(8), "work-pool connections taken throughout while 8 requests hang")
	apptest.WaitEventsProcessed(t, s)

	type lagged struct {
		Subscribers []struct {
			Name string
			Lag  struct{ Pending int }
		}
	}
	for _, sub := range apptest.GQL[lagged](t, s, `{ subscribers { name lag { pending } } }`, nil).Subscribers {
		if sub.Name == "silent-a" || sub.Name == "silent-b" {
			require.Equal(t, backlog+done, sub.Lag.Pending, "%s's lag counts every event it has not got", sub.Name)
		}
	}
}

// statusReceiver answers with the status it is set to and notes, in
// order, the events of the requests it accepted (2xx).
type statusReceiver struct {
	status   atomic.Int32
	mu       sync.Mutex
	accepted []acceptedEvent
	url      string
}

type acceptedEvent struct {
	ID       int64
	Type     string
	EntityID string
}

func newStatusReceiver(t *testing.T, status int) *statusReceiver {
	t.Helper()
	r := &statusReceiver{}
	r.status.Store(int32(status))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		status := int(r.status.Load())
		if status >= 300 {
			http.Error(w, "unavailable", status)
			return
		}
		var ev struct{ ID, Type, EntityID string }
		if err := json.Unmarshal(body, &ev); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		id, _ := strconv.ParseInt(ev.ID, 10, 64)
		r.mu.Lock()
		r.accepted = append(r.accepted, acceptedEvent{ID: id, Type: ev.Type, EntityID: ev.EntityID})
		r.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL
	return r
}

func (r *statusReceiver) got() []acceptedEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]acceptedEvent(nil), r.accepted...)
}

func TestFailingReceiverHidesNothingFromTheLiveFeed(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	rcv := newStatusReceiver(t, http.StatusServiceUnavailable)
	apptest.GQL[map[string]any](t, s, `mutation($in: WebhookSubscriberInput!) { createWebhookSubscriber(input: $in) { id } }`,
		map[string]any{"in": map[string]any{"name": "down", "url": rcv.url, "eventTypes": []string{"doc.created", "doc.status_changed"},
			"entities": []string{"sales_orders"}, "maxAttempts": 50}})
	c := apptest.DialWS(t, s, apptest.ProtoTransportWS)
	c.Init(s.Token)
	c.Subscribe("live", apptest.FeedSubscription, map[string]any{"filter": salesOrdersCreated})

	// Five orders, each created and cancelled: the live client gets every
	// doc.created while the webhook answers 503.
	type order struct {
		CreateSalesOrder struct {
			ID string
		} `json:"createSalesOrder"`
	}
	var ids []string
	for i := range 5 {
		o := apptest.GQL[order](t, s, apptest.CreateSalesOrder, map[string]any{"customer": "Покупатель " + strconv.Itoa(i)})
		ids = append(ids, o.CreateSalesOrder.ID)
		ev := c.NextEvent("live")
		require.Equal(t, "doc.created", ev.Type)
		require.NotNil(t, ev.ProcessedAt)
		apptest.GQL[map[string]any](t, s, `mutation($id: ID!) { cancelSalesOrder(id: $id, version: 1, reason: "test") { id } }`,
			map[string]any{"id": o.CreateSalesOrder.ID})
	}
	apptest.WaitEventsProcessed(t, s)
	apptest.WaitFor(t, 20*time.Second, "every delivery attempted and failed", func() bool {
		return subscriberLags(t, s)["down"].Failing >= 5
	})
	lag := subscriberLags(t, s)["down"]
	require.Equal(t, 10, lag.Pending, "the webhook's lag counts every event it has not got")
	require.NotNil(t, lag.OldestPendingAt)
	require.Empty(t, rcv.got())

	// The receiver is back: the deliveries (retried now, as an operator
	// would) arrive, each document's in its order.
	rcv.status.Store(http.StatusNoContent)
	apptest.GQL[map[string]any](t, s, `mutation { redeliverAll(filter: {subscriber: "down", status: FAILED}) }`, nil)
	apptest.WaitFor(t, 30*time.Second, "every delivery delivered", func() bool { return subscriberLags(t, s)["down"].Pending == 0 })
	got := rcv.got()
	require.Len(t, got, 10)
	byDoc := map[string][]acceptedEvent{}
	for _, ev := range got {
		byDoc[ev.EntityID] = append(byDoc[ev.EntityID], ev)
	}
	require.Len(t, byDoc, 5)
	for _, id := range ids {
		evs := byDoc[id]
		require.Len(t, evs, 2, "order %s", id)
		require.Equal(t, "doc.created", evs[0].Type, "order %s: created first", id)
		require.Equal(t, "doc.status_changed", evs[1].Type)
		require.Less(t, evs[0].ID, evs[1].ID)
	}
}
