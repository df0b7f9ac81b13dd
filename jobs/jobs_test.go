package jobs_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/shopspring/decimal"
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
func setup(t *testing.T, interval time.Duration) *testBundle {
	t.Helper()
	b := &testBundle{ctx: t.Context(), pool: pgtest.NewPool(t)}
	logger := slog.New(slog.DiscardHandler)
	b.dispatcher = jobs.NewDispatcher(b.pool, logger, jobs.OrderAcceptance{})
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

func (b *testBundle) count(t *testing.T, sql string, args ...any) int {
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
	require.Equal(t, 2, b.count(t, `SELECT count(DISTINCT feed_seq) FROM events`))
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
	require.Zero(t, b.count(t, `SELECT count(*) FROM river_job WHERE kind = $1`, jobs.DispatchArgs{}.Kind()),
		"the sweep dispatches directly; it must not have needed dispatch jobs")
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM sales_orders WHERE status = $1`, db.SalesOrderAccepted))
}

// failing is a subscriber that fails until told otherwise.
type failing struct{ fail bool }

func (f *failing) Name() string        { return "failing" }
func (f *failing) Accepts(string) bool { return true }
func (f *failing) Handle(context.Context, pgx.Tx, db.Event) error {
	if f.fail {
		return errors.New("subscriber down")
	}
	return nil
}

func TestDispatchFailureRollsBackSubscriberEffects(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Minute)
	sub := &failing{fail: true}
	d := jobs.NewDispatcher(b.pool, slog.New(slog.DiscardHandler), jobs.OrderAcceptance{}, sub)
	var events []db.Event
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) (err error) {
		_, events, err = receive(b, tx, "51004")
		return err
	}))
	received := events[1]
	processed, err := d.Dispatch(b.ctx, received.ID)
	require.Error(t, err)
	require.False(t, processed)
	// order_acceptance ran before the failing subscriber, in the same
	// transaction: its write must be rolled back with the failure.
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM sales_orders WHERE status = $1`, db.SalesOrderNew))

	res, err := d.Sweep(b.ctx)
	require.NoError(t, err)
	require.Equal(t, jobs.SweepResult{Processed: 0, Failed: 2}, res, "the sweep counts failures and goes on")

	sub.fail = false
	res, err = d.Sweep(b.ctx)
	require.NoError(t, err)
	require.Equal(t, jobs.SweepResult{Processed: 2}, res)
	processed, err = d.Dispatch(b.ctx, received.ID)
	require.NoError(t, err)
	require.False(t, processed, "a processed event is not dispatched again")
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM sales_orders WHERE status = $1`, db.SalesOrderAccepted))
}
