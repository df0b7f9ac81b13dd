package db_test

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"erp/db"
)

// setupPlanning adds to setup's items and warehouses a product P1 made of
// 2.5 m of A2 and 0.333 of A3 per unit, a material A3, and marks MAIN as
// the warehouse that supplies production unless noWarehouse.
func setupPlanning(t *testing.T, noWarehouse bool) *testBundle {
	t.Helper()
	b := setup(t)
	for _, in := range []db.ItemInput{{SKU: "P1", Name: "Табурет", Unit: "шт"}, {SKU: "A3", Name: "Лак", Unit: "кг"}} {
		_, err := db.CreateItem(b.ctx, b.pool, in)
		require.NoError(t, err)
	}
	b.inTx(t, func(tx pgx.Tx) error {
		_, err := db.SetBillOfMaterials(b.ctx, tx, "P1", []db.ComponentInput{{SKU: "A2", Quantity: qty("2.5")}, {SKU: "A3", Quantity: qty("0.333")}})
		return err
	})
	if !noWarehouse {
		b.inTx(t, func(tx pgx.Tx) error {
			_, err := db.SetProductionWarehouse(b.ctx, tx, "MAIN")
			return err
		})
	}
	return b
}

func (b *testBundle) inTx(t *testing.T, fn func(tx pgx.Tx) error) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, fn))
}

// salesOrder creates a manual sales order with lines.
func (b *testBundle) salesOrder(t *testing.T, lines ...db.LineInput) db.SalesOrder {
	t.Helper()
	var so db.SalesOrder
	b.inTx(t, func(tx pgx.Tx) (err error) {
		so, _, err = db.CreateSalesOrder(b.ctx, tx, nil, db.SalesOrderInput{Customer: "ООО Ромашка", Lines: lines})
		return err
	})
	return so
}

// plan plans salesOrderID in a transaction of its own and returns the
// production orders and events it wrote as committed (numbered at commit).
func (b *testBundle) plan(t *testing.T, salesOrderID int64) ([]db.ProductionOrder, []db.Event) {
	t.Helper()
	var pos []db.ProductionOrder
	var events []db.Event
	b.inTx(t, func(tx pgx.Tx) (err error) {
		pos, events, err = db.PlanSalesOrder(b.ctx, tx, salesOrderID)
		return err
	})
	for i := range pos {
		var err error
		pos[i], err = db.ProductionOrderByID(b.ctx, b.pool, pos[i].ID)
		require.NoError(t, err)
	}
	return pos, b.committedEvents(t, events)
}

// committedEvents reads events again, as committed, in the same order.
func (b *testBundle) committedEvents(t *testing.T, events []db.Event) []db.Event {
	t.Helper()
	ids := make([]int64, len(events))
	for i, ev := range events {
		ids[i] = ev.ID
	}
	stored, err := db.EventsByIDs(b.ctx, b.pool, ids)
	require.NoError(t, err)
	byID := map[int64]db.Event{}
	for _, ev := range stored {
		byID[ev.ID] = ev
	}
	out := make([]db.Event, len(events))
	for i, ev := range events {
		out[i] = byID[ev.ID]
	}
	return out
}

func TestPlanSalesOrderPlansEachLineOnce(t *testing.T) {
	t.Parallel()
	b := setupPlanning(t, false)
	// Lines 1 and 3 are of a product with a bill of materials; line 2 is
	// a material sold as it is.
	so := b.salesOrder(t, db.LineInput{SKU: "P1", Quantity: qty("2")}, db.LineInput{SKU: "A2", Quantity: qty("10")}, db.LineInput{SKU: "P1", Quantity: qty("1.5")})

	pos, events := b.plan(t, so.ID)
	require.Len(t, pos, 2)
	require.Len(t, events, 2)
	for i, want := range []struct {
		lineNo int32
		qty    string
	}{{1, "2"}, {3, "1.5"}} {
		po := pos[i]
		require.Regexp(t, `^ПЗ-\d{4}-\d{6}$`, po.Number)
		require.Equal(t, "P1", po.SKU)
		require.True(t, qty(want.qty).Equal(po.Quantity), "quantity %s, want %s", po.Quantity, want.qty)
		require.Equal(t, &so.ID, po.SalesOrderID)
		require.Equal(t, &want.lineNo, po.SalesOrderLineNo)

		ev := events[i]
		require.Equal(t, db.EventDocCreated, ev.Type)
		require.Equal(t, db.EntityProdOrders, ev.Entity)
		require.Equal(t, po.ID, ev.EntityID)
		require.Nil(t, ev.ActorID, "planning is the system's doing")
		require.JSONEq(t, fmt.Sprintf(`{"id": %d, "no": %q, "entity": "prod_order"}`, po.ID, po.Number), string(ev.Payload))
	}

	// Again: every line is planned already, nothing is written.
	pos, events = b.plan(t, so.ID)
	require.Empty(t, pos)
	require.Empty(t, events)
	require.Equal(t, 2, b.count(t, "plan_prod_orders"))
	require.Equal(t, 2, b.count(t, "events WHERE entity = 'plan_prod_orders'"))

	// The schema holds the rule too.
	_, err := b.pool.Exec(b.ctx, `INSERT INTO plan_prod_orders (number, item_id, quantity, sales_order_id, sales_order_line_no)
		SELECT 'ПЗ-X', item_id, 1, sales_order_id, sales_order_line_no FROM plan_prod_orders LIMIT 1`)
	require.ErrorContains(t, err, "plan_prod_orders_sales_order_line_key")

	var missing error
	err = pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		_, _, missing = db.PlanSalesOrder(b.ctx, tx, 999)
		return missing
	})
	require.ErrorIs(t, err, db.ErrNotFound)
}

func TestPlanSalesOrderPlansNothingForACancelledOrder(t *testing.T) {
	t.Parallel()
	b := setupPlanning(t, false)
	so := b.salesOrder(t, db.LineInput{SKU: "P1", Quantity: qty("2")})
	// The clerk cancels before the planning chain reaches the order.
	b.inTx(t, func(tx pgx.Tx) error {
		_, _, err := db.CancelSalesOrder(b.ctx, tx, nil, so.ID, so.Version, "клиент передумал")
		return err
	})
	events := b.count(t, "events")

	pos, evs := b.plan(t, so.ID)
	require.Empty(t, pos)
	require.Empty(t, evs)
	require.Zero(t, b.count(t, "plan_prod_orders"))
	require.Equal(t, events, b.count(t, "events"), "planning a cancelled order journals nothing")
}

func TestIssueMaterialsOncePerSourceEvent(t *testing.T) {
	t.Parallel()
	b := setupPlanning(t, false)
	so := b.salesOrder(t, db.LineInput{SKU: "P1", Quantity: qty("1.5")})
	pos, events := b.plan(t, so.ID)
	require.Len(t, pos, 1)
	po, source := pos[0], events[0]

	issue := func() (db.WarehouseMove, []db.Event, bool) {
		var mv db.WarehouseMove
		var evs []db.Event
		var created bool
		b.inTx(t, func(tx pgx.Tx) (err error) {
			mv, evs, created, err = db.IssueMaterials(b.ctx, tx, po.ID, source.ID)
			return err
		})
		mv, err := db.WarehouseMoveByID(b.ctx, b.pool, mv.ID) // numbered at commit
		require.NoError(t, err)
		return mv, b.committedEvents(t, evs), created
	}
	mv, evs, created := issue()
	require.True(t, created)
	require.Regexp(t, `^ВЦ-\d{4}-000001$`, mv.Number)
	require.Equal(t, db.MoveIssueToProduction, mv.Kind)
	require.Equal(t, "MAIN", *mv.FromWarehouse)
	require.Nil(t, mv.ToWarehouse)
	require.Equal(t, &po.ID, mv.ProductionOrderID)
	require.Equal(t, &source.ID, mv.SourceEventID)
	// 2.5 × 1.5 = 3.75 m; 0.333 × 1.5 = 0.4995 kg, rounded up.
	require.Len(t, mv.Lines, 2)
	for i, want := range []struct{ sku, qty string }{{"A2", "3.75"}, {"A3", "0.5"}} {
		require.Equal(t, int32(i+1), mv.Lines[i].LineNo)
		require.Equal(t, want.sku, mv.Lines[i].SKU)
		require.True(t, qty(want.qty).Equal(mv.Lines[i].Quantity), "line %d: %s, want %s", i+1, mv.Lines[i].Quantity, want.qty)
		require.Nil(t, mv.Lines[i].Price)
	}
	require.Len(t, evs, 1)
	require.Equal(t, db.EntityWarehouseMoves, evs[0].Entity)
	require.Nil(t, evs[0].ActorID)
	require.JSONEq(t, fmt.Sprintf(`{"id": %d, "no": %q, "entity": "wh_move"}`, mv.ID, mv.Number), string(evs[0].Payload))

	// The same event again: the same move, nothing new.
	again, evs, created := issue()
	require.False(t, created)
	require.Empty(t, evs)
	require.Equal(t, mv.ID, again.ID)
	require.Equal(t, 1, b.count(t, "wh_moves"))
	require.Equal(t, 2, b.count(t, "wh_move_lines"))
	require.Equal(t, 1, b.count(t, "events WHERE entity = 'wh_moves'"))
}

func TestIssueMaterialsErrors(t *testing.T) {
	t.Parallel()
	b := setupPlanning(t, true)
	so := b.salesOrder(t, db.LineInput{SKU: "P1", Quantity: qty("1")})
	pos, events := b.plan(t, so.ID)
	issue := func(prodOrderID, eventID int64) error {
		return pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			_, _, _, err := db.IssueMaterials(b.ctx, tx, prodOrderID, eventID)
			return err
		})
	}

	err := issue(pos[0].ID, events[0].ID)
	require.ErrorIs(t, err, db.ErrNoProductionWarehouse)
	require.ErrorContains(t, err, pos[0].Number)
	require.ErrorContains(t, err, "setProductionWarehouse")

	// A production order made by hand for an item without a bill of
	// materials has nothing to issue; that comes before the warehouse.
	var manual db.ProductionOrder
	var manualEvents []db.Event
	b.inTx(t, func(tx pgx.Tx) (err error) {
		manual, manualEvents, err = db.CreateProductionOrder(b.ctx, tx, nil, db.ProductionOrderInput{SKU: "A1", Quantity: qty("1")})
		return err
	})
	manual, err = db.ProductionOrderByID(b.ctx, b.pool, manual.ID)
	require.NoError(t, err)
	require.Nil(t, manual.SalesOrderLineNo)
	require.ErrorIs(t, issue(manual.ID, manualEvents[0].ID), db.ErrNoBillOfMaterials)

	require.ErrorIs(t, issue(999, events[0].ID), db.ErrNotFound)
	require.Zero(t, b.count(t, "wh_moves"))

	// Once a warehouse is marked, the same event is answered.
	b.inTx(t, func(tx pgx.Tx) error {
		_, err := db.SetProductionWarehouse(b.ctx, tx, "RAW")
		return err
	})
	require.NoError(t, issue(pos[0].ID, events[0].ID))
	require.Equal(t, 1, b.count(t, "wh_moves WHERE from_warehouse_id = (SELECT id FROM warehouses WHERE code = 'RAW')"))
}

func TestSetBillOfMaterials(t *testing.T) {
	t.Parallel()
	b := setupPlanning(t, false)
	// P1 contains A2 and A3; make A2 contain A1, so A1 may not contain P1
	// (A1 → P1 → A2 → A1).
	b.inTx(t, func(tx pgx.Tx) error {
		_, err := db.SetBillOfMaterials(b.ctx, tx, "A2", []db.ComponentInput{{SKU: "A1", Quantity: qty("1")}})
		return err
	})
	c := func(sku, q string) db.ComponentInput { return db.ComponentInput{SKU: sku, Quantity: qty(q)} }
	tests := []struct {
		name       string
		sku        string
		components []db.ComponentInput
		wantField  string
	}{
		{"unknown item", "NOPE", []db.ComponentInput{c("A1", "1")}, "sku"},
		{"blank item", " ", nil, "sku"},
		{"unknown component", "P1", []db.ComponentInput{c("A2", "1"), c("NOPE", "1")}, "components.1.sku"},
		{"blank component", "P1", []db.ComponentInput{c("", "1")}, "components.0.sku"},
		{"itself", "P1", []db.ComponentInput{c("A2", "1"), c("P1", "1")}, "components.1.sku"},
		{"listed twice", "P1", []db.ComponentInput{c("A2", "1"), c("A3", "1"), c("A2", "2")}, "components.2.sku"},
		{"through another bill", "A1", []db.ComponentInput{c("A3", "1"), c("P1", "1")}, "components.1.sku"},
		{"zero quantity", "P1", []db.ComponentInput{c("A2", "0")}, "components.0.quantity"},
		{"negative quantity", "P1", []db.ComponentInput{c("A2", "-1")}, "components.0.quantity"},
		{"four decimals", "P1", []db.ComponentInput{c("A3", "1"), c("A2", "0.0001")}, "components.1.quantity"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
				_, err := db.SetBillOfMaterials(b.ctx, tx, tt.sku, tt.components)
				return err
			})
			var inputErr *db.InputError
			require.ErrorAs(t, err, &inputErr)
			require.Equal(t, tt.wantField, inputErr.Field, "error: %v", err)
		})
	}

	bom := func(sku string) []db.Component {
		t.Helper()
		var id int64
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT id FROM items WHERE sku = $1`, sku).Scan(&id))
		comps, err := db.BillOfMaterials(b.ctx, b.pool, id)
		require.NoError(t, err)
		return comps
	}
	// The bad input left P1's bill as it was.
	p1 := bom("P1")
	require.Len(t, p1, 2)
	require.Equal(t, db.Component{LineNo: 1, SKU: "A2", Name: "Доска", Unit: "м", Quantity: p1[0].Quantity}, p1[0])
	require.True(t, qty("2.5").Equal(p1[0].Quantity))
	require.Equal(t, "A3", p1[1].SKU)

	// Replacing keeps the given order; an empty list removes the bill.
	var item db.Item
	b.inTx(t, func(tx pgx.Tx) (err error) {
		item, err = db.SetBillOfMaterials(b.ctx, tx, " P1 ", []db.ComponentInput{c("A3", "0.1"), c("A1", "4")})
		return err
	})
	require.Equal(t, "P1", item.SKU)
	p1 = bom("P1")
	require.Equal(t, []string{"A3", "A1"}, []string{p1[0].SKU, p1[1].SKU})
	b.inTx(t, func(tx pgx.Tx) error {
		_, err := db.SetBillOfMaterials(b.ctx, tx, "P1", nil)
		return err
	})
	require.Empty(t, bom("P1"))
}

func TestProductionWarehouse(t *testing.T) {
	t.Parallel()
	b := setupPlanning(t, false)
	whs, err := db.Warehouses(b.ctx, b.pool)
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"MAIN": true, "RAW": false},
		map[string]bool{whs[0].Code: whs[0].SuppliesProduction, whs[1].Code: whs[1].SuppliesProduction})

	// A second one is refused at creation, on the flag, not the code.
	_, err = db.CreateWarehouse(b.ctx, b.pool, db.WarehouseInput{Code: "SHOP", Name: "Цех", SuppliesProduction: true})
	var inputErr *db.InputError
	require.ErrorAs(t, err, &inputErr)
	require.Equal(t, "suppliesProduction", inputErr.Field)
	require.ErrorIs(t, err, db.ErrConflict)
	_, err = db.CreateWarehouse(b.ctx, b.pool, db.WarehouseInput{Code: "MAIN", Name: "Ещё один"})
	require.ErrorAs(t, err, &inputErr)
	require.Equal(t, "code", inputErr.Field)

	// Moving the mark takes it from MAIN.
	var wh db.Warehouse
	b.inTx(t, func(tx pgx.Tx) (err error) {
		wh, err = db.SetProductionWarehouse(b.ctx, tx, "RAW")
		return err
	})
	require.Equal(t, "RAW", wh.Code)
	require.True(t, wh.SuppliesProduction)
	require.Equal(t, 1, b.count(t, "warehouses WHERE supplies_production"))
	err = pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		_, err := db.SetProductionWarehouse(b.ctx, tx, "NOPE")
		return err
	})
	require.ErrorAs(t, err, &inputErr)
	require.Equal(t, "code", inputErr.Field)
	require.Equal(t, 1, b.count(t, "warehouses WHERE supplies_production AND code = 'RAW'"), "a failed move keeps the mark")
}

// A production order cancelled before its materials are issued gets no
// issue; a component quantity no move can carry is ErrQuantityTooLarge.
func TestIssueMaterialsRefusals(t *testing.T) {
	t.Parallel()
	b := setupPlanning(t, false)
	so := b.salesOrder(t, db.LineInput{SKU: "P1", Quantity: qty("1")})
	pos, events := b.plan(t, so.ID)
	b.inTx(t, func(tx pgx.Tx) error {
		_, _, err := db.CancelProductionOrder(b.ctx, tx, nil, pos[0].ID, pos[0].Version, "не нужен")
		return err
	})
	b.inTx(t, func(tx pgx.Tx) error {
		mv, evs, created, err := db.IssueMaterials(b.ctx, tx, pos[0].ID, events[0].ID)
		require.False(t, created)
		require.Empty(t, evs)
		require.Zero(t, mv.ID)
		return err
	})
	require.Zero(t, b.count(t, "wh_moves"))

	huge := b.salesOrder(t, db.LineInput{SKU: "P1", Quantity: qty("999999999999999.999")})
	pos, events = b.plan(t, huge.ID)
	err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		_, _, _, err := db.IssueMaterials(b.ctx, tx, pos[0].ID, events[0].ID)
		return err
	})
	require.ErrorIs(t, err, db.ErrQuantityTooLarge)
}

// A transition in the transaction that wrote the document journals the
// document's number, not the placeholder it has until commit.
func TestTransitionInTheCreatingTransactionJournalsTheNumber(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var id int64
	b.inTx(t, func(tx pgx.Tx) error {
		p, _, err := db.InsertSalesOrder(b.ctx, tx, nil, db.SalesOrderInput{Customer: "Иванов", Lines: oneLine()})
		if err != nil {
			return err
		}
		id = p.Order().ID
		_, _, err = db.CancelSalesOrder(b.ctx, tx, nil, id, 1, "ошибка ввода")
		return err
	})
	var number, journaled string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT s.number, e.payload->>'no' FROM sales_orders s
		JOIN events e ON e.entity = 'sales_orders' AND e.entity_id = s.id AND e.type = 'doc.status_changed' WHERE s.id = $1`, id).Scan(&number, &journaled))
	require.Regexp(t, `^ЗК-\d{4}-000001$`, number)
	require.Equal(t, number, journaled)
}

// TestSalesOrdersBySets: AcceptSalesOrders and PlanSalesOrders write for
// several orders at once what AcceptSalesOrder and PlanSalesOrder write
// for each, their results in the order of the ids given; a cancelled order
// is neither accepted nor planned, production orders are numbered in the
// order of the ids, and an unknown or repeated id writes nothing.
func TestSalesOrdersBySets(t *testing.T) {
	t.Parallel()
	b := setupPlanning(t, false)
	two := b.salesOrder(t, db.LineInput{SKU: "P1", Quantity: qty("2")}, db.LineInput{SKU: "P1", Quantity: qty("3")})
	gone := b.salesOrder(t, db.LineInput{SKU: "P1", Quantity: qty("1")})
	one := b.salesOrder(t, db.LineInput{SKU: "A2", Quantity: qty("1")}, db.LineInput{SKU: "P1", Quantity: qty("4")})
	b.inTx(t, func(tx pgx.Tx) error {
		_, _, err := db.CancelSalesOrder(b.ctx, tx, nil, gone.ID, gone.Version, "клиент передумал")
		return err
	})
	// Out of id order: results follow the ids given, locks the id order.
	ids := []int64{one.ID, gone.ID, two.ID}

	var accepted, planned [][]db.Event
	b.inTx(t, func(tx pgx.Tx) (err error) {
		if accepted, err = db.AcceptSalesOrders(b.ctx, tx, ids); err != nil {
			return err
		}
		planned, err = db.PlanSalesOrders(b.ctx, tx, ids)
		return err
	})
	require.Len(t, accepted, 3)
	require.Empty(t, accepted[1], "a cancelled order is not accepted")
	for _, i := range []int{0, 2} {
		require.Len(t, accepted[i], 1)
		ev := b.committedEvents(t, accepted[i])[0]
		so, err := db.SalesOrderByID(b.ctx, b.pool, ids[i])
		require.NoError(t, err)
		require.Equal(t, db.SalesOrderAccepted, so.Status)
		require.EqualValues(t, 2, so.Version)
		require.Equal(t, db.EventStatusChanged, ev.Type)
		require.Equal(t, ids[i], ev.EntityID)
		require.Nil(t, ev.ActorID)
		require.JSONEq(t, fmt.Sprintf(`{"id": %d, "no": %q, "entity": "sales_order", "from": "new", "to": "accepted"}`, so.ID, so.Number), string(ev.Payload))
		require.NotZero(t, accepted[i][0].NewDispatchJobID)
	}
	require.Less(t, accepted[0][0].ID, accepted[2][0].ID, "journaled in the order of the ids")

	require.Len(t, planned, 3)
	require.Len(t, planned[0], 1, "one line of one order has a bill of materials")
	require.Empty(t, planned[1], "a cancelled order is not planned")
	require.Len(t, planned[2], 2)
	var numbers []string
	for _, evs := range [][]db.Event{planned[0], planned[2]} {
		for _, ev := range b.committedEvents(t, evs) {
			po, err := db.ProductionOrderByID(b.ctx, b.pool, ev.EntityID)
			require.NoError(t, err)
			require.JSONEq(t, fmt.Sprintf(`{"id": %d, "no": %q, "entity": "prod_order"}`, po.ID, po.Number), string(ev.Payload))
			numbers = append(numbers, po.Number)
		}
	}
	require.IsIncreasing(t, numbers, "numbered in the order of the ids, then of the lines")

	// Again: nothing left to accept or plan.
	b.inTx(t, func(tx pgx.Tx) (err error) {
		if accepted, err = db.AcceptSalesOrders(b.ctx, tx, ids); err != nil {
			return err
		}
		planned, err = db.PlanSalesOrders(b.ctx, tx, ids)
		return err
	})
	require.Equal(t, [][]db.Event{nil, nil, nil}, accepted)
	require.Equal(t, [][]db.Event{nil, nil, nil}, planned)

	fresh := b.salesOrder(t, db.LineInput{SKU: "P1", Quantity: qty("1")})
	events := b.count(t, "events")
	for _, bad := range [][]int64{{fresh.ID, 999}, {fresh.ID, fresh.ID}} {
		for name, batch := range map[string]func(pgx.Tx) ([][]db.Event, error){
			"accept": func(tx pgx.Tx) ([][]db.Event, error) { return db.AcceptSalesOrders(b.ctx, tx, bad) },
			"plan":   func(tx pgx.Tx) ([][]db.Event, error) { return db.PlanSalesOrders(b.ctx, tx, bad) },
		} {
			err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
				_, err := batch(tx)
				return err
			})
			require.Error(t, err, "%s %v", name, bad)
			if bad[1] == 999 {
				require.ErrorIs(t, err, db.ErrNotFound, "%s %v", name, bad)
			}
		}
	}
	so, err := db.SalesOrderByID(b.ctx, b.pool, fresh.ID)
	require.NoError(t, err)
	require.Equal(t, db.SalesOrderNew, so.Status)
	require.Equal(t, events, b.count(t, "events"))
	require.Equal(t, 3, b.count(t, "plan_prod_orders"))
}

// TestIssueMaterialsManyErrors: IssueMaterialsMany refuses as
// IssueMaterials does, writing nothing; an order without a bill of
// materials gets nothing, before the warehouse is looked for; the moves'
// events carry their numbers once committed.
func TestIssueMaterialsManyErrors(t *testing.T) {
	t.Parallel()
	b := setupPlanning(t, true)
	so := b.salesOrder(t, db.LineInput{SKU: "P1", Quantity: qty("1")}, db.LineInput{SKU: "P1", Quantity: qty("2")})
	pos, events := b.plan(t, so.ID)
	huge := b.salesOrder(t, db.LineInput{SKU: "P1", Quantity: qty("999999999999999.999")})
	hugePos, hugeEvents := b.plan(t, huge.ID)
	var manual db.ProductionOrder
	var manualEvents []db.Event
	b.inTx(t, func(tx pgx.Tx) (err error) {
		manual, manualEvents, err = db.CreateProductionOrder(b.ctx, tx, nil, db.ProductionOrderInput{SKU: "A1", Quantity: qty("1")})
		return err
	})
	req := func(po db.ProductionOrder, ev db.Event) db.MaterialsRequest {
		return db.MaterialsRequest{ProdOrderID: po.ID, SourceEventID: ev.ID}
	}
	issue := func(reqs ...db.MaterialsRequest) ([][]db.Event, error) {
		var written [][]db.Event
		err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) (err error) {
			written, err = db.IssueMaterialsMany(b.ctx, tx, reqs)
			return err
		})
		return written, err
	}

	written, err := issue(req(manual, manualEvents[0]))
	require.NoError(t, err, "no bill of materials: nothing to issue, no warehouse needed")
	require.Equal(t, [][]db.Event{nil}, written)
	_, err = issue(req(manual, manualEvents[0]), req(pos[1], events[1]))
	require.ErrorIs(t, err, db.ErrNoProductionWarehouse)
	require.ErrorContains(t, err, pos[1].Number)

	b.inTx(t, func(tx pgx.Tx) error {
		_, err := db.SetProductionWarehouse(b.ctx, tx, "MAIN")
		return err
	})
	_, err = issue(req(pos[0], events[0]), db.MaterialsRequest{ProdOrderID: 999, SourceEventID: events[1].ID})
	require.ErrorIs(t, err, db.ErrNotFound)
	_, err = issue(req(pos[0], events[0]), req(pos[0], events[1]))
	require.ErrorContains(t, err, "listed twice")
	_, err = issue(req(pos[0], events[0]), req(hugePos[0], hugeEvents[0]))
	require.ErrorIs(t, err, db.ErrQuantityTooLarge)
	require.Zero(t, b.count(t, "wh_moves"))
	require.Zero(t, b.count(t, "events WHERE entity = 'wh_moves'"))

	written, err = issue(req(pos[1], events[1]), req(manual, manualEvents[0]), req(pos[0], events[0]))
	require.NoError(t, err)
	require.Nil(t, written[1])
	var numbers []string
	for _, i := range []int{0, 2} {
		ev := b.committedEvents(t, written[i])[0]
		mv, err := db.WarehouseMoveByID(b.ctx, b.pool, ev.EntityID)
		require.NoError(t, err)
		require.JSONEq(t, fmt.Sprintf(`{"id": %d, "no": %q, "entity": "wh_move"}`, mv.ID, mv.Number), string(ev.Payload))
		require.Equal(t, db.MoveDraft, mv.Status)
		require.Len(t, mv.Lines, 2)
		numbers = append(numbers, mv.Number)
	}
	require.IsIncreasing(t, numbers, "numbered in the order of the requests")
	require.Zero(t, b.count(t, "stock_ledger"), "a draft moves no stock")
}
