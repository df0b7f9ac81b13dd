package db_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"erp/db"
	"erp/db/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type testBundle struct {
	pool *pgxpool.Pool
	ctx  context.Context
}

// setup gives a test its own migrated database with items A1, A2 and
// warehouses MAIN, RAW.
func setup(t *testing.T) *testBundle {
	t.Helper()
	b := &testBundle{pool: pgtest.NewPool(t), ctx: t.Context()}
	for _, in := range []db.ItemInput{{SKU: "A1", Name: "Стол", Unit: "шт"}, {SKU: "A2", Name: "Доска", Unit: "м"}} {
		_, err := db.CreateItem(b.ctx, b.pool, in)
		require.NoError(t, err)
	}
	for _, in := range []db.WarehouseInput{{Code: "MAIN", Name: "Основной"}, {Code: "RAW", Name: "Сырьё"}} {
		_, err := db.CreateWarehouse(b.ctx, b.pool, in)
		require.NoError(t, err)
	}
	return b
}

func (b *testBundle) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, "SELECT count(*) FROM "+table).Scan(&n))
	return n
}

func qty(s string) decimal.Decimal { return decimal.RequireFromString(s) }

func oneLine() []db.LineInput { return []db.LineInput{{SKU: "A1", Quantity: qty("1")}} }

func TestNumbersAreGaplessUnderConcurrency(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 50
	numbers := make(chan string, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			var po db.PurchaseOrder
			err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) (err error) {
				po, _, err = db.CreatePurchaseOrder(b.ctx, tx, nil, db.PurchaseOrderInput{Supplier: "ООО Лес", Lines: oneLine()})
				return err
			})
			require.NoError(t, err)
			po, err = db.PurchaseOrderByID(b.ctx, b.pool, po.ID) // numbered at its commit
			require.NoError(t, err)
			numbers <- po.Number
		})
	}
	wg.Wait()
	close(numbers)
	var year int
	require.NoError(t, b.pool.QueryRow(b.ctx, "SELECT extract(year FROM now())::int").Scan(&year))
	seen := map[string]bool{}
	for no := range numbers {
		require.False(t, seen[no], "number %s handed out twice", no)
		seen[no] = true
	}
	for i := 1; i <= n; i++ {
		want := fmt.Sprintf("ЗП-%d-%06d", year, i)
		require.True(t, seen[want], "missing %s", want)
	}
}

func TestRollbackFreesNumber(t *testing.T) {
	t.Parallel()
	b := setup(t)
	errBoom := errors.New("boom")
	err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		if _, _, err := db.CreateSalesOrder(b.ctx, tx, nil, db.SalesOrderInput{Customer: "Иванов", Lines: oneLine()}); err != nil {
			return err
		}
		return errBoom
	})
	require.ErrorIs(t, err, errBoom)

	var so db.SalesOrder
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) (err error) {
		so, _, err = db.CreateSalesOrder(b.ctx, tx, nil, db.SalesOrderInput{Customer: "Иванов", Lines: oneLine()})
		return err
	}))
	require.Regexp(t, `^ЗК-\d{4}-000001$`, so.Number)
}

func TestSetNumberSeriesStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var year int
	require.NoError(t, b.pool.QueryRow(b.ctx, "SELECT extract(year FROM now())::int").Scan(&year))
	inTx := func(fn func(tx pgx.Tx) error) error { return pgx.BeginFunc(b.ctx, b.pool, fn) }

	require.NoError(t, inTx(func(tx pgx.Tx) error { return db.SetNumberSeriesStart(b.ctx, tx, db.PrefixSalesOrder, year, 401) }))
	var so db.SalesOrder
	require.NoError(t, inTx(func(tx pgx.Tx) (err error) {
		so, _, err = db.CreateSalesOrder(b.ctx, tx, nil, db.SalesOrderInput{Customer: "Петров", Lines: oneLine()})
		return err
	}))
	require.Equal(t, fmt.Sprintf("ЗК-%d-000401", year), so.Number)

	err := inTx(func(tx pgx.Tx) error { return db.SetNumberSeriesStart(b.ctx, tx, db.PrefixSalesOrder, year, 100) })
	require.ErrorIs(t, err, db.ErrConflict, "moving a series back over issued numbers must be refused")
	var inputErr *db.InputError
	err = inTx(func(tx pgx.Tx) error { return db.SetNumberSeriesStart(b.ctx, tx, db.PrefixSalesOrder, year, 0) })
	require.ErrorAs(t, err, &inputErr)
	require.Equal(t, "start", inputErr.Field)
}

func TestBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := func(v int64) *int64 { return &v }
	str := func(s string) *string { return &s }
	neg := qty("-1")
	tests := []struct {
		name      string
		write     func(tx pgx.Tx) error
		wantField string
	}{
		{"unknown sku", func(tx pgx.Tx) error {
			_, _, err := db.CreateSalesOrder(b.ctx, tx, nil, db.SalesOrderInput{Customer: "X", Lines: []db.LineInput{{SKU: "A1", Quantity: qty("1")}, {SKU: "NOPE", Quantity: qty("1")}}})
			return err
		}, "lines.1.sku"},
		{"only unknown skus", func(tx pgx.Tx) error {
			_, _, err := db.CreateSalesOrder(b.ctx, tx, nil, db.SalesOrderInput{Customer: "X", Lines: []db.LineInput{{SKU: "NOPE", Quantity: qty("1")}, {SKU: "NADA", Quantity: qty("1")}}})
			return err
		}, "lines.0.sku"},
		{"no lines", func(tx pgx.Tx) error {
			_, _, err := db.CreatePurchaseOrder(b.ctx, tx, nil, db.PurchaseOrderInput{Supplier: "X"})
			return err
		}, "lines"},
		{"zero quantity", func(tx pgx.Tx) error {
			_, _, err := db.CreateSalesOrder(b.ctx, tx, nil, db.SalesOrderInput{Customer: "X", Lines: []db.LineInput{{SKU: "A1", Quantity: qty("0")}}})
			return err
		}, "lines.0.quantity"},
		{"negative quantity", func(tx pgx.Tx) error {
			_, _, err := db.CreateProductionOrder(b.ctx, tx, nil, db.ProductionOrderInput{SKU: "A1", Quantity: qty("-2")})
			return err
		}, "quantity"},
		{"four decimals", func(tx pgx.Tx) error {
			_, _, err := db.CreateSalesOrder(b.ctx, tx, nil, db.SalesOrderInput{Customer: "X", Lines: []db.LineInput{{SKU: "A1", Quantity: qty("1.0001")}}})
			return err
		}, "lines.0.quantity"},
		{"negative price", func(tx pgx.Tx) error {
			_, _, err := db.CreateSalesOrder(b.ctx, tx, nil, db.SalesOrderInput{Customer: "X", Lines: []db.LineInput{{SKU: "A1", Quantity: qty("1"), Price: &neg}}})
			return err
		}, "lines.0.price"},
		{"blank customer", func(tx pgx.Tx) error {
			_, _, err := db.CreateSalesOrder(b.ctx, tx, nil, db.SalesOrderInput{Customer: "  ", Lines: oneLine()})
			return err
		}, "customer"},
		{"unknown sales order", func(tx pgx.Tx) error {
			_, _, err := db.CreateProductionOrder(b.ctx, tx, nil, db.ProductionOrderInput{SKU: "A1", Quantity: qty("1"), SalesOrderID: id(999)})
			return err
		}, "salesOrderId"},
		{"unknown purchase order", func(tx pgx.Tx) error {
			_, _, err := db.CreateWarehouseMove(b.ctx, tx, nil, db.WarehouseMoveInput{Kind: db.MoveReceipt, ToWarehouse: str("MAIN"), PurchaseOrderID: id(999), Lines: oneLine()})
			return err
		}, "purchaseOrderId"},
		{"unknown warehouse", func(tx pgx.Tx) error {
			_, _, err := db.CreateWarehouseMove(b.ctx, tx, nil, db.WarehouseMoveInput{Kind: db.MoveReceipt, ToWarehouse: str("NOPE"), Lines: oneLine()})
			return err
		}, "toWarehouse"},
		{"issue without source warehouse", func(tx pgx.Tx) error {
			_, _, err := db.CreateWarehouseMove(b.ctx, tx, nil, db.WarehouseMoveInput{Kind: db.MoveIssueToProduction, Lines: oneLine()})
			return err
		}, "fromWarehouse"},
		{"crm id not digits", func(tx pgx.Tx) error {
			_, _, _, err := db.ReceiveOrder(b.ctx, tx, nil, db.ReceiveOrderInput{Source: db.SourceCRM, ExternalID: "51x", Customer: "X", Lines: oneLine()})
			return err
		}, "externalId"},
	}
	for _, tt := range tests {
		err := pgx.BeginFunc(b.ctx, b.pool, tt.write)
		var inputErr *db.InputError
		require.ErrorAs(t, err, &inputErr, tt.name)
		require.Equal(t, tt.wantField, inputErr.Field, tt.name)
	}
	for _, table := range []string{"sales_orders", "plan_prod_orders", "wh_moves", "wh_purchase_orders", "events", "number_series"} {
		require.Zero(t, b.count(t, table), "bad input wrote to %s", table)
	}
}

func TestReceiveOrderConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	in := db.ReceiveOrderInput{Source: db.SourceCRM, ExternalID: "51015", Customer: "ООО Ромашка", Lines: oneLine()}
	const n = 8
	type result struct {
		so        db.SalesOrder
		events    []db.Event
		duplicate bool
	}
	results := make(chan result, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			<-start
			var r result
			err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) (err error) {
				r.so, r.events, r.duplicate, err = db.ReceiveOrder(b.ctx, tx, nil, in)
				return err
			})
			require.NoError(t, err)
			results <- r
		})
	}
	close(start)
	wg.Wait()
	close(results)
	firsts := 0
	var orderID int64
	for r := range results {
		if orderID == 0 {
			orderID = r.so.ID
		}
		require.Equal(t, orderID, r.so.ID, "every delivery must return the same order")
		if !r.duplicate {
			firsts++
			require.Len(t, r.events, 2)
		} else {
			require.Empty(t, r.events)
		}
	}
	require.Equal(t, 1, firsts)
	require.Equal(t, 1, b.count(t, "sales_orders"))
	require.Equal(t, 2, b.count(t, "events"), "one doc.created and one order.received")

	// The losers' numbers were given back: the next order is number 2.
	var next db.SalesOrder
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) (err error) {
		next, _, err = db.CreateSalesOrder(b.ctx, tx, nil, db.SalesOrderInput{Customer: "X", Lines: oneLine()})
		return err
	}))
	require.Regexp(t, `-000002$`, next.Number)
}

func TestReceiveOrderPayloads(t *testing.T) {
	t.Parallel()
	b := setup(t)
	admin := int64(0)
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) (err error) {
		admin, err = db.EnsureAdmin(b.ctx, tx, "")
		return err
	}))
	var crm, shop []db.Event
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) (err error) {
		_, crm, _, err = db.ReceiveOrder(b.ctx, tx, &admin, db.ReceiveOrderInput{Source: db.SourceCRM, ExternalID: "51015", Customer: "X", Lines: oneLine()})
		if err != nil {
			return err
		}
		_, shop, _, err = db.ReceiveOrder(b.ctx, tx, &admin, db.ReceiveOrderInput{Source: db.SourceShop, ExternalID: "shop-7826d8468b3d", Customer: "Y",
			Lines: []db.LineInput{{SKU: "A1", Quantity: qty("1")}, {SKU: "A2", Quantity: qty("2.5")}}})
		return err
	}))
	require.Len(t, crm, 2)
	require.Equal(t, db.EventDocCreated, crm[0].Type)
	require.JSONEq(t, fmt.Sprintf(`{"id": %d, "no": "%s", "entity": "sales_order"}`, crm[0].EntityID, mustNumber(t, b, crm[0].EntityID)), string(crm[0].Payload))
	require.Equal(t, db.EventOrderReceived, crm[1].Type)
	require.JSONEq(t, fmt.Sprintf(`{"lines": 1, "source": "crm", "crm_order_id": 51015, "order_id": %d}`, crm[1].EntityID), string(crm[1].Payload))
	require.JSONEq(t, fmt.Sprintf(`{"lines": 2, "source": "shop", "sync_id": "shop-7826d8468b3d", "order_id": %d}`, shop[1].EntityID), string(shop[1].Payload))
	require.Equal(t, fmt.Sprintf("sales_orders #%d", shop[1].EntityID), shop[1].Object())
	require.Equal(t, db.AdminDisplayName, shop[1].Actor().DisplayName)
	require.Nil(t, shop[1].ProcessedAt)
}

func mustNumber(t *testing.T, b *testBundle, salesOrderID int64) string {
	t.Helper()
	so, err := db.SalesOrderByID(b.ctx, b.pool, salesOrderID)
	require.NoError(t, err)
	return so.Number
}

func TestJournalRejectsProcessedBeforeCreated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var events []db.Event
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) (err error) {
		_, events, err = db.CreateSalesOrder(b.ctx, tx, nil, db.SalesOrderInput{Customer: "X", Lines: oneLine()})
		return err
	}))
	// The old system's defect (seed rows 78, 65, 61, 53): the schema itself
	// refuses it.
	_, err := b.pool.Exec(b.ctx, `UPDATE events SET processed_at = created_at - interval '1 minute', feed_seq = 1 WHERE id = $1`, events[0].ID)
	require.ErrorContains(t, err, "events_check")
}

// CreateSalesOrder writes and reads back in one statement: what it returns
// must be exactly what a later read finds, lines (with their stored scale
// and a missing price) and event included.
func TestCreateSalesOrderReturnsWhatIsStored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	admin := int64(0)
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) (err error) {
		admin, err = db.EnsureAdmin(b.ctx, tx, "")
		return err
	}))
	price := qty("12.5")
	var so db.SalesOrder
	var events []db.Event
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) (err error) {
		so, events, err = db.CreateSalesOrder(b.ctx, tx, &admin, db.SalesOrderInput{Customer: " ООО Ромашка ", Lines: []db.LineInput{
			{SKU: "A2", Quantity: qty("2.5"), Price: &price},
			{SKU: " A1 ", Quantity: qty("1")},
			{SKU: "A2", Quantity: qty("0.001"), Price: new(qty("0"))},
		}})
		return err
	}))
	stored, err := db.SalesOrderByID(b.ctx, b.pool, so.ID)
	require.NoError(t, err)
	require.Equal(t, stored, so)
	require.Equal(t, "ООО Ромашка", so.Customer)
	require.Regexp(t, `^ЗК-\d{4}-000001$`, so.Number)
	require.Len(t, so.Lines, 3)
	require.Equal(t, []string{"A2", "A1", "A2"}, []string{so.Lines[0].SKU, so.Lines[1].SKU, so.Lines[2].SKU})
	require.Equal(t, "2.500", so.Lines[0].Quantity.StringFixed(-so.Lines[0].Quantity.Exponent()), "quantity as stored, numeric(18,3)")
	require.Nil(t, so.Lines[1].Price)

	require.Len(t, events, 1)
	page, err := db.ListEvents(b.ctx, b.pool, db.EventFilter{}, 10, "")
	require.NoError(t, err)
	require.Len(t, page.Events, 1)
	// The id of its dispatch job is noted on the event just written only.
	written := events[0]
	require.NotZero(t, written.NewDispatchJobID)
	written.NewDispatchJobID = 0
	require.Equal(t, page.Events[0], written)
	require.Equal(t, db.EventDocCreated, events[0].Type)
	require.Equal(t, db.AdminDisplayName, events[0].Actor().DisplayName)
	require.JSONEq(t, fmt.Sprintf(`{"id": %d, "no": %q, "entity": "sales_order"}`, so.ID, so.Number), string(events[0].Payload))
}

func TestCreateSalesOrderExhaustedSeries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var year int
	require.NoError(t, b.pool.QueryRow(b.ctx, "SELECT extract(year FROM now())::int").Scan(&year))
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		return db.SetNumberSeriesStart(b.ctx, tx, db.PrefixSalesOrder, year, 999999)
	}))
	create := func() (db.SalesOrder, error) {
		var so db.SalesOrder
		err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) (err error) {
			so, _, err = db.CreateSalesOrder(b.ctx, tx, nil, db.SalesOrderInput{Customer: "X", Lines: oneLine()})
			return err
		})
		return so, err
	}
	so, err := create()
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("ЗК-%d-999999", year), so.Number)
	_, err = create()
	require.ErrorIs(t, err, db.ErrConflict)
	require.ErrorContains(t, err, "exhausted")
	require.Equal(t, 1, b.count(t, "sales_orders"))
	require.Equal(t, 1, b.count(t, "sales_order_lines"))
	require.Equal(t, 1, b.count(t, "events"))
}

// A sales order takes its number inside COMMIT: a transaction that has
// written an order and not committed holds no lock on the series, so a
// later one commits first and takes the first number; each number is in
// its order's doc.created payload, and a rolled-back order frees its
// number.
func TestSalesOrderNumberTakenAtCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	insert := func(tx pgx.Tx) db.PendingSalesOrder {
		p, _, err := db.InsertSalesOrder(b.ctx, tx, nil, db.SalesOrderInput{Customer: "Иванов", Lines: oneLine()})
		require.NoError(t, err)
		return p
	}
	slow, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = slow.Rollback(b.ctx) }()
	first := insert(slow)

	// Rolled back: its number is never taken.
	errBoom := errors.New("boom")
	require.ErrorIs(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error { insert(tx); return errBoom }), errBoom)
	// Not held up by the uncommitted order.
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	var fast db.PendingSalesOrder
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { fast = insert(tx); return nil }))
	require.NoError(t, slow.Commit(b.ctx))

	var year int
	require.NoError(t, b.pool.QueryRow(b.ctx, "SELECT extract(year FROM now())::int").Scan(&year))
	for want, p := range map[string]db.PendingSalesOrder{"000001": fast, "000002": first} {
		so, err := db.NumberedSalesOrder(b.ctx, b.pool, p)
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("ЗК-%d-%s", year, want), so.Number)
		var no string
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT payload->>'no' FROM events WHERE entity = 'sales_orders' AND entity_id = $1 AND type = 'doc.created'`, so.ID).Scan(&no))
		require.Equal(t, so.Number, no)
	}
	require.Zero(t, b.count(t, "sales_orders WHERE number LIKE 'pending %'"))
}

// An exhausted ЗК series fails the commit of an order numbered there with
// ErrConflict, and the order, its lines and its event are not written.
func TestSalesOrderExhaustedSeriesAtCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var year int
	require.NoError(t, b.pool.QueryRow(b.ctx, "SELECT extract(year FROM now())::int").Scan(&year))
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		return db.SetNumberSeriesStart(b.ctx, tx, db.PrefixSalesOrder, year, 999999)
	}))
	create := func() error {
		return db.CommitErr(pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			_, _, err := db.InsertSalesOrder(b.ctx, tx, nil, db.SalesOrderInput{Customer: "X", Lines: oneLine()})
			return err
		}))
	}
	require.NoError(t, create())
	err := create()
	require.ErrorIs(t, err, db.ErrConflict)
	require.ErrorContains(t, err, "exhausted")
	require.Equal(t, 1, b.count(t, "sales_orders"))
	require.Equal(t, 1, b.count(t, "sales_order_lines"))
	require.Equal(t, 1, b.count(t, "events"))
}
