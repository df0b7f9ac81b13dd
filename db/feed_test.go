package db_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"erp/db"
)

// startFeed runs a feed on b's pool until the test ends.
func startFeed(t *testing.T, b *testBundle) *db.Feed {
	t.Helper()
	f := db.NewFeed(b.pool, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case <-f.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("feed did not start listening")
	}
	return f
}

// processOrders writes n sales orders and processes their events the way
// the dispatcher does (lock, mark processed, NOTIFY on commit), returning
// the events in processing order.
func processOrders(t *testing.T, b *testBundle, n int) []db.Event {
	t.Helper()
	var out []db.Event
	for range n {
		var events []db.Event
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			_, evs, err := db.CreateSalesOrder(b.ctx, tx, nil, db.SalesOrderInput{
				Customer: "Feed", Lines: []db.LineInput{{SKU: "A1", Quantity: decimal.NewFromInt(1)}},
			})
			events = evs
			return err
		}))
		for _, ev := range events {
			require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
				if _, err := db.LockUndispatchedEvent(b.ctx, tx, ev.ID); err != nil {
					return err
				}
				return db.MarkEventProcessed(b.ctx, tx, ev.ID)
			}))
			out = append(out, ev)
		}
	}
	return out
}

// receive takes n events from sub or fails after 10 s.
func receive(t *testing.T, sub *db.FeedSubscription, n int) []db.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []db.Event
	for len(got) < n {
		ev, ok := sub.Next(ctx)
		require.True(t, ok, "got %d of %d events (ctx: %v)", len(got), n, ctx.Err())
		got = append(got, *ev)
	}
	return got
}

// requireNone fails when sub yields an event within 200 ms.
func requireNone(t *testing.T, sub *db.FeedSubscription) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if ev, ok := sub.Next(ctx); ok {
		t.Fatalf("unexpected event %d", ev.ID)
	}
}

func ids(events []db.Event) []int64 {
	out := make([]int64, len(events))
	for i, ev := range events {
		out[i] = ev.ID
	}
	return out
}

func listenBackend(t *testing.T, b *testBundle) int {
	t.Helper()
	var pid int
	require.NoError(t, b.pool.QueryRow(b.ctx, `
		SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN %'`).Scan(&pid))
	return pid
}

func TestFeedReconnectsAndBackfillsAfterConnectionLoss(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := startFeed(t, b)
	sub := f.Subscribe(db.EventFilter{}, 100)
	defer sub.Close()

	before := processOrders(t, b, 3)
	require.Equal(t, ids(before), ids(receive(t, sub, 3)))

	pid := listenBackend(t, b)
	var terminated bool
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&terminated))
	require.True(t, terminated)
	// Processed while the feed has no connection: their NOTIFYs reach
	// nobody, the reconnect's catch-up must deliver them.
	during := processOrders(t, b, 3)
	after := processOrders(t, b, 2)

	got := receive(t, sub, 5)
	require.Equal(t, append(ids(during), ids(after)...), ids(got), "in feed order, none missed, none twice")
	for i := 1; i < len(got); i++ {
		require.Greater(t, *got[i].FeedSeq, *got[i-1].FeedSeq)
	}
	// pg_terminate_backend does not wait: the old backend may still be in
	// pg_stat_activity, exiting, beside the new one.
	require.Eventually(t, func() bool {
		var others int
		err := b.pool.QueryRow(b.ctx, `
			SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE 'LISTEN %' AND pid <> $1`, pid).Scan(&others)
		return err == nil && others == 1
	}, 10*time.Second, 10*time.Millisecond, "a new LISTEN connection")
	requireNone(t, sub)
}

func TestFeedDropsSubscriberThatFallsBehind(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := startFeed(t, b)
	slow := f.Subscribe(db.EventFilter{}, 2)
	fast := f.Subscribe(db.EventFilter{}, 100)
	defer fast.Close()

	events := processOrders(t, b, 5)
	require.Equal(t, ids(events), ids(receive(t, fast, 5)), "the others get everything")
	select {
	case <-slow.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the slow subscription was not dropped")
	}
	require.True(t, slow.Overflowed())
	_, ok := slow.Next(b.ctx)
	require.False(t, ok, "a dropped subscription yields nothing more: it resumes by cursor")
	require.Equal(t, 1, f.Subscribers())
	slow.Close() // a no-op now
}

func TestFeedFiltersSubscriptions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := startFeed(t, b)
	other := int64(1 << 40)
	none := f.Subscribe(db.EventFilter{EntityID: &other}, 10)
	defer none.Close()
	orders := f.Subscribe(db.EventFilter{Types: []string{db.EventDocCreated}, Entity: ptr(db.EntitySalesOrders)}, 10)
	defer orders.Close()

	events := processOrders(t, b, 2)
	require.Equal(t, ids(events), ids(receive(t, orders, 2)))
	requireNone(t, none)
}

func ptr[T any](v T) *T { return &v }
