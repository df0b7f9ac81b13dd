package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"erp/db"
	"erp/jobs"
)

// batchRecorder is a built-in BatchSubscriber of order.received that
// leaves an item MARK-<order id> per order and records its calls; the
// order poison fails it.
type batchRecorder struct {
	mu      sync.Mutex
	batches []int // sizes of the HandleBatch calls
	poison  int64
}

func (r *batchRecorder) Name() string { return "batch_recorder" }
func (r *batchRecorder) Filter() jobs.FilterSpec {
	return jobs.FilterSpec{EventTypes: []string{db.EventOrderReceived}}
}
func (r *batchRecorder) Handle(ctx context.Context, tx pgx.Tx, ev db.Event) ([]db.Event, error) {
	return nil, r.mark(ctx, tx, ev)
}
func (r *batchRecorder) HandleBatch(ctx context.Context, tx pgx.Tx, evs []db.Event) ([][]db.Event, error) {
	r.mu.Lock()
	r.batches = append(r.batches, len(evs))
	r.mu.Unlock()
	for _, ev := range evs {
		if err := r.mark(ctx, tx, ev); err != nil {
			return nil, err
		}
	}
	return make([][]db.Event, len(evs)), nil
}
func (r *batchRecorder) mark(ctx context.Context, tx pgx.Tx, ev db.Event) error {
	if ev.EntityID == r.poison {
		return errors.New("poisoned order")
	}
	_, err := db.CreateItem(ctx, tx, db.ItemInput{SKU: fmt.Sprintf("MARK-%d", ev.EntityID), Name: "mark", Unit: "шт"})
	return err
}

// receiveOrders receives orders first…first+n-1 (external ids), each in
// its own transaction, and returns their order.received events.
func (b *testBundle) receiveOrders(t *testing.T, first, n int) []db.Event {
	t.Helper()
	var received []db.Event
	for i := first; i < first+n; i++ {
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			_, events, err := receive(b, tx, fmt.Sprintf("5300%d", i))
			if err != nil {
				return err
			}
			received = append(received, events[1])
			return nil
		}))
	}
	return received
}

// TestBuiltinTakesTheDispatchAsOneBatch: the order.received events of one
// dispatch reach a BatchSubscriber in one HandleBatch call; when it fails,
// its writes are undone and every event is attempted on its own, so the
// bad one fails alone and the others are delivered, each effect once.
func TestBuiltinTakesTheDispatchAsOneBatch(t *testing.T) {
	t.Parallel()
	for _, poisoned := range []bool{false, true} {
		t.Run(fmt.Sprintf("poisoned=%v", poisoned), func(t *testing.T) {
			t.Parallel()
			rec := &batchRecorder{}
			b := setupWith(t, jobs.DispatcherConfig{BacklogAfter: -1}, time.Hour, rec)
			received := b.receiveOrders(t, 0, 3)
			if poisoned {
				rec.poison = received[1].EntityID
			}
			// River is not started: one dispatch takes the six events.
			dispatched, err := b.dispatcher.Dispatch(b.ctx, received[0].ID-1)
			require.NoError(t, err)
			require.Equal(t, 6, dispatched)
			require.Equal(t, []int{3}, rec.batches, "one batch for the dispatch")

			for _, ev := range received {
				d := b.delivery(t, ev.ID, rec.Name())
				marks := b.count(t, `SELECT count(*) FROM items WHERE sku = $1`, fmt.Sprintf("MARK-%d", ev.EntityID))
				if ev.EntityID == rec.poison {
					require.Equal(t, db.DeliveryFailed, d.Status)
					require.Zero(t, marks)
					continue
				}
				require.Equal(t, db.DeliveryDelivered, d.Status, "order %d", ev.EntityID)
				require.EqualValues(t, 1, d.Attempts)
				require.Equal(t, 1, marks, "order %d", ev.EntityID)
				// The built-ins of the chain took the batch too.
				require.Equal(t, db.DeliveryDelivered, b.delivery(t, ev.ID, "order_acceptance").Status)
			}
			require.Equal(t, 3, b.count(t, `SELECT count(*) FROM sales_orders WHERE status = 'accepted'`))
			require.Equal(t, 3, b.count(t, `SELECT count(*) FROM events WHERE type = $1`, db.EventStatusChanged))
		})
	}
}

// TestBadEventDoesNotFailItsBatchMates: an order.received about an order
// that does not exist, among good ones in one dispatch, fails its own
// deliveries only: the other orders are accepted and planned once each,
// their production orders numbered in the order of the events.
func TestBadEventDoesNotFailItsBatchMates(t *testing.T) {
	t.Parallel()
	b := setupWith(t, jobs.DispatcherConfig{BacklogAfter: -1}, time.Hour, jobs.ProductionPlanning{})
	_, err := db.CreateItem(b.ctx, b.pool, db.ItemInput{SKU: "M1", Name: "Брус", Unit: "м"})
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		_, err := db.SetBillOfMaterials(b.ctx, tx, "A1", []db.ComponentInput{{SKU: "M1", Quantity: qtyOf("2")}})
		return err
	}))
	received := b.receiveOrders(t, 0, 2)
	var bad db.Event
	require.NoError(t, b.pool.QueryRow(b.ctx, `INSERT INTO events (type, entity, entity_id, payload)
		VALUES ($1, 'sales_orders', 0, '{}') RETURNING id, entity_id`, db.EventOrderReceived).Scan(&bad.ID, &bad.EntityID))
	received = append(received, bad)
	received = append(received, b.receiveOrders(t, 2, 1)...)

	dispatched, err := b.dispatcher.Dispatch(b.ctx, received[0].ID-1)
	require.NoError(t, err)
	require.Equal(t, 7, dispatched)

	require.Equal(t, db.DeliveryFailed, b.delivery(t, bad.ID, "order_acceptance").Status)
	require.Equal(t, db.DeliveryDead, b.delivery(t, bad.ID, "production_planning").Status)
	var numbers []string
	for _, ev := range []db.Event{received[0], received[1], received[3]} {
		for _, sub := range []string{"order_acceptance", "production_planning"} {
			d := b.delivery(t, ev.ID, sub)
			require.Equal(t, db.DeliveryDelivered, d.Status, "%s of order %d", sub, ev.EntityID)
			require.EqualValues(t, 1, d.Attempts)
		}
		so, err := db.SalesOrderByID(b.ctx, b.pool, ev.EntityID)
		require.NoError(t, err)
		require.Equal(t, db.SalesOrderAccepted, so.Status)
		var no string
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT number FROM plan_prod_orders WHERE sales_order_id = $1`, so.ID).Scan(&no))
		numbers = append(numbers, no)
	}
	require.Equal(t, 3, b.count(t, `SELECT count(*) FROM events WHERE type = $1`, db.EventStatusChanged))
	require.Equal(t, 3, b.count(t, `SELECT count(*) FROM plan_prod_orders`))
	require.IsIncreasing(t, numbers)
}
