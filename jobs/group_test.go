package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"erp/db"
	"erp/jobs"
)

// groupedOrder is one WriteGrouped call's outcome.
type groupedOrder struct {
	order db.SalesOrder
	err   error
}

// holdSeries row-locks this year's sales order series in a transaction of
// its own, so that every order's commit waits on it; release commits.
func (b *testBundle) holdSeries(t *testing.T) (release func()) {
	t.Helper()
	year := time.Now().Year()
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		return db.SetNumberSeriesStart(b.ctx, tx, db.PrefixSalesOrder, year, 1)
	}))
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, `SELECT 1 FROM number_series WHERE prefix = $1 AND year = $2 FOR UPDATE`, db.PrefixSalesOrder, year)
	require.NoError(t, err)
	var once sync.Once
	release = func() { once.Do(func() { require.NoError(t, tx.Commit(b.ctx)) }) }
	t.Cleanup(release)
	return release
}

// writeOrders starts one WriteGrouped call per line set in lines (a
// sales order of that one line each; extra, when set, also runs in the
// member's transaction) and returns their outcomes once all have ended.
// entered counts the calls whose fn has run.
func (b *testBundle) writeOrders(ctx context.Context, lines [][]db.LineInput, entered *atomic.Int64, extra func(i int, tx pgx.Tx) error) func() []groupedOrder {
	out := make([]groupedOrder, len(lines))
	var wg sync.WaitGroup
	for i, l := range lines {
		wg.Go(func() {
			p, err := jobs.WriteGrouped(ctx, b.outbox, func(ctx context.Context, tx pgx.Tx) (db.PendingSalesOrder, []db.Event, error) {
				entered.Add(1)
				p, events, err := db.InsertSalesOrder(ctx, tx, nil, db.SalesOrderInput{Customer: fmt.Sprintf("Покупатель %d", i), Lines: l})
				if err == nil && extra != nil {
					err = extra(i, tx)
				}
				return p, events, err
			})
			if err == nil {
				out[i].order, err = db.NumberedSalesOrder(b.ctx, b.pool, p)
			}
			out[i].err = err
		})
	}
	return func() []groupedOrder { wg.Wait(); return out }
}

// waitBlocked waits until both shared-transaction runners wait on the
// series at commit and queued calls wait behind them, all started calls
// being in one or the other.
func (b *testBundle) waitBlocked(t *testing.T, started int, entered *atomic.Int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		waiting := b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`)
		return waiting == 2 && int(entered.Load())+jobs.GroupQueued(b.outbox) == started
	}, 10*time.Second, 5*time.Millisecond)
}

func orderLines(n int, sku func(i int) string) [][]db.LineInput {
	lines := make([][]db.LineInput, n)
	for i := range lines {
		lines[i] = []db.LineInput{{SKU: sku(i), Quantity: qtyOf("1")}}
	}
	return lines
}

// requireGapless checks that the committed orders hold numbers 1…n of
// the series, each once, with their doc.created events numbered and a
// dispatch job each.
func (b *testBundle) requireGapless(t *testing.T, got []groupedOrder, n int) {
	t.Helper()
	numbers := map[string]bool{}
	for _, g := range got {
		if g.err == nil {
			numbers[g.order.Number] = true
		}
	}
	require.Len(t, numbers, n, "each committed order has a number of its own")
	year := time.Now().Year()
	for i := 1; i <= n; i++ {
		no := fmt.Sprintf("%s-%d-%06d", db.PrefixSalesOrder, year, i)
		require.True(t, numbers[no], "number %s missing: the series has a gap", no)
	}
	require.Equal(t, n, b.count(t, `SELECT count(*) FROM sales_orders`))
	require.Equal(t, n, b.count(t, `SELECT count(*) FROM events e JOIN sales_orders s ON s.id = e.entity_id
		WHERE e.entity = 'sales_orders' AND e.type = 'doc.created' AND e.payload->>'no' = s.number`))
	require.Equal(t, n, b.count(t, `SELECT count(*) FROM river_job j JOIN events e ON e.dispatch_job_id = j.id WHERE j.kind = 'dispatch_event'`))
}

// Orders written while a commit waits on the series share the next
// transaction: 48 concurrent orders take three commits, and the series
// stays gapless with every order's event and dispatch job.
func TestConcurrentOrdersShareACommit(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Hour)
	release := b.holdSeries(t)
	var entered atomic.Int64
	const n = 48
	wait := b.writeOrders(b.ctx, orderLines(n, func(int) string { return "A1" }), &entered, nil)
	b.waitBlocked(t, n, &entered)
	release()
	got := wait()
	for i, g := range got {
		require.NoError(t, g.err, "order %d", i)
	}
	b.requireGapless(t, got, n)
	// Each runner's first transaction holds what it took before the
	// series was released; everything queued behind them shares one.
	commits := b.count(t, `SELECT count(DISTINCT xmin::text) FROM sales_orders`)
	require.LessOrEqual(t, commits, 3, "48 orders in %d commits", commits)
}

// A grouped order that fails is rolled back alone: the orders around it
// in its transaction commit, their numbers gapless; one whose caller left
// while it was queued writes nothing.
func TestGroupedOrderFailureIsItsAlone(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Hour)
	release := b.holdSeries(t)
	var entered atomic.Int64
	const n = 15
	lines := orderLines(n, func(i int) string {
		if i%3 == 2 {
			return "NOPE"
		}
		return "A1"
	})
	wait := b.writeOrders(b.ctx, lines, &entered, nil)
	b.waitBlocked(t, n, &entered)

	left, leave := context.WithCancel(b.ctx)
	waitLeft := b.writeOrders(left, orderLines(1, func(int) string { return "A1" }), &entered, nil)
	require.Eventually(t, func() bool { return int(entered.Load())+jobs.GroupQueued(b.outbox) == n+1 }, 10*time.Second, 5*time.Millisecond)
	leave()
	release()

	got := wait()
	good := 0
	for i, g := range got {
		if lines[i][0].SKU == "NOPE" {
			var inputErr *db.InputError
			require.ErrorAs(t, g.err, &inputErr, "order %d", i)
			continue
		}
		require.NoError(t, g.err, "order %d", i)
		good++
	}
	require.ErrorIs(t, waitLeft()[0].err, context.Canceled)
	b.requireGapless(t, got, good)
}

// A shared commit that fails (here a deferred check one member's write
// trips at commit) rolls all of it back; each member is then written on
// its own, so only the failing one fails and the series stays gapless.
func TestSharedCommitFailureRetriesEachAlone(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Hour)
	_, err := b.pool.Exec(b.ctx, `
		CREATE TABLE commit_checks (ok boolean NOT NULL);
		CREATE FUNCTION commit_check() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NOT NEW.ok THEN RAISE EXCEPTION 'refused at commit' USING ERRCODE = 'check_violation'; END IF;
			RETURN NULL;
		END $$;
		CREATE CONSTRAINT TRIGGER commit_check AFTER INSERT ON commit_checks
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION commit_check();`)
	require.NoError(t, err)
	release := b.holdSeries(t)
	var entered atomic.Int64
	wait := b.writeOrders(b.ctx, orderLines(2, func(int) string { return "A1" }), &entered, nil)
	b.waitBlocked(t, 2, &entered)

	// These queue behind the two runners and share a transaction.
	const n = 6
	poison := 3
	waitShared := b.writeOrders(b.ctx, orderLines(n, func(int) string { return "A1" }), &entered, func(i int, tx pgx.Tx) error {
		_, err := tx.Exec(b.ctx, `INSERT INTO commit_checks VALUES ($1)`, i != poison)
		return err
	})
	require.Eventually(t, func() bool { return jobs.GroupQueued(b.outbox) == n }, 10*time.Second, 5*time.Millisecond)
	release()

	got := append(wait(), waitShared()...)
	for i, g := range got {
		if i == 2+poison {
			require.ErrorContains(t, g.err, "refused at commit")
			continue
		}
		require.NoError(t, g.err, "order %d", i)
	}
	require.Equal(t, n-1, b.count(t, `SELECT count(*) FROM commit_checks`))
	b.requireGapless(t, got, 2+n-1)
	var pgErr interface{ SQLState() string }
	require.True(t, errors.As(got[2+poison].err, &pgErr) && pgErr.SQLState() == "23514", "the member's own commit error: %v", got[2+poison].err)
}

// A grouped order stuck on a row another transaction holds does not hold
// up the orders it shares a transaction with: the server's lock timeout
// ends its statement, the others commit, and it is written on its own
// once the row is free.
func TestStuckGroupedOrderDoesNotHoldUpOthers(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Hour)
	_, err := db.CreateItem(b.ctx, b.pool, db.ItemInput{SKU: "B2", Name: "Шкаф", Unit: "шт"})
	require.NoError(t, err)
	release := b.holdSeries(t)
	var entered atomic.Int64
	wait := b.writeOrders(b.ctx, orderLines(2, func(int) string { return "A1" }), &entered, nil)
	b.waitBlocked(t, 2, &entered)

	holder, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(b.ctx) }()
	_, err = holder.Exec(b.ctx, `SELECT 1 FROM items WHERE sku = 'B2' FOR UPDATE`)
	require.NoError(t, err)
	const n = 4
	stuck := 0
	waitShared := b.writeOrders(b.ctx, orderLines(n, func(i int) string {
		if i == stuck {
			return "B2"
		}
		return "A1"
	}), &entered, nil)
	require.Eventually(t, func() bool { return jobs.GroupQueued(b.outbox) == n }, 10*time.Second, 5*time.Millisecond)
	release()

	// Everything but the stuck order commits while B2 is still held.
	require.Eventually(t, func() bool { return b.count(t, `SELECT count(*) FROM sales_orders`) == 2+n-1 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, holder.Rollback(b.ctx))
	got := append(wait(), waitShared()...)
	for i, g := range got {
		require.NoError(t, g.err, "order %d", i)
	}
	require.Equal(t, "B2", got[2+stuck].order.Lines[0].SKU)
	b.requireGapless(t, got, 2+n)
}
