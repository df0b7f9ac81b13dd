package app_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"erp/app/apptest"
)

// countingHook is a webhook receiver that counts requests in flight (and
// their maximum) and the distinct deliveries (webhook-id) it answered 2xx.
type countingHook struct {
	inFlight, maxInFlight atomic.Int32
	// before runs in each request before it is answered (nil: none); it
	// returns false when the request's context ended.
	before func(r *http.Request) bool

	mu    sync.Mutex
	ids   map[string]bool
	times []time.Time
}

func newCountingHook(t *testing.T, before func(r *http.Request) bool) (*countingHook, string) {
	t.Helper()
	h := &countingHook{before: before, ids: map[string]bool{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := h.inFlight.Add(1)
		defer h.inFlight.Add(-1)
		for m := h.maxInFlight.Load(); n > m && !h.maxInFlight.CompareAndSwap(m, n); m = h.maxInFlight.Load() {
		}
		if h.before != nil && !h.before(r) {
			http.Error(w, "gave up", http.StatusServiceUnavailable)
			return
		}
		h.mu.Lock()
		h.ids[r.Header.Get("webhook-id")] = true
		h.times = append(h.times, time.Now())
		h.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return h, srv.URL
}

func (h *countingHook) delivered() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ids)
}

func (h *countingHook) lastAnswered() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.times[len(h.times)-1]
}

func createLimitedWebhook(t *testing.T, s *apptest.Server, name, url string, limits map[string]any) {
	t.Helper()
	in := map[string]any{"name": name, "url": url, "eventTypes": []string{"doc.created"}, "maxAttempts": 10, "timeoutMs": 10000}
	for k, v := range limits {
		in[k] = v
	}
	apptest.GQL[map[string]any](t, s, `mutation($in: WebhookSubscriberInput!) { createWebhookSubscriber(input: $in) { id } }`,
		map[string]any{"in": in})
}

// Two instances on one database share a webhook's maxInFlight: never more
// than 2 requests to the slow webhook at once, while the fast webhook gets
// all its events before the slow one has answered any; then the slow one
// gets them all too.
func TestWebhookMaxInFlightAcrossInstances(t *testing.T) {
	t.Parallel()
	s1 := apptest.New(t)
	s2 := apptest.NewOn(t, s1.Pool)
	apptest.SeedItem(t, s1)
	// The slow webhook holds every request until the gate opens, then
	// takes 300 ms more.
	gate := make(chan struct{})
	slow, slowURL := newCountingHook(t, func(r *http.Request) bool {
		select {
		case <-gate:
		case <-r.Context().Done():
			return false
		}
		select {
		case <-time.After(300 * time.Millisecond):
			return true
		case <-r.Context().Done():
			return false
		}
	})
	fast, fastURL := newCountingHook(t, nil)
	createLimitedWebhook(t, s1, "slow", slowURL, map[string]any{"maxInFlight": 2})
	createLimitedWebhook(t, s1, "fast", fastURL, nil)
	subs := apptest.GQL[struct {
		Subscribers []struct {
			Name        string
			MaxInFlight int
		}
	}](t, s2, `{ subscribers { name maxInFlight } }`, nil)
	inFlight := map[string]int{}
	for _, sub := range subs.Subscribers {
		inFlight[sub.Name] = sub.MaxInFlight
	}
	require.Equal(t, 2, inFlight["slow"])
	require.Equal(t, 4, inFlight["fast"], "the default")

	const orders = 12
	for i := range orders {
		s := []*apptest.Server{s1, s2}[i%2]
		apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": fmt.Sprint("К", i)})
	}
	apptest.WaitFor(t, 30*time.Second, "the fast webhook got every event", func() bool { return fast.delivered() == orders })
	apptest.WaitFor(t, 10*time.Second, "two requests held by the slow webhook", func() bool { return slow.inFlight.Load() == 2 })
	require.Zero(t, slow.delivered(), "the slow webhook has answered nothing yet")
	require.Equal(t, orders, subscriberLags(t, s1)["slow"].Pending, "its backlog waits in the database")

	close(gate)
	apptest.WaitFor(t, 60*time.Second, "the slow webhook got every event", func() bool { return slow.delivered() == orders })
	apptest.WaitAllProcessed(t, s1)
	require.Equal(t, int32(2), slow.maxInFlight.Load(), "never more than maxInFlight at once, across both instances")
	require.LessOrEqual(t, fast.maxInFlight.Load(), int32(4))
	require.Zero(t, subscriberLags(t, s2)["slow"].Pending)
}

// A webhook with ratePerSecond 4 gets at most 4 requests at once (its
// bucket starts full) and 4 a second after: 10 deliveries take at least
// (10 − 4) / 4 = 1.5 s from the first order's commit.
func TestWebhookRatePerSecond(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	hook, url := newCountingHook(t, nil)
	createLimitedWebhook(t, s, "paced", url, map[string]any{"ratePerSecond": 4.0, "maxInFlight": 10})
	const orders, rate, burst = 10, 4.0, 4.0
	start := time.Now()
	for i := range orders {
		apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": fmt.Sprint("К", i)})
	}
	apptest.WaitFor(t, 30*time.Second, "every delivery", func() bool { return hook.delivered() == orders })
	took := hook.lastAnswered().Sub(start)
	require.GreaterOrEqual(t, took, time.Duration((orders-burst)/rate*float64(time.Second)),
		"%d deliveries at %.0f/s", orders, rate)
	res := apptest.GQL[struct {
		Subscribers []struct {
			Name          string
			RatePerSecond *float64
		}
	}](t, s, `{ subscribers { name ratePerSecond } }`, nil)
	for _, sub := range res.Subscribers {
		if sub.Name == "paced" {
			require.NotNil(t, sub.RatePerSecond)
			require.InDelta(t, rate, *sub.RatePerSecond, 0)
		} else {
			require.Nil(t, sub.RatePerSecond, sub.Name)
		}
	}
}

// The slowest rate allowed still holds deliveries back: the bucket starts
// with one token, so one of three deliveries goes out and the others'
// jobs are snoozed until the next token, 1000 s away.
func TestWebhookSlowestRateHoldsBack(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	hook, url := newCountingHook(t, nil)
	createLimitedWebhook(t, s, "trickle", url, map[string]any{"ratePerSecond": 0.001, "maxInFlight": 10})
	const orders = 3
	for i := range orders {
		apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": fmt.Sprint("К", i)})
	}
	apptest.WaitFor(t, 30*time.Second, "the first delivery", func() bool { return hook.delivered() == 1 })
	apptest.WaitFor(t, 30*time.Second, "every other delivery snoozed until a token is due", func() bool {
		var snoozed, open int
		require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT
			count(*) FILTER (WHERE state = 'scheduled' AND scheduled_at > now() + interval '15 minutes'),
			count(*) FILTER (WHERE state NOT IN ('completed', 'scheduled'))
			FROM river_job WHERE kind = 'deliver_event'`).Scan(&snoozed, &open))
		return open == 0 && snoozed >= orders-1
	})
	require.Equal(t, 1, hook.delivered())
	require.Equal(t, orders-1, subscriberLags(t, s)["trickle"].Pending)
}

// Limits out of range are BAD_USER_INPUT on their field and write nothing;
// an update may change them, and ratePerSecond 0 removes the rate.
func TestWebhookLimitsChecked(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	const create = `mutation($in: WebhookSubscriberInput!) { createWebhookSubscriber(input: $in) { id maxInFlight ratePerSecond } }`
	for _, tt := range []struct {
		field string
		value any
	}{
		{"maxInFlight", 0}, {"maxInFlight", 101}, {"ratePerSecond", 0.0}, {"ratePerSecond", -1.5}, {"ratePerSecond", 10001.0},
		{"ratePerSecond", 1e-10}, {"ratePerSecond", 0.00099},
	} {
		e := apptest.GQLErr(t, s, create, map[string]any{"in": map[string]any{"name": "bad", "url": "http://127.0.0.1:1/", tt.field: tt.value}})
		require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"], "%s %v", tt.field, tt.value)
		require.Equal(t, "input."+tt.field, e.Extensions["field"], "%s %v", tt.field, tt.value)
	}
	list := apptest.GQL[struct{ Subscribers []struct{ Name string } }](t, s, `{ subscribers { name } }`, nil)
	for _, sub := range list.Subscribers {
		require.NotEqual(t, "bad", sub.Name, "a refused webhook is not written")
	}

	type limits struct {
		ID            string
		MaxInFlight   int
		RatePerSecond *float64
	}
	made := apptest.GQL[struct{ CreateWebhookSubscriber limits }](t, s, create,
		map[string]any{"in": map[string]any{"name": "ok", "url": "http://127.0.0.1:1/", "ratePerSecond": 2.5}})
	require.Equal(t, 4, made.CreateWebhookSubscriber.MaxInFlight)
	require.NotNil(t, made.CreateWebhookSubscriber.RatePerSecond)
	const update = `mutation($id: ID!, $in: WebhookSubscriberUpdate!) { updateWebhookSubscriber(id: $id, input: $in) { id maxInFlight ratePerSecond } }`
	changed := apptest.GQL[struct{ UpdateWebhookSubscriber limits }](t, s, update,
		map[string]any{"id": made.CreateWebhookSubscriber.ID, "in": map[string]any{"maxInFlight": 7, "ratePerSecond": 0}})
	require.Equal(t, limits{ID: made.CreateWebhookSubscriber.ID, MaxInFlight: 7}, changed.UpdateWebhookSubscriber)
	e := apptest.GQLErr(t, s, update, map[string]any{"id": made.CreateWebhookSubscriber.ID, "in": map[string]any{"maxInFlight": 0}})
	require.Equal(t, "input.maxInFlight", e.Extensions["field"])
	e = apptest.GQLErr(t, s, update, map[string]any{"id": made.CreateWebhookSubscriber.ID, "in": map[string]any{"ratePerSecond": 1e-10}})
	require.Equal(t, "input.ratePerSecond", e.Extensions["field"], "below the floor on update too")
	var slots int
	require.NoError(t, s.Pool.QueryRow(t.Context(),
		`SELECT count(*) FROM subscriber_leases WHERE subscriber_id = $1`, made.CreateWebhookSubscriber.ID).Scan(&slots))
	require.Equal(t, 7, slots, "one lease slot per request in flight")
}

// A replay counts against the webhook's limits like live deliveries: 30
// events of history replayed to a slow webhook with maxInFlight 1 never
// overlap, and all arrive.
func TestReplayKeepsToTheWebhooksMaxInFlight(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	for i := range 30 {
		apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": fmt.Sprintf("history-%d", i)})
	}
	apptest.WaitAllProcessed(t, s)
	slow, url := newCountingHook(t, func(r *http.Request) bool {
		select {
		case <-time.After(30 * time.Millisecond):
			return true
		case <-r.Context().Done():
			return false
		}
	})
	createLimitedWebhook(t, s, "one-at-a-time", url, map[string]any{"maxInFlight": 1})
	r := startReplay(t, s, map[string]any{"s": "one-at-a-time"})
	require.Equal(t, 30, r.Total)
	waitReplayStatus(t, s, r.ID, "DONE")
	require.Equal(t, 30, slow.delivered())
	require.Equal(t, int32(1), slow.maxInFlight.Load(), "a replay never has more than maxInFlight requests in flight")
}
