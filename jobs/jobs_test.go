package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"erp/db"
	"erp/db/pgtest"
	"erp/jobs"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type testBundle struct {
	ctx        context.Context
	pool       *pgxpool.Pool
	dispatcher *jobs.Dispatcher
	river      *river.Client[pgx.Tx]
	outbox     *jobs.Outbox
}

// setup builds the dispatch side on a fresh database with item A1. River is
// created but not started; call startRiver for that.
func setup(t testing.TB, interval time.Duration, extra ...jobs.Subscriber) *testBundle {
	t.Helper()
	return setupWith(t, jobs.DispatcherConfig{}, interval, extra...)
}

// setupWith is setup with a dispatcher configuration (Logger is set
// here, and Retry when cfg has none).
func setupWith(t testing.TB, cfg jobs.DispatcherConfig, interval time.Duration, extra ...jobs.Subscriber) *testBundle {
	t.Helper()
	b := &testBundle{ctx: t.Context(), pool: pgtest.NewPool(t)}
	logger := slog.New(slog.DiscardHandler)
	cfg.Logger = logger
	if cfg.Retry.Base == 0 {
		cfg.Retry = testRetry
	}
	b.dispatcher = jobs.NewDispatcher(b.pool, cfg, append([]jobs.Subscriber{jobs.OrderAcceptance{}}, extra...)...)
	require.NoError(t, b.dispatcher.Register(b.ctx))
	var err error
	b.river, err = jobs.NewRiverClient(b.pool, b.dispatcher, jobs.RiverConfig{DispatchInterval: interval, MaxWorkers: 4, Logger: logger})
	require.NoError(t, err)
	b.outbox = jobs.NewOutbox(b.pool, b.river)
	_, err = db.CreateItem(b.ctx, b.pool, db.ItemInput{SKU: "A1", Name: "Стол", Unit: "шт"})
	require.NoError(t, err)
	return b
}

func (b *testBundle) startRiver(t *testing.T) {
	t.Helper()
	require.NoError(t, b.river.Start(b.ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(b.ctx), 10*time.Second)
		defer cancel()
		require.NoError(t, b.river.Stop(ctx))
	})
}

func (b *testBundle) count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, sql, args...).Scan(&n))
	return n
}

func (b *testBundle) waitProcessed(t *testing.T, ids ...int64) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for b.count(t, `SELECT count(*) FROM events WHERE id = ANY($1) AND processed_at IS NULL`, ids) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("events %v not processed within 15s", ids)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testRetry keeps retry gaps short; River's scheduler still promotes
// scheduled retries only every few seconds.
var testRetry = jobs.RetryPolicy{Base: 20 * time.Millisecond, Max: time.Second}

var oneLine = []db.LineInput{{SKU: "A1", Quantity: decimal.NewFromInt(1)}}

func receive(b *testBundle, tx pgx.Tx, externalID string) (db.SalesOrder, []db.Event, error) {
	so, events, _, err := db.ReceiveOrder(b.ctx, tx, nil, db.ReceiveOrderInput{
		Source: db.SourceCRM, ExternalID: externalID, Customer: "ООО Ромашка", Lines: oneLine,
	})
	return so, events, err
}

func TestWriteFailingAfterRowsLeavesNoTrace(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Minute)
	errLate := errors.New("failed after writing")
	_, err := jobs.Write(b.ctx, b.outbox, func(tx pgx.Tx) (db.SalesOrder, []db.Event, error) {
		so, events, err := receive(b, tx, "51000")
		require.NoError(t, err)
		require.Len(t, events, 2)
		// The rows, the events and the jobs exist inside the transaction…
		require.NoError(t, jobs.EnqueueDispatch(b.ctx, b.river, tx, events))
		var jobsInTx int
		require.NoError(t, tx.QueryRow(b.ctx, `SELECT count(*) FROM river_job`).Scan(&jobsInTx))
		require.Equal(t, 2, jobsInTx)
		return so, nil, errLate
	})
	require.ErrorIs(t, err, errLate)
	// …and none of them outlives the rollback.
	for _, table := range []string{"sales_orders", "sales_order_lines", "events", "river_job", "number_series"} {
		require.Zero(t, b.count(t, "SELECT count(*) FROM "+table), "rollback left rows in %s", table)
	}
	so, err := jobs.Write(b.ctx, b.outbox, func(tx pgx.Tx) (db.SalesOrder, []db.Event, error) { return receive(b, tx, "51000") })
	require.NoError(t, err)
	require.Regexp(t, `-000001$`, so.Number, "the failed write must not consume a number")
}

// A transaction PostgreSQL fails to let concurrent ones go on (a
// deadlock, a serialization failure) is run again from the start, up to
// jobs.TxAttempts times, and a run that failed leaves nothing: the order
// received in it is received again, once. Other errors are not retried,
// nor is a write whose caller left.
func TestWriteRetriesWhatPostgreSQLFailedForConcurrency(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Minute)
	tests := []struct {
		name     string
		code     string // raised after receiving the order
		failing  int    // runs that raise it
		cancel   bool   // the caller leaves as the first run fails
		wantRuns int
		wantErr  error
	}{
		{name: "serialization failure once", code: pgerrcode.SerializationFailure, failing: 1, wantRuns: 2},
		{name: "deadlock twice", code: pgerrcode.DeadlockDetected, failing: 2, wantRuns: 3},
		{name: "deadlock every time", code: pgerrcode.DeadlockDetected, failing: 100, wantRuns: jobs.TxAttempts, wantErr: db.ErrBusy},
		{name: "other error", code: pgerrcode.RaiseException, failing: 100, wantRuns: 1},
		{name: "caller left", code: pgerrcode.SerializationFailure, failing: 100, cancel: true, wantRuns: 1, wantErr: context.Canceled},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			externalID := fmt.Sprint(52000 + i)
			ctx, cancel := context.WithCancel(b.ctx)
			defer cancel()
			runs := 0
			_, err := jobs.Write(ctx, b.outbox, func(tx pgx.Tx) (db.SalesOrder, []db.Event, error) {
				runs++
				so, events, err := receive(b, tx, externalID)
				if err != nil || runs > tt.failing {
					return so, events, err
				}
				_, err = tx.Exec(ctx, fmt.Sprintf(`DO $$ BEGIN RAISE SQLSTATE '%s'; END $$`, tt.code))
				if tt.cancel {
					cancel()
				}
				return db.SalesOrder{}, nil, err
			})
			if runs != tt.wantRuns {
				t.Errorf("fn ran %d times, want %d", runs, tt.wantRuns)
			}
			if busy := errors.Is(err, db.ErrBusy); busy != errors.Is(tt.wantErr, db.ErrBusy) {
				t.Errorf("errors.Is(%v, db.ErrBusy) = %v", err, busy)
			}
			orders := b.count(t, `SELECT count(*) FROM sales_orders WHERE external_id = $1`, externalID)
			events := b.count(t, `SELECT count(*) FROM events e JOIN sales_orders so ON so.id = e.entity_id
				WHERE e.entity = 'sales_orders' AND so.external_id = $1`, externalID)
			if tt.failing >= tt.wantRuns {
				require.Error(t, err)
				if tt.wantErr != nil {
					require.ErrorIs(t, err, tt.wantErr)
				}
				require.Zero(t, orders, "a failed write leaves no order")
				return
			}
			require.NoError(t, err)
			require.Equal(t, 1, orders)
			require.Equal(t, 2, events, "the last run's doc.created and order.received only")
		})
	}
}

// Whoever journals an event about a document holds the document's row
// lock until commit, so that one document's event ids follow commit
// order: a redelivery (delivery.redelivered, about the redelivered
// event's document) and the token mutations (token.issued and
// token.revoked, about the user) wait for a transaction holding that row,
// as a transition of it does.
func TestJournalWritersTakeTheDocumentsLock(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Minute)
	b.startRiver(t)
	so, err := jobs.Write(b.ctx, b.outbox, func(tx pgx.Tx) (db.SalesOrder, []db.Event, error) { return receive(b, tx, "53000") })
	require.NoError(t, err)
	var received int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT id FROM events WHERE type = $1 AND entity_id = $2`,
		db.EventOrderReceived, so.ID).Scan(&received))
	b.waitProcessed(t, received) // its delivery to order_acceptance exists
	user, err := jobs.Write(b.ctx, b.outbox, func(tx pgx.Tx) (db.User, []db.Event, error) {
		return db.CreateUser(b.ctx, tx, nil, db.UserInput{Login: "clerk", DisplayName: "Clerk", Role: db.RoleSales})
	})
	require.NoError(t, err)
	issue := func() (db.APIToken, error) {
		return jobs.Write(b.ctx, b.outbox, func(tx pgx.Tx) (db.APIToken, []db.Event, error) {
			_, tok, events, err := db.IssueToken(b.ctx, tx, nil, "clerk", "test", nil)
			return tok, events, err
		})
	}
	toRevoke, err := issue()
	require.NoError(t, err)

	tests := []struct {
		name  string
		table string
		id    int64
		write func() error
		wrote string // the event type the write journals
	}{
		{"redeliver", db.EntitySalesOrders, so.ID, func() error {
			_, err := b.dispatcher.Redeliver(b.ctx, nil, db.DeliveryFilter{EventID: &received})
			return err
		}, db.EventRedelivered},
		{"issue token", db.EntityUsers, user.ID, func() error { _, err := issue(); return err }, db.EventTokenIssued},
		{"revoke token", db.EntityUsers, user.ID, func() error {
			_, err := jobs.Write(b.ctx, b.outbox, func(tx pgx.Tx) (db.APIToken, []db.Event, error) {
				return db.RevokeToken(b.ctx, tx, nil, toRevoke.ID)
			})
			return err
		}, db.EventTokenRevoked},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hold, err := b.pool.Begin(b.ctx)
			require.NoError(t, err)
			defer func() { _ = hold.Rollback(b.ctx) }() // a failed case releases the row
			var holder int
			require.NoError(t, hold.QueryRow(b.ctx, `SELECT pg_backend_pid()`).Scan(&holder))
			_, err = hold.Exec(b.ctx, `SELECT 1 FROM `+tt.table+` WHERE id = $1 FOR NO KEY UPDATE`, tt.id)
			require.NoError(t, err)
			done := make(chan error, 1)
			go func() { done <- tt.write() }()
			require.Eventually(t, func() bool {
				return len(done) > 0 || b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, holder) > 0
			}, 10*time.Second, 5*time.Millisecond)
			require.Empty(t, done, "wrote without waiting for the %s row", tt.table)
			require.NoError(t, hold.Commit(b.ctx))
			require.NoError(t, <-done)
			var last string
			require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT type FROM events WHERE entity = $1 AND entity_id = $2 ORDER BY id DESC LIMIT 1`,
				tt.table, tt.id).Scan(&last))
			require.Equal(t, tt.wrote, last)
		})
	}
}

// A dispatch job of an event just written is inserted with the id the
// event took (events.dispatch_job_id), so the event is not updated for it;
// an event enqueued again (no id noted) is updated to name its new job.
func TestDispatchJobTakesTheIDItsEventNoted(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Minute)
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	updated := func() (n int64) {
		require.NoError(t, tx.QueryRow(b.ctx, `SELECT pg_stat_get_xact_tuples_updated('events'::regclass)`).Scan(&n))
		return n
	}
	_, events, err := receive(b, tx, "51900")
	require.NoError(t, err)
	require.Len(t, events, 2)
	before := updated()
	require.NoError(t, jobs.EnqueueDispatch(b.ctx, b.river, tx, events))
	require.Equal(t, before, updated(), "no event row updated for its job")
	jobOf := func(eventID int64) (noted, actual int64) {
		require.NoError(t, tx.QueryRow(b.ctx, `SELECT e.dispatch_job_id, j.id FROM events e
			JOIN river_job j ON j.kind = 'dispatch_event' AND (j.args ->> 'event_id')::bigint = e.id
			WHERE e.id = $1 ORDER BY j.id DESC LIMIT 1`, eventID).Scan(&noted, &actual))
		return noted, actual
	}
	for _, ev := range events {
		require.NotZero(t, ev.NewDispatchJobID)
		noted, actual := jobOf(ev.ID)
		require.Equal(t, ev.NewDispatchJobID, noted)
		require.Equal(t, noted, actual, "event %d's job has the id it noted", ev.ID)
	}

	// Enqueued again, as read back: a new job, which the event now names.
	require.NoError(t, jobs.EnqueueDispatch(b.ctx, b.river, tx, []db.Event{{ID: events[0].ID}}))
	require.Equal(t, before+1, updated())
	noted, actual := jobOf(events[0].ID)
	require.Equal(t, actual, noted)
	require.Greater(t, actual, events[0].NewDispatchJobID)
}

func TestWriteEnqueuesDispatchAndSubscriberRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Minute)
	b.startRiver(t)
	so, err := jobs.Write(b.ctx, b.outbox, func(tx pgx.Tx) (db.SalesOrder, []db.Event, error) { return receive(b, tx, "51001") })
	require.NoError(t, err)
	require.Equal(t, db.SalesOrderNew, so.Status)

	var ids []int64
	rows, err := b.pool.Query(b.ctx, `SELECT id FROM events ORDER BY id`)
	require.NoError(t, err)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, ids, 2)
	b.waitProcessed(t, ids...)

	got, err := db.SalesOrderByID(b.ctx, b.pool, so.ID)
	require.NoError(t, err)
	require.Equal(t, db.SalesOrderAccepted, got.Status, "order_acceptance must have run on order.received")
	require.Zero(t, b.count(t, `SELECT count(*) FROM events WHERE processed_at < created_at`))
	// Each of the two has a feed position of its own (the acceptance's
	// doc.status_changed, written by order_acceptance, may still be on
	// its way).
	require.Equal(t, 2, b.count(t, `SELECT count(DISTINCT feed_seq) FROM events WHERE type <> 'doc.status_changed'`))
}

func TestOutOfOrderCommitsAreBothDispatched(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Minute)
	b.startRiver(t)

	// Transaction A takes the lower event id but commits last.
	txA, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer txA.Rollback(b.ctx) //nolint:errcheck
	_, eventsA, err := db.CreatePurchaseOrder(b.ctx, txA, nil, db.PurchaseOrderInput{Supplier: "A", Lines: oneLine})
	require.NoError(t, err)
	require.NoError(t, jobs.EnqueueDispatch(b.ctx, b.river, txA, eventsA))

	// B starts after A's insert (higher event id) and commits first. It must
	// not wait on A: they write different series (ЗК vs ЗП).
	soB, err := jobs.Write(b.ctx, b.outbox, func(tx pgx.Tx) (db.SalesOrder, []db.Event, error) { return receive(b, tx, "51002") })
	require.NoError(t, err)
	var maxB int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT max(id) FROM events WHERE entity_id = $1 AND entity = 'sales_orders'`, soB.ID).Scan(&maxB))
	require.Greater(t, maxB, eventsA[0].ID)
	b.waitProcessed(t, maxB)

	require.NoError(t, txA.Commit(b.ctx))
	b.waitProcessed(t, eventsA[0].ID)
	// order_acceptance journaled B's doc.status_changed while dispatching.
	var accepted int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT id FROM events WHERE type = $1 AND entity_id = $2`, db.EventStatusChanged, soB.ID).Scan(&accepted))
	b.waitProcessed(t, accepted)
	require.Zero(t, b.count(t, `SELECT count(*) FROM events WHERE processed_at IS NULL`))
	// The late commit got the later feed position: a feed cursor taken after
	// B's events does not skip A's.
	var seqA, seqB int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT feed_seq FROM events WHERE id = $1`, eventsA[0].ID).Scan(&seqA))
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT feed_seq FROM events WHERE id = $1`, maxB).Scan(&seqB))
	require.Greater(t, seqA, seqB)
}

func TestSweepProcessesEventWhoseJobWasLost(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Hour)
	_, err := jobs.Write(b.ctx, b.outbox, func(tx pgx.Tx) (db.SalesOrder, []db.Event, error) { return receive(b, tx, "51003") })
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `DELETE FROM river_job WHERE kind = $1`, jobs.DispatchArgs{}.Kind())
	require.NoError(t, err)
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM events WHERE processed_at IS NULL`))

	// Starting River runs the sweep at once (RunOnStart); nothing else can
	// process the events now.
	b.startRiver(t)
	deadline := time.Now().Add(20 * time.Second)
	for b.count(t, `SELECT count(*) FROM events WHERE processed_at IS NULL`) > 0 {
		require.False(t, time.Now().After(deadline), "sweep did not process the orphaned events")
		time.Sleep(20 * time.Millisecond)
	}
	require.Zero(t, b.count(t, `SELECT count(*) FROM river_job j JOIN events e ON e.id = (j.args->>'event_id')::bigint
		WHERE j.kind = $1 AND e.type <> $2`, jobs.DispatchArgs{}.Kind(), db.EventStatusChanged),
		"the sweep dispatches directly; it must not have needed dispatch jobs (order_acceptance's doc.status_changed has its own)")
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM deliveries WHERE status = 'delivered'`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM sales_orders WHERE status = $1`, db.SalesOrderAccepted))
}

// flaky is a built-in subscriber that writes an item (a visible effect)
// and then fails its first failures calls, permanently if permanent.
type flaky struct {
	mu        sync.Mutex
	failures  int
	permanent bool
	calls     int
}

func (f *flaky) Name() string { return "flaky" }
func (f *flaky) Filter() jobs.FilterSpec {
	return jobs.FilterSpec{EventTypes: []string{db.EventOrderReceived}}
}
func (f *flaky) Handle(ctx context.Context, tx pgx.Tx, ev db.Event) ([]db.Event, error) {
	f.mu.Lock()
	f.calls++
	call := f.calls
	fail := call <= f.failures
	f.mu.Unlock()
	if _, err := db.CreateItem(ctx, tx, db.ItemInput{SKU: fmt.Sprintf("EFFECT-%d-%d", ev.ID, call), Name: "effect", Unit: "шт"}); err != nil {
		return nil, err
	}
	if fail {
		err := fmt.Errorf("subscriber down (call %d)", call)
		if f.permanent {
			return nil, jobs.Permanent(err)
		}
		return nil, err
	}
	return nil, nil
}

func (b *testBundle) delivery(t *testing.T, eventID int64, subscriber string) db.Delivery {
	t.Helper()
	page, err := db.ListDeliveries(b.ctx, b.pool, db.DeliveryFilter{EventID: &eventID, Subscriber: &subscriber}, 1, "")
	require.NoError(t, err)
	require.Len(t, page.Deliveries, 1)
	return page.Deliveries[0]
}

func TestFailingSubscriberRetriesWithGrowingGapsThenDelivers(t *testing.T) {
	t.Parallel()
	sub := &flaky{failures: 3}
	// One event per dispatch: the backlog would dispatch doc.created along.
	b := setupWith(t, jobs.DispatcherConfig{DispatchBatch: 1}, time.Hour, sub)
	var events []db.Event
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) (err error) {
		_, events, err = receive(b, tx, "51004")
		return err
	}))
	received := events[1]
	// doc.created comes first in the document's order; until it is
	// dispatched, order.received is held back.
	dispatched, err := b.dispatcher.Dispatch(b.ctx, received.ID)
	require.NoError(t, err)
	require.Equal(t, 1, dispatched)
	k := b.delivery(t, received.ID, "flaky").Key()
	outcome, err := b.dispatcher.Deliver(b.ctx, k)
	require.NoError(t, err)
	require.Equal(t, jobs.OutcomeBlocked, outcome)
	_, err = b.dispatcher.Dispatch(b.ctx, events[0].ID)
	require.NoError(t, err)

	var gaps []time.Duration
	for attempt := 1; attempt <= 4; attempt++ {
		outcome, err := b.dispatcher.Deliver(b.ctx, k)
		require.NoError(t, err)
		d := b.delivery(t, received.ID, "flaky")
		require.EqualValues(t, attempt, d.Attempts)
		if attempt < 4 {
			require.Equal(t, jobs.OutcomeFailed, outcome)
			require.Equal(t, db.DeliveryFailed, d.Status)
			require.Contains(t, *d.LastError, "subscriber down")
			gap := d.NextAttemptAt.Sub(d.UpdatedAt)
			minGap := testRetry.Base << (attempt - 1) / 2
			require.GreaterOrEqual(t, gap, minGap-time.Millisecond, "attempt %d: backoff %s below %s", attempt, gap, minGap)
			gaps = append(gaps, gap)
			// Not due yet: the sweep leaves it alone (no spinning on it).
			if gap > 5*time.Millisecond {
				_, err := b.pool.Exec(b.ctx, `UPDATE deliveries SET next_attempt_at = now() + interval '1 hour' WHERE event_id = $1`, k.EventID)
				require.NoError(t, err)
				res, err := b.dispatcher.Sweep(b.ctx)
				require.NoError(t, err)
				require.Zero(t, res.Failed+res.Delivered, "the sweep attempted a delivery still in backoff")
			}
			// Nor does another job naming it (a release by an earlier
			// event, a duplicate): the retry waits for its own time.
			_, err = b.pool.Exec(b.ctx, `UPDATE deliveries SET next_attempt_at = now() + interval '1 hour' WHERE event_id = $1`, k.EventID)
			require.NoError(t, err)
			early, err := b.dispatcher.Deliver(b.ctx, k)
			require.NoError(t, err)
			require.Equal(t, jobs.OutcomeSkipped, early, "a delivery in backoff was attempted before its time")
			require.EqualValues(t, attempt, b.delivery(t, received.ID, "flaky").Attempts)
			_, err = b.pool.Exec(b.ctx, `UPDATE deliveries SET next_attempt_at = now() WHERE event_id = $1`, k.EventID)
			require.NoError(t, err)
		} else {
			require.Equal(t, jobs.OutcomeDelivered, outcome)
			require.Equal(t, db.DeliveryDelivered, d.Status)
			require.NotNil(t, d.DeliveredAt)
		}
	}
	require.Greater(t, gaps[2], gaps[0], "gaps must grow: %v", gaps)
	// Failed attempts rolled their writes back; only the successful one's
	// effect remains.
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM items WHERE sku LIKE 'EFFECT-%'`))
	// The other subscriber (order_acceptance) delivered independently.
	require.Equal(t, db.DeliveryPending, b.delivery(t, received.ID, "order_acceptance").Status)
	_, err = b.dispatcher.Deliver(b.ctx, b.delivery(t, received.ID, "order_acceptance").Key())
	require.NoError(t, err)
	ev, err := db.EventByID(b.ctx, b.pool, received.ID)
	require.NoError(t, err)
	require.NotNil(t, ev.ProcessedAt, "processed once every delivery is done")
}

func TestPermanentFailureIsDeadThenRedelivered(t *testing.T) {
	t.Parallel()
	sub := &flaky{failures: 1, permanent: true}
	b := setup(t, time.Hour, sub)
	var events []db.Event
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) (err error) {
		_, events, err = receive(b, tx, "51005")
		return err
	}))
	received := events[1]
	res, err := b.dispatcher.Sweep(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Failed)
	d := b.delivery(t, received.ID, "flaky")
	require.Equal(t, db.DeliveryDead, d.Status)
	require.EqualValues(t, 1, d.Attempts, "a permanent failure is not retried")
	ev, err := db.EventByID(b.ctx, b.pool, received.ID)
	require.NoError(t, err)
	require.NotNil(t, ev.ProcessedAt, "dead counts as done: the event is processed, its dead letter kept")

	dead := db.DeliveryDead
	name := "flaky"
	var keys []db.DeliveryKey
	var journaled []db.Event
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) (err error) {
		keys, journaled, err = db.Redeliver(b.ctx, tx, nil, db.DeliveryFilter{Status: &dead, Subscriber: &name}, 100)
		return err
	}))
	require.Equal(t, []db.DeliveryKey{d.Key()}, keys)
	require.Len(t, journaled, 1)
	require.Equal(t, db.EventRedelivered, journaled[0].Type)
	require.JSONEq(t, fmt.Sprintf(`{"event_id": %d, "subscriber": "flaky"}`, received.ID), string(journaled[0].Payload))

	outcome, err := b.dispatcher.Deliver(b.ctx, d.Key())
	require.NoError(t, err)
	require.Equal(t, jobs.OutcomeDelivered, outcome)
	require.EqualValues(t, 1, b.delivery(t, received.ID, "flaky").Attempts, "redelivery starts a fresh round")
}

// stepRecorder takes "test.step" events: it records each one it handles in
// table received_steps (inside the delivery transaction, so a row exists
// exactly when the delivery committed) and fails at random, or always for
// the poison document.
type stepRecorder struct {
	failRate float64
	poison   int64 // entity id whose events always fail; 0 = none
}

func (r *stepRecorder) Name() string { return "step_recorder" }
func (r *stepRecorder) Filter() jobs.FilterSpec {
	return jobs.FilterSpec{EventTypes: []string{"test.step"}}
}
func (r *stepRecorder) Handle(ctx context.Context, tx pgx.Tx, ev db.Event) ([]db.Event, error) {
	if _, err := tx.Exec(ctx, `INSERT INTO received_steps (entity_id, event_id) VALUES ($1, $2)`, ev.EntityID, ev.ID); err != nil {
		return nil, err
	}
	if ev.EntityID == r.poison || rand.Float64() < r.failRate {
		return nil, errors.New("random failure")
	}
	return nil, nil
}

// journalSteps writes perDoc "test.step" events for each of docs documents,
// interleaved, each in its own transaction with its dispatch job, from
// writers goroutines; it returns the event ids.
func (b *testBundle) journalSteps(t *testing.T, docs, perDoc, writers int) []int64 {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, `CREATE TABLE received_steps (seq bigserial PRIMARY KEY, entity_id bigint NOT NULL, event_id bigint NOT NULL UNIQUE)`)
	require.NoError(t, err)
	type job struct{ doc, step int }
	work := make(chan job)
	ids := make(chan int64, docs*perDoc)
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for j := range work {
				require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
					// As the product writes a document's events, under the
					// document's lock (db.LockDocument): one document's
					// events then commit in id order. Without it an earlier
					// id could commit after a later one had been delivered,
					// and no dispatcher can wait for an event it cannot see.
					if _, err := tx.Exec(b.ctx, `SELECT pg_advisory_xact_lock(4242, $1)`, j.doc); err != nil {
						return err
					}
					var id int64
					if err := tx.QueryRow(b.ctx, `INSERT INTO events (type, entity, entity_id, payload)
						VALUES ('test.step', 'sales_orders', $1, jsonb_build_object('step', $2::int)) RETURNING id`, j.doc, j.step).Scan(&id); err != nil {
						return err
					}
					ids <- id
					return jobs.EnqueueDispatch(b.ctx, b.river, tx, []db.Event{{ID: id}})
				}))
			}
		})
	}
	for step := range perDoc {
		for doc := 1; doc <= docs; doc++ {
			work <- job{doc, step}
		}
	}
	close(work)
	wg.Wait()
	close(ids)
	var out []int64
	for id := range ids {
		out = append(out, id)
	}
	return out
}

// promoteRetries plays River's job scheduler at a 20 ms period instead of
// its 5 s, so that retries scheduled by the backoff run promptly in tests.
func (b *testBundle) promoteRetries(t *testing.T) {
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			_, _ = b.pool.Exec(ctx, `UPDATE river_job SET state = 'available' WHERE state = 'scheduled' AND scheduled_at <= now()`)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

func TestPerDocumentOrderingUnderRandomFailures(t *testing.T) {
	t.Parallel()
	rec := &stepRecorder{failRate: 0.3}
	b := setup(t, time.Hour, rec) // 4 River workers
	river8, err := jobs.NewRiverClient(b.pool, b.dispatcher, jobs.RiverConfig{DispatchInterval: time.Hour, MaxWorkers: 8, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	b.river = river8
	b.startRiver(t)
	b.promoteRetries(t)
	const docs, perDoc = 10, 8
	ids := b.journalSteps(t, docs, perDoc, 4)
	b.waitProcessed(t, ids...)

	require.Equal(t, docs*perDoc, b.count(t, `SELECT count(*) FROM received_steps`), "every event delivered exactly once")
	require.Positive(t, b.count(t, `SELECT count(*) FROM deliveries WHERE attempts > 1`), "the random failures did happen")
	rows, err := b.pool.Query(b.ctx, `SELECT entity_id, event_id FROM received_steps ORDER BY seq`)
	require.NoError(t, err)
	type step struct {
		EntityID int64 `db:"entity_id"`
		EventID  int64 `db:"event_id"`
	}
	steps, err := pgx.CollectRows(rows, pgx.RowToStructByName[step])
	require.NoError(t, err)
	last := map[int64]int64{}
	for _, s := range steps {
		require.Greater(t, s.EventID, last[s.EntityID], "document %d received event %d after %d", s.EntityID, s.EventID, last[s.EntityID])
		last[s.EntityID] = s.EventID
	}
}

func TestPoisonEventDoesNotDelayOthers(t *testing.T) {
	t.Parallel()
	rec := &stepRecorder{poison: 1}
	b := setup(t, time.Hour, rec)
	b.startRiver(t)
	_, err := b.pool.Exec(b.ctx, `UPDATE subscribers SET max_attempts = 100 WHERE name = 'step_recorder'`)
	require.NoError(t, err)
	// The poison event is at the head of the journal.
	ids := b.journalSteps(t, 101, 1, 4)
	var poisonID int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT id FROM events WHERE entity_id = 1`).Scan(&poisonID))
	var good []int64
	for _, id := range ids {
		if id != poisonID {
			good = append(good, id)
		}
	}
	require.Len(t, good, 100)
	b.waitProcessed(t, good...)
	require.Equal(t, 100, b.count(t, `SELECT count(*) FROM received_steps WHERE entity_id <> 1`))
	d := b.delivery(t, poisonID, "step_recorder")
	require.Equal(t, db.DeliveryFailed, d.Status, "the poison event is still being retried")
	require.Zero(t, b.count(t, `SELECT count(*) FROM received_steps WHERE entity_id = 1`))
}

func TestDispatchDeliversToBuiltinsInItsTransaction(t *testing.T) {
	t.Parallel()
	b := setupWith(t, jobs.DispatcherConfig{BacklogAfter: -1}, time.Hour)
	var events []db.Event
	var so db.SalesOrder
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) (err error) {
		so, events, err = receive(b, tx, "51010")
		return err
	}))
	// River is not started: whatever happens, happens inside Dispatch.
	dispatched, err := b.dispatcher.Dispatch(b.ctx, events[0].ID)
	require.NoError(t, err)
	require.Equal(t, 2, dispatched, "the job's event and the waiting order.received")

	got, err := db.SalesOrderByID(b.ctx, b.pool, so.ID)
	require.NoError(t, err)
	require.Equal(t, db.SalesOrderAccepted, got.Status)
	d := b.delivery(t, events[1].ID, "order_acceptance")
	require.Equal(t, db.DeliveryDelivered, d.Status)
	require.EqualValues(t, 1, d.Attempts)
	// What is left unprocessed is the doc.status_changed order_acceptance
	// journaled in the delivery's transaction, with its dispatch job.
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM events e JOIN river_job j ON j.kind = $2 AND (j.args->>'event_id')::bigint = e.id
		WHERE e.processed_at IS NULL AND e.type = $1 AND e.actor_id IS NULL`, db.EventStatusChanged, jobs.DispatchArgs{}.Kind()))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM events WHERE processed_at IS NULL`))
	require.Zero(t, b.count(t, `SELECT count(*) FROM river_job WHERE kind = $1`, jobs.DeliverArgs{}.Kind()),
		"a built-in delivery needs no deliver job")
	// Feed positions follow the ids, with no gap.
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM events WHERE id = $1 AND feed_seq + 1 = (SELECT feed_seq FROM events WHERE id = $2)`,
		events[0].ID, events[1].ID))
}

// TestDispatchTakesOnBacklogInOneCommit: one dispatch job drains up to
// DispatchBatch waiting events, marks them processed in id order with
// consecutive feed positions, and sends one notification for all.
func TestDispatchTakesOnBacklogInOneCommit(t *testing.T) {
	t.Parallel()
	b := setupWith(t, jobs.DispatcherConfig{DispatchBatch: 5, BacklogAfter: -1}, time.Hour)
	var ids []int64
	for i := range 4 { // 8 events
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			_, events, err := receive(b, tx, fmt.Sprintf("5102%d", i))
			for _, ev := range events {
				ids = append(ids, ev.ID)
			}
			return err
		}))
	}
	conn, err := b.pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(b.ctx, "LISTEN event_processed")
	require.NoError(t, err)

	dispatched, err := b.dispatcher.Dispatch(b.ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, 5, dispatched)
	rows, err := b.pool.Query(b.ctx, `SELECT id, feed_seq FROM events WHERE processed_at IS NOT NULL ORDER BY id`)
	require.NoError(t, err)
	type row struct {
		ID      int64 `db:"id"`
		FeedSeq int64 `db:"feed_seq"`
	}
	done, err := pgx.CollectRows(rows, pgx.RowToStructByName[row])
	require.NoError(t, err)
	// The fifth event (the third order's doc.created) finished too; its
	// order.received waits for the next batch.
	require.Len(t, done, 5)
	for i, r := range done {
		require.Equal(t, ids[i], r.ID)
		require.Equal(t, done[0].FeedSeq+int64(i), r.FeedSeq, "feed positions in id order, consecutive")
	}
	ctx, cancel := context.WithTimeout(b.ctx, time.Second)
	defer cancel()
	n, err := conn.Conn().WaitForNotification(ctx)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprint(done[4].FeedSeq), n.Payload, "one notification carries the highest position")
	ctx2, cancel2 := context.WithTimeout(b.ctx, 200*time.Millisecond)
	defer cancel2()
	_, err = conn.Conn().WaitForNotification(ctx2)
	require.ErrorIs(t, err, context.DeadlineExceeded, "a second notification for the same commit")

	// The jobs of the events it took find nothing to do, and take nothing
	// on: they are behind the backlog's front.
	dispatched, err = b.dispatcher.Dispatch(b.ctx, ids[1])
	require.NoError(t, err)
	require.Zero(t, dispatched)
	// The job of the first event left takes on the rest: the three left
	// and the doc.status_changed of the two orders the first batch
	// accepted; the last two orders' acceptances come after.
	dispatched, err = b.dispatcher.Dispatch(b.ctx, ids[5])
	require.NoError(t, err)
	require.Equal(t, 5, dispatched)
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM events WHERE processed_at IS NULL AND type = $1`, db.EventStatusChanged))
	var next int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT min(id) FROM events WHERE processed_at IS NULL`).Scan(&next))
	dispatched, err = b.dispatcher.Dispatch(b.ctx, next)
	require.NoError(t, err)
	require.Equal(t, 2, dispatched)
	require.Zero(t, b.count(t, `SELECT count(*) FROM events WHERE processed_at IS NULL`))
	require.Equal(t, 4, b.count(t, `SELECT count(*) FROM sales_orders WHERE status = 'accepted'`))
	require.Equal(t, 4, b.count(t, `SELECT count(*) FROM events WHERE type = $1`, db.EventStatusChanged))
}

// TestBacklogEventBehindALockIsLeftToItsJob: a backlog event whose
// document's earlier event is held by another transaction is not waited
// for (two batches could wait on each other); it stays undispatched for its
// own job, and the batch goes on with the others.
func TestBacklogEventBehindALockIsLeftToItsJob(t *testing.T) {
	t.Parallel()
	b := setupWith(t, jobs.DispatcherConfig{BacklogAfter: -1}, time.Hour)
	orders := make([][]db.Event, 3) // events 1–2, 3–4, 5–6
	for i := range orders {
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) (err error) {
			_, orders[i], err = receive(b, tx, fmt.Sprintf("5103%d", i))
			return err
		}))
	}
	held := orders[1]
	// Another transaction holds the second order's doc.created.
	holder, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer holder.Rollback(b.ctx) //nolint:errcheck
	_, err = holder.Exec(b.ctx, `SELECT 1 FROM events WHERE id = $1 FOR UPDATE`, held[0].ID)
	require.NoError(t, err)

	// The first event's job takes on the backlog after it: the held
	// doc.created is skipped, and its order.received must not wait for it.
	start := time.Now()
	dispatched, err := b.dispatcher.Dispatch(b.ctx, orders[0][0].ID)
	require.NoError(t, err)
	require.Less(t, time.Since(start), 10*time.Second, "the batch waited for the held event")
	require.Equal(t, 4, dispatched, "the first and third orders' events")
	require.Equal(t, 4, b.count(t, `SELECT count(*) FROM events WHERE processed_at IS NOT NULL`))
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM events WHERE id = ANY($1) AND dispatched_at IS NULL`,
		[]int64{held[0].ID, held[1].ID}), "the held document's events stay for their jobs")
	require.Zero(t, b.count(t, `SELECT count(*) FROM deliveries WHERE event_id = $1`, held[1].ID))

	require.NoError(t, holder.Rollback(b.ctx))
	b.startRiver(t)
	b.waitProcessed(t, held[0].ID, held[1].ID)
	require.Equal(t, 3, b.count(t, `SELECT count(*) FROM sales_orders WHERE status = 'accepted'`))
}

// TestHeldBackDeliveryReleasedByAnOlderTransaction: a dispatch batch can
// run long; a delivery held back behind one of its events may have been
// created by a transaction that began after the batch's. Releasing it must
// still find it due.
func TestHeldBackDeliveryReleasedByAnOlderTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Hour)
	var events []db.Event
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) (err error) {
		_, events, err = receive(b, tx, "51040")
		return err
	}))
	older, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer older.Rollback(b.ctx) //nolint:errcheck
	_, err = older.Exec(b.ctx, `SELECT now()`)
	require.NoError(t, err)
	time.Sleep(10 * time.Millisecond)

	// order.received is dispatched first: held back behind doc.created.
	dispatched, err := b.dispatcher.Dispatch(b.ctx, events[1].ID)
	require.NoError(t, err)
	require.Equal(t, 1, dispatched)
	require.Equal(t, db.DeliveryPending, b.delivery(t, events[1].ID, "order_acceptance").Status)

	later, err := db.LaterOpenDeliveries(b.ctx, older, events[0], nil)
	require.NoError(t, err)
	require.Equal(t, []db.DeliveryKey{b.delivery(t, events[1].ID, "order_acceptance").Key()}, later)
}

// TestDispatchOfAHeldEventWaitsWithoutAConnection: a job whose event a
// batch holds does not sit on a pool connection waiting for it (the pool
// is small and the batch needs it); it tries again, and once the holder
// committed the dispatch it has nothing to do.
func TestDispatchOfAHeldEventWaitsWithoutAConnection(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Hour)
	var events []db.Event
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) (err error) {
		_, events, err = receive(b, tx, "51050")
		return err
	}))
	holder, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer holder.Rollback(b.ctx) //nolint:errcheck
	_, err = holder.Exec(b.ctx, `UPDATE events SET dispatched_at = clock_timestamp() WHERE id = $1`, events[0].ID)
	require.NoError(t, err)

	done := b.dispatchInBackground(t, events[0].ID)
	b.requireNoConnectionBetweenTries(t, done)
	require.NoError(t, holder.Commit(b.ctx))
	select {
	case n := <-done:
		require.Zero(t, n, "the holder dispatched it")
	case <-time.After(5 * time.Second):
		t.Fatal("Dispatch did not return after the holder committed")
	}
	require.Zero(t, b.count(t, `SELECT count(*) FROM deliveries WHERE event_id = $1`, events[0].ID))
}

// TestDispatchBehindAHeldPredecessorWaitsWithoutAConnection: the same for
// an event whose document's earlier event another transaction holds.
func TestDispatchBehindAHeldPredecessorWaitsWithoutAConnection(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Hour)
	var events []db.Event
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) (err error) {
		_, events, err = receive(b, tx, "51051")
		return err
	}))
	holder, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer holder.Rollback(b.ctx) //nolint:errcheck
	_, err = holder.Exec(b.ctx, `SELECT 1 FROM events WHERE id = $1 FOR UPDATE`, events[0].ID)
	require.NoError(t, err)

	done := b.dispatchInBackground(t, events[1].ID)
	b.requireNoConnectionBetweenTries(t, done)
	require.NoError(t, holder.Rollback(b.ctx))
	select {
	case n := <-done:
		require.Equal(t, 1, n)
	case <-time.After(5 * time.Second):
		t.Fatal("Dispatch did not return after the holder ended")
	}
	// doc.created is still undispatched: order.received waits for it.
	require.Equal(t, db.DeliveryPending, b.delivery(t, events[1].ID, "order_acceptance").Status)
}

func (b *testBundle) dispatchInBackground(t *testing.T, id int64) <-chan int {
	done := make(chan int, 1)
	go func() {
		n, err := b.dispatcher.Dispatch(b.ctx, id)
		assert.NoError(t, err)
		done <- n
	}()
	return done
}

// requireNoConnectionBetweenTries checks, while Dispatch is kept from its
// work by a lock held on another connection, that it does not return and
// that between its tries only the holder's connection is in use (a waiting
// dispatch would keep a second one all along).
func (b *testBundle) requireNoConnectionBetweenTries(t *testing.T, done <-chan int) {
	t.Helper()
	fewest := int32(2)
	for range 20 {
		time.Sleep(10 * time.Millisecond)
		fewest = min(fewest, b.pool.Stat().AcquiredConns())
	}
	select {
	case <-done:
		t.Fatal("Dispatch returned while the lock was held")
	default:
	}
	require.EqualValues(t, 1, fewest, "only the holder's connection is in use between tries")
}

// TestFreshEventTakesNoBacklogOn: an event dispatched soon after its commit
// means the workers keep up; its job does not look for others.
func TestFreshEventTakesNoBacklogOn(t *testing.T) {
	t.Parallel()
	b := setupWith(t, jobs.DispatcherConfig{BacklogAfter: time.Hour}, time.Hour)
	var first []db.Event
	for i := range 2 {
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			_, events, err := receive(b, tx, fmt.Sprintf("5106%d", i))
			if i == 0 {
				first = events
			}
			return err
		}))
	}
	// The first order's order.received (taken by order_acceptance).
	dispatched, err := b.dispatcher.Dispatch(b.ctx, first[1].ID)
	require.NoError(t, err)
	require.Equal(t, 1, dispatched)
	require.Equal(t, 3, b.count(t, `SELECT count(*) FROM events WHERE dispatched_at IS NULL`), "the second order's events are left to their jobs")
}

// TestBatchDeletesTheJobsOfEventsItTakesOn: the dispatch jobs of the
// events a batch dispatches besides its own are deleted in its
// transaction (they would find nothing to do); an event it claimed but
// had to leave, behind an earlier event another transaction holds, gets a
// new job. Built-in deliveries are recorded once, with their outcome.
func TestBatchDeletesTheJobsOfEventsItTakesOn(t *testing.T) {
	t.Parallel()
	b := setupWith(t, jobs.DispatcherConfig{BacklogAfter: -1}, time.Hour)
	orders := make([]db.SalesOrder, 3)
	for i := range orders {
		so, err := jobs.Write(b.ctx, b.outbox, func(tx pgx.Tx) (db.SalesOrder, []db.Event, error) {
			return receive(b, tx, fmt.Sprintf("5104%d", i))
		})
		require.NoError(t, err)
		orders[i] = so
	}
	rows, err := b.pool.Query(b.ctx, `SELECT id FROM events ORDER BY id`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, ids, 6)
	jobsOf := func(id int64) int {
		return b.count(t, `SELECT count(*) FROM river_job WHERE kind = $1 AND (args ->> 'event_id')::bigint = $2`,
			jobs.DispatchArgs{}.Kind(), id)
	}
	for _, id := range ids {
		require.Equal(t, 1, jobsOf(id))
	}
	// Another transaction holds the second order's doc.created (ids[2]):
	// the batch claims its order.received (ids[3]) and must leave it.
	holder, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer holder.Rollback(b.ctx) //nolint:errcheck
	_, err = holder.Exec(b.ctx, `SELECT 1 FROM events WHERE id = $1 FOR UPDATE`, ids[2])
	require.NoError(t, err)

	// River is not started: the first event's job is "running" here.
	dispatched, err := b.dispatcher.Dispatch(b.ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, 4, dispatched, "the first and third orders' events")
	for i, want := range []int{1, 0, 1, 1, 0, 0} {
		require.Equal(t, want, jobsOf(ids[i]), "dispatch jobs of event %d (#%d)", ids[i], i)
	}
	require.Zero(t, b.count(t, `SELECT count(*) FROM deliveries WHERE event_id = $1`, ids[3]))
	for _, id := range []int64{ids[1], ids[5]} {
		d := b.delivery(t, id, "order_acceptance")
		require.Equal(t, db.DeliveryDelivered, d.Status)
		require.EqualValues(t, 1, d.Attempts)
		require.NotNil(t, d.DeliveredAt)
		require.Nil(t, d.LastError)
	}

	require.NoError(t, holder.Rollback(b.ctx))
	b.startRiver(t)
	b.waitProcessed(t, ids...)
	require.Equal(t, 3, b.count(t, `SELECT count(*) FROM sales_orders WHERE status = 'accepted'`))
	require.Equal(t, 3, b.count(t, `SELECT count(*) FROM deliveries WHERE status = 'delivered' AND attempts = 1`))
}

// TestConcurrentDispatchJobsShareTransactions: dispatch jobs running at
// once in one process share transactions (each commit queues on the feed
// counter): the transaction in flight, or the next one, takes the waiting
// jobs' events on. Every event is still dispatched by exactly one of them,
// and the jobs it served find nothing left to do.
func TestConcurrentDispatchJobsShareTransactions(t *testing.T) {
	t.Parallel()
	b := setupWith(t, jobs.DispatcherConfig{BacklogAfter: time.Hour}, time.Hour)
	const n = 24
	ids := make([]int64, n)
	for i := range ids {
		id, err := jobs.Write(b.ctx, b.outbox, func(tx pgx.Tx) (int64, []db.Event, error) {
			var id int64
			err := tx.QueryRow(b.ctx, `INSERT INTO events (type, entity, entity_id, payload)
				VALUES ('doc.created', 'sales_orders', $1, jsonb_build_object('id', $1::bigint)) RETURNING id`,
				900_000+i).Scan(&id)
			return id, []db.Event{{ID: id}}, err
		})
		require.NoError(t, err)
		ids[i] = id
	}
	counts := make([]int, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, id := range ids {
		wg.Go(func() {
			<-start
			var err error
			counts[i], err = b.dispatcher.Dispatch(b.ctx, id)
			assert.NoError(t, err)
		})
	}
	close(start)
	wg.Wait()
	total, txs := 0, 0
	for _, c := range counts {
		total += c
		if c > 0 {
			txs++
		}
	}
	require.Equal(t, n, total, "every event dispatched once")
	require.Less(t, txs, n, "some transactions took other jobs' events on")
	var processed, seqs int
	var span int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FILTER (WHERE processed_at IS NOT NULL), count(DISTINCT feed_seq),
		coalesce(max(feed_seq) - min(feed_seq), -1) FROM events WHERE id = ANY($1)`, ids).Scan(&processed, &seqs, &span))
	require.Equal(t, n, processed)
	require.Equal(t, n, seqs, "one feed position each")
	require.EqualValues(t, n-1, span, "consecutive feed positions")
}
