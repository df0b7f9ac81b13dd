package jobs_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"erp/db"
	"erp/jobs"
)

// hookRequests notes the webhook-id of every request a receiver got.
type hookRequests struct {
	mu  sync.Mutex
	ids []string
}

func (h *hookRequests) add(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ids = append(h.ids, id)
	return len(h.ids)
}

func (h *hookRequests) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.ids...)
}

// hookOrder creates webhook name on url for order.received and journals
// one received order; it returns the delivery's key once dispatched (River
// is not started: the test makes the attempts).
func (b *testBundle) hookOrder(t *testing.T, name, url, externalID string) db.DeliveryKey {
	t.Helper()
	timeout := int32(10000)
	sub, err := db.CreateWebhookSubscriber(b.ctx, b.pool, db.WebhookSubscriberInput{Name: &name, URL: &url,
		EventTypes: []string{db.EventOrderReceived}, TimeoutMs: &timeout})
	require.NoError(t, err)
	var events []db.Event
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) (err error) {
		_, events, err = receive(b, tx, externalID)
		return err
	}))
	var received int64
	for _, ev := range events {
		_, err := b.dispatcher.Dispatch(b.ctx, ev.ID)
		require.NoError(t, err)
		if ev.Type == db.EventOrderReceived {
			received = ev.ID
		}
	}
	require.NotZero(t, received)
	return db.DeliveryKey{EventID: received, SubscriberID: sub.ID}
}

// leaseRunsOut makes delivery k due now, as the end of its lease would.
func (b *testBundle) leaseRunsOut(t *testing.T, k db.DeliveryKey) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, `UPDATE deliveries SET next_attempt_at = now() WHERE event_id = $1 AND subscriber_id = $2`,
		k.EventID, k.SubscriberID)
	require.NoError(t, err)
}

// attemptLog is delivery k's attempt log, oldest first: each attempt's
// status ("" when none was recorded).
func (b *testBundle) attemptLog(t *testing.T, k db.DeliveryKey) []string {
	t.Helper()
	logs, err := db.AttemptLogs(b.ctx, b.pool, []db.DeliveryKey{k})
	require.NoError(t, err)
	var out []string
	for i := len(logs[k]) - 1; i >= 0; i-- {
		out = append(out, logs[k][i].Status)
	}
	return out
}

func TestLateAnswerAfterTheLeaseMovedOnIsLoggedNotRecordedTwice(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Hour)
	reqs := &hookRequests{}
	first := make(chan struct{})
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if reqs.add(r.Header.Get("webhook-id")) == 1 {
			close(first)
			<-release // answers 204 too, but late
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	k := b.hookOrder(t, "late-hook", srv.URL, "52001")

	lateOutcome := make(chan string, 1)
	go func() {
		outcome, err := b.dispatcher.Deliver(b.ctx, k)
		if err != nil {
			outcome = err.Error()
		}
		lateOutcome <- outcome
	}()
	<-first
	require.Equal(t, db.DeliveryPending, b.delivery(t, k.EventID, "late-hook").Status)
	require.Equal(t, "skipped", mustDeliver(t, b, k), "leased: another worker finds nothing due")

	// The lease runs out while the request hangs; another worker takes
	// the delivery over and delivers it.
	b.leaseRunsOut(t, k)
	require.Equal(t, db.DeliveryDelivered, mustDeliver(t, b, k))
	delivered := b.delivery(t, k.EventID, "late-hook")
	require.Equal(t, int32(2), delivered.Attempts)

	close(release)
	require.Equal(t, jobs.OutcomeSkipped, <-lateOutcome, "the late answer records nothing")
	after := b.delivery(t, k.EventID, "late-hook")
	require.Equal(t, db.DeliveryDelivered, after.Status)
	require.Equal(t, int32(2), after.Attempts)
	require.Equal(t, delivered.DeliveredAt, after.DeliveredAt, "delivered once, at the takeover's answer")
	require.Equal(t, []string{db.DeliveryDelivered, db.DeliveryDelivered}, b.attemptLog(t, k), "both answers are logged")
	ids := reqs.all()
	require.Len(t, ids, 2)
	require.Equal(t, ids[0], ids[1], "the same webhook-id")
	require.Zero(t, b.count(t, `SELECT count(*) FROM subscriber_leases WHERE leased_until > now()`), "both slots given back")
}

func mustDeliver(t *testing.T, b *testBundle, k db.DeliveryKey) string {
	t.Helper()
	outcome, err := b.dispatcher.Deliver(b.ctx, k)
	require.NoError(t, err)
	return outcome
}

// disabledEvents returns the payloads of the subscriber.disabled events
// journaled so far.
func (b *testBundle) disabledEvents(t *testing.T) []map[string]any {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT payload FROM events WHERE type = 'subscriber.disabled' ORDER BY id`)
	require.NoError(t, err)
	payloads, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	require.NoError(t, err)
	var out []map[string]any
	for _, p := range payloads {
		var m map[string]any
		require.NoError(t, json.Unmarshal(p, &m))
		out = append(out, m)
	}
	return out
}

func TestGoneDisablesTheWebhookAtOnceAndKeepsItsDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Hour)
	var gone atomic.Bool
	gone.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if gone.Load() {
			http.Error(w, "this endpoint was removed", http.StatusGone)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	k := b.hookOrder(t, "gone-hook", srv.URL, "52002")

	require.Equal(t, db.DeliveryFailed, mustDeliver(t, b, k), "not dead: it waits, open, for a resume")
	sub, err := db.SubscriberByID(b.ctx, b.pool, k.SubscriberID)
	require.NoError(t, err)
	require.True(t, sub.Paused, "410 disables at once")
	disabled := b.disabledEvents(t)
	require.Len(t, disabled, 1)
	require.Equal(t, "gone", disabled[0]["reason"])
	require.Equal(t, "gone-hook", disabled[0]["subscriber"])
	require.NotEmpty(t, disabled[0]["since"])

	b.leaseRunsOut(t, k)
	require.Equal(t, jobs.OutcomeSkipped, mustDeliver(t, b, k), "a disabled webhook gets no request")

	gone.Store(false)
	_, err = b.dispatcher.SetPaused(b.ctx, nil, k.SubscriberID, false)
	require.NoError(t, err)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM events WHERE type = 'subscriber.enabled' AND entity_id = $1
		AND payload->>'was_disabled' = 'gone'`, k.SubscriberID))
	b.leaseRunsOut(t, k)
	require.Equal(t, db.DeliveryDelivered, mustDeliver(t, b, k), "resumed, the delivery goes out")
	require.Len(t, b.disabledEvents(t), 1)
}

func TestWebhookFailingForTheDisableAfterPeriodIsDisabled(t *testing.T) {
	t.Parallel()
	var clock atomic.Pointer[time.Time]
	start := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	clock.Store(&start)
	advance := func(d time.Duration) {
		next := clock.Load().Add(d)
		clock.Store(&next)
	}
	b := setupWith(t, jobs.DispatcherConfig{DisableAfter: 120 * time.Hour, Now: func() time.Time { return *clock.Load() }}, time.Hour)
	var down atomic.Bool
	down.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if down.Load() {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	k := b.hookOrder(t, "flaky-hook", srv.URL, "52003")
	paused := func() bool {
		sub, err := db.SubscriberByID(b.ctx, b.pool, k.SubscriberID)
		require.NoError(t, err)
		return sub.Paused
	}

	require.Equal(t, db.DeliveryFailed, mustDeliver(t, b, k))
	advance(60 * time.Hour)
	// A success in between starts the count again.
	down.Store(false)
	b.leaseRunsOut(t, k)
	require.Equal(t, db.DeliveryDelivered, mustDeliver(t, b, k))
	down.Store(true)
	_, err := b.dispatcher.Redeliver(b.ctx, nil, db.DeliveryFilter{EventID: &k.EventID})
	require.NoError(t, err)
	require.Equal(t, db.DeliveryFailed, mustDeliver(t, b, k))
	failingSince := *clock.Load()

	advance(119 * time.Hour)
	b.leaseRunsOut(t, k)
	require.Equal(t, db.DeliveryFailed, mustDeliver(t, b, k))
	require.False(t, paused(), "119 h of failures since the last success")
	require.Empty(t, b.disabledEvents(t))

	advance(time.Hour)
	b.leaseRunsOut(t, k)
	require.Equal(t, db.DeliveryFailed, mustDeliver(t, b, k))
	require.True(t, paused(), "120 h of failures: disabled")
	disabled := b.disabledEvents(t)
	require.Len(t, disabled, 1)
	require.Equal(t, "failing", disabled[0]["reason"])
	require.Equal(t, "flaky-hook", disabled[0]["subscriber"])
	since, err := time.Parse(time.RFC3339Nano, disabled[0]["since"].(string))
	require.NoError(t, err)
	require.True(t, failingSince.Equal(since), "since %s, want %s", since, failingSince)
}
