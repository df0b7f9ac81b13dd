package jobs_test

import (
	"encoding/json"
	"fmt"
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
	now := func() time.Time { return *clock.Load() }
	advance := func(d time.Duration) {
		next := now().Add(d)
		clock.Store(&next)
	}
	// Retries up to an hour apart: a run of failures breaks after a quiet
	// spell of two hours.
	b := setupWith(t, jobs.DispatcherConfig{DisableAfter: 120 * time.Hour, Now: now,
		Retry: jobs.RetryPolicy{Base: 20 * time.Millisecond, Max: time.Hour}}, time.Hour)
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
	_, err := b.pool.Exec(b.ctx, `UPDATE subscribers SET max_attempts = 100 WHERE id = $1`, k.SubscriberID)
	require.NoError(t, err)
	paused := func() bool {
		sub, err := db.SubscriberByID(b.ctx, b.pool, k.SubscriberID)
		require.NoError(t, err)
		return sub.Paused
	}
	// attempt makes one attempt now, as the lease's end or a retry would.
	attempt := func() string {
		b.leaseRunsOut(t, k)
		return mustDeliver(t, b, k)
	}
	// failFor fails an attempt every 90 minutes for d.
	failFor := func(d time.Duration) {
		for end := now().Add(d); now().Before(end); advance(90 * time.Minute) {
			require.Equal(t, db.DeliveryFailed, attempt())
		}
	}

	failFor(60 * time.Hour)
	// A success ends the run.
	down.Store(false)
	require.Equal(t, db.DeliveryDelivered, attempt())
	down.Store(true)
	_, err = b.dispatcher.Redeliver(b.ctx, nil, db.DeliveryFilter{EventID: &k.EventID})
	require.NoError(t, err)
	failFor(100 * time.Hour)
	// A quiet spell (no traffic) breaks the run too. (A redelivery keeps
	// the attempts under the webhook's 100.)
	advance(3 * time.Hour)
	_, err = b.dispatcher.Redeliver(b.ctx, nil, db.DeliveryFilter{EventID: &k.EventID})
	require.NoError(t, err)
	failingSince := now()
	failFor(119 * time.Hour)
	require.False(t, paused(), "less than 120 h of failures since the last success or quiet spell")
	require.Empty(t, b.disabledEvents(t))

	for now().Sub(failingSince) < 120*time.Hour {
		advance(30 * time.Minute)
	}
	require.Equal(t, db.DeliveryFailed, attempt())
	require.True(t, paused(), "120 h of failures: disabled")
	disabled := b.disabledEvents(t)
	require.Len(t, disabled, 1)
	require.Equal(t, "failing", disabled[0]["reason"])
	require.Equal(t, "flaky-hook", disabled[0]["subscriber"])
	since, err := time.Parse(time.RFC3339Nano, disabled[0]["since"].(string))
	require.NoError(t, err)
	require.True(t, failingSince.Equal(since), "since %s, want %s", since, failingSince)
}

// A webhook's record commits after the take of the document's next event
// found it still open, and after that event was dispatched: the release
// that runs after the commit finds the next delivery, which no look
// inside the record's transaction could have, so it does not wait for the
// minute sweep.
func TestReleaseAfterTheRecordFindsTheNextEventDispatchedMeanwhile(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Hour)
	arrived, answer := make(chan struct{}, 4), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		arrived <- struct{}{}
		<-answer
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	name, url := "race-hook", srv.URL
	sub, err := db.CreateWebhookSubscriber(b.ctx, b.pool, db.WebhookSubscriberInput{Name: &name, URL: &url,
		EventTypes: []string{db.EventDocCreated, db.EventStatusChanged}})
	require.NoError(t, err)

	var so db.SalesOrder
	var evs []db.Event
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) (err error) {
		so, evs, err = db.CreateSalesOrder(b.ctx, tx, nil, db.SalesOrderInput{Customer: "X", Lines: oneLine})
		return err
	}))
	for _, ev := range evs {
		_, err := b.dispatcher.Dispatch(b.ctx, ev.ID)
		require.NoError(t, err)
	}
	e1 := db.DeliveryKey{EventID: evs[0].ID, SubscriberID: sub.ID}

	done := make(chan string, 1)
	go func() {
		o, err := b.dispatcher.Deliver(b.ctx, e1)
		if err != nil {
			o = err.Error()
		}
		done <- o
	}()
	<-arrived // taken and in flight

	// Stall E1's record, its delivery row written, at the lease slot.
	hold, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	var holder int
	require.NoError(t, hold.QueryRow(b.ctx, `SELECT pg_backend_pid()`).Scan(&holder))
	_, err = hold.Exec(b.ctx, `SELECT 1 FROM subscriber_leases WHERE subscriber_id = $1 FOR UPDATE`, sub.ID)
	require.NoError(t, err)
	close(answer)
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, holder) > 0
	}, 10*time.Second, 5*time.Millisecond)

	// E2 of the same document is written and dispatched; its job's take runs.
	var e2evs []db.Event
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) (err error) {
		_, e2evs, err = db.CancelSalesOrder(b.ctx, tx, nil, so.ID, so.Version, "test")
		return err
	}))
	for _, ev := range e2evs {
		_, err := b.dispatcher.Dispatch(b.ctx, ev.ID)
		require.NoError(t, err)
	}
	e2 := db.DeliveryKey{EventID: e2evs[0].ID, SubscriberID: sub.ID}
	jobsBefore := b.count(t, `SELECT count(*) FROM river_job WHERE kind = 'deliver_event' AND (args->>'event_id')::bigint = $1`, e2.EventID)
	out, err := b.dispatcher.Deliver(b.ctx, e2) // the dispatch's job
	require.NoError(t, err)
	require.Equal(t, jobs.OutcomeBlocked, out)

	require.NoError(t, hold.Commit(b.ctx))
	require.Equal(t, db.DeliveryDelivered, <-done)
	jobsAfter := b.count(t, `SELECT count(*) FROM river_job WHERE kind = 'deliver_event' AND (args->>'event_id')::bigint = $1`, e2.EventID)
	require.Greater(t, jobsAfter, jobsBefore, "E1's finish released nothing: E2/W would wait for the sweep")
	require.Equal(t, db.DeliveryDelivered, mustDeliver(t, b, e2), "the released job delivers E2")
}

// A slot given back while the webhook's other slots are in flight wakes
// one due delivery, not MaxInFlight: the others would be jobs that queue
// on the delivery's row lock only to find it leased (bench figure H).
func TestFreedSlotWakesOneDeliveryPerFreeSlot(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Hour)
	arrived, stop := make(chan string, 8), make(chan struct{})
	answers := make(map[string]chan struct{})
	var mu sync.Mutex
	answerOf := func(id string) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		if answers[id] == nil {
			answers[id] = make(chan struct{})
		}
		return answers[id]
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("webhook-id")
		arrived <- id
		select {
		case <-answerOf(id):
		case <-stop:
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) }) // before srv.Close, which waits for the requests
	name, url, inFlight := "wake-hook", srv.URL, int32(4)
	sub, err := db.CreateWebhookSubscriber(b.ctx, b.pool, db.WebhookSubscriberInput{Name: &name, URL: &url,
		EventTypes: []string{db.EventOrderReceived}, MaxInFlight: &inFlight})
	require.NoError(t, err)
	var keys []db.DeliveryKey
	for i := range 8 {
		var events []db.Event
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) (err error) {
			_, events, err = receive(b, tx, fmt.Sprint(53000+i))
			return err
		}))
		for _, ev := range events {
			_, err := b.dispatcher.Dispatch(b.ctx, ev.ID)
			require.NoError(t, err)
			if ev.Type == db.EventOrderReceived {
				keys = append(keys, db.DeliveryKey{EventID: ev.ID, SubscriberID: sub.ID})
			}
		}
	}
	require.Len(t, keys, 8)

	// Four in flight, one per slot; the other four wait for a slot.
	outcomes := make(chan string, 4)
	for _, k := range keys[:4] {
		go func() {
			o, err := b.dispatcher.Deliver(b.ctx, k)
			if err != nil {
				o = err.Error()
			}
			outcomes <- o
		}()
	}
	inFlightIDs := make([]string, 0, 4)
	for range 4 {
		inFlightIDs = append(inFlightIDs, <-arrived)
	}
	jobsOf := func(k db.DeliveryKey) int {
		return b.count(t, `SELECT count(*) FROM river_job WHERE kind = 'deliver_event' AND (args->>'event_id')::bigint = $1`, k.EventID)
	}
	woken := func() (n int) {
		for _, k := range keys[4:] {
			n += jobsOf(k) - 1 // less the dispatch's job
		}
		return n
	}
	require.Zero(t, woken())

	close(answerOf(inFlightIDs[0]))
	require.Equal(t, db.DeliveryDelivered, <-outcomes)
	require.Equal(t, 1, woken(), "one slot given back, three in flight: one delivery woken")
	require.Equal(t, 2, jobsOf(keys[4]), "the soonest due is woken")

	for _, id := range inFlightIDs[1:] {
		close(answerOf(id))
	}
	for range 3 {
		require.Equal(t, db.DeliveryDelivered, <-outcomes)
	}
}
