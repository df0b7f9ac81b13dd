package resolvers_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"erp/app/apptest"
)

type salesOrderPage struct {
	SalesOrders struct {
		Edges []struct {
			Cursor string
			Node   struct {
				ID, Number, Status, Customer string
				Lines                        []struct{ SKU string }
			}
		}
		PageInfo struct {
			HasNextPage bool
			EndCursor   *string
		}
	} `json:"salesOrders"`
}

const salesOrdersQuery = `query($f: SalesOrderFilter, $first: Int, $after: String) {
	salesOrders(filter: $f, first: $first, after: $after) {
		edges { cursor node { id number status customer lines { sku } } } pageInfo { hasNextPage endCursor } } }`

// seedSalesOrders writes n sales orders of customer with one line of A1
// in one statement, as a large history is set up; the lists read them
// like any other.
func seedSalesOrders(t *testing.T, s *apptest.Server, n int, customer string) {
	t.Helper()
	_, err := s.Pool.Exec(t.Context(), `
		WITH so AS (
			INSERT INTO sales_orders (number, customer)
			SELECT 'ЗК-2025-' || lpad(g::text, 6, '0'), $2 FROM generate_series(1, $1::int) g
			RETURNING id)
		INSERT INTO sales_order_lines (sales_order_id, line_no, item_id, quantity)
		SELECT so.id, 1, (SELECT id FROM items WHERE sku = 'A1'), 1 FROM so`, n, customer)
	require.NoError(t, err)
}

// Paging through 500 sales orders while 4 writers add more returns every
// order that existed before the first page exactly once.
func TestSalesOrdersPagingWhileWritersAdd(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	seedSalesOrders(t, s, 500, "История")
	var existing []string
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT array_agg(id::text ORDER BY id) FROM sales_orders`).Scan(&existing))
	require.Len(t, existing, 500)

	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var added atomic.Int64
	for w := range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				_, res, err := s.Post(s.Token, apptest.CreateSalesOrder, map[string]any{"customer": fmt.Sprintf("writer %d", w)})
				if err == nil && len(res.Errors) == 0 {
					added.Add(1)
				}
			}
		})
	}
	seen := map[string]int{}
	var after *string
	pages := 0
	for {
		p := apptest.GQL[salesOrderPage](t, s, salesOrdersQuery, map[string]any{"first": 37, "after": after})
		pages++
		for _, e := range p.SalesOrders.Edges {
			seen[e.Node.ID]++
		}
		if !p.SalesOrders.PageInfo.HasNextPage {
			break
		}
		after = p.SalesOrders.PageInfo.EndCursor
	}
	stop()
	wg.Wait()
	require.Positive(t, added.Load(), "the writers added orders while paging")
	for _, id := range existing {
		require.Equal(t, 1, seen[id], "order %s seen %d times", id, seen[id])
	}
	require.GreaterOrEqual(t, pages, 500/37)
}

func TestSalesOrdersFilters(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	apptest.GQL[map[string]any](t, s, `mutation { createItem(input: {sku: "B2", name: "Стул", unit: "шт"}) { id } }`, nil)
	seedSalesOrders(t, s, 30, "Старый")
	a := createSalesOrder(t, s)
	b := apptest.GQL[struct {
		CreateSalesOrder docState `json:"createSalesOrder"`
	}](t, s, `mutation { createSalesOrder(input: {customer: "Петров", lines: [{sku: "B2", quantity: "1"}, {sku: "B2", quantity: "2"}]}) { id number status version } }`, nil).CreateSalesOrder
	mutate(t, s, "cancelSalesOrder", cancelSalesOrder, map[string]any{"id": a.ID, "v": 1, "r": "x"})
	received := apptest.GQL[struct {
		ReceiveOrder struct{ Order docState } `json:"receiveOrder"`
	}](t, s, `mutation { receiveOrder(input: {source: SHOP, externalId: "shop-1", customer: "Петров", lines: [{sku: "A1", quantity: "1"}]}) { order { id number status version } } }`, nil).ReceiveOrder.Order

	ids := func(f map[string]any, first int) []string {
		t.Helper()
		p := apptest.GQL[salesOrderPage](t, s, salesOrdersQuery, map[string]any{"f": f, "first": first})
		out := []string{}
		for _, e := range p.SalesOrders.Edges {
			out = append(out, e.Node.ID)
		}
		return out
	}
	require.Equal(t, []string{received.ID, b.ID, a.ID}, ids(nil, 3), "newest first")
	require.Equal(t, []string{a.ID}, ids(map[string]any{"statuses": []string{"cancelled"}}, 50))
	require.Equal(t, []string{received.ID, b.ID}, ids(map[string]any{"statuses": []string{"cancelled", "new", "accepted"}}, 2))
	require.Equal(t, []string{received.ID, b.ID, a.ID, "30"}, ids(map[string]any{"statuses": []string{"cancelled", "new", "accepted"}}, 4))
	require.Equal(t, []string{received.ID, b.ID}, ids(map[string]any{"customer": "Петров"}, 50))
	require.Equal(t, []string{b.ID}, ids(map[string]any{"sku": "B2"}, 50), "an order with two lines of the item once")
	require.Equal(t, []string{received.ID}, ids(map[string]any{"sku": "A1", "customer": "Петров"}, 50))
	require.Equal(t, []string{received.ID}, ids(map[string]any{"source": "SHOP"}, 50))
	require.Len(t, ids(map[string]any{"number": "ЗК-2025-00001"}, 50), 10)
	require.Len(t, ids(map[string]any{"statuses": []string{"new"}, "number": "ЗК-2025-"}, 500), 30)
	require.Empty(t, ids(map[string]any{"createdTo": "2000-01-01T00:00:00Z"}, 50))
	require.Len(t, ids(map[string]any{"createdFrom": "2000-01-01T00:00:00Z"}, 500), 33)

	before := readJournal(t, s)
	for _, tt := range []struct {
		vars  map[string]any
		field string
	}{
		{map[string]any{"f": map[string]any{"statuses": []string{"open"}}}, "filter.statuses.0"},
		{map[string]any{"first": 0}, "first"},
		{map[string]any{"first": 501}, "first"},
		{map[string]any{"after": "garbage"}, "after"},
		{map[string]any{"f": map[string]any{"createdFrom": "2026-01-02T00:00:00Z", "createdTo": "2026-01-01T00:00:00Z"}}, "filter.createdTo"},
	} {
		e := refused(t, s, salesOrdersQuery, tt.vars, "BAD_USER_INPUT")
		require.Equal(t, tt.field, e.Extensions["field"], e.Message)
	}
	require.Equal(t, before, readJournal(t, s))
	// The complexity limit weighs first: ten aliases of 500 orders with
	// their lines are refused before they run.
	q := "{"
	for i := range 10 {
		q += fmt.Sprintf(" a%d: salesOrders(first: 500) { edges { node { id number lines { sku quantity } } } }", i)
	}
	e := refused(t, s, q+" }", nil, "COMPLEXITY_LIMIT_EXCEEDED")
	require.NotEmpty(t, e.Message)
}

func TestDocumentsByNumber(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	so := createSalesOrder(t, s)
	po := apptest.GQL[struct {
		CreateProductionOrder docState `json:"createProductionOrder"`
	}](t, s, `mutation { createProductionOrder(input: {sku: "A1", quantity: "1"}) { id number status version } }`, nil).CreateProductionOrder
	pur := apptest.GQL[struct {
		CreatePurchaseOrder docState `json:"createPurchaseOrder"`
	}](t, s, `mutation { createPurchaseOrder(input: {supplier: "S", lines: [{sku: "A1", quantity: "1"}]}) { id number status version } }`, nil).CreatePurchaseOrder
	mv := apptest.GQL[struct {
		CreateWarehouseMove docState `json:"createWarehouseMove"`
	}](t, s, `mutation { createWarehouseMove(input: {kind: RECEIPT, toWarehouse: "MAIN", lines: [{sku: "A1", quantity: "1"}]}) { id number status version } }`, nil).CreateWarehouseMove
	for _, tt := range []struct {
		field string
		doc   docState
	}{{"salesOrder", so}, {"productionOrder", po}, {"purchaseOrder", pur}, {"warehouseMove", mv}} {
		byNumber := fmt.Sprintf(`query($n: String) { %s(number: $n) { id number status version } }`, tt.field)
		got := apptest.GQL[map[string]*docState](t, s, byNumber, map[string]any{"n": tt.doc.Number})
		require.Equal(t, tt.doc, *got[tt.field], tt.field)
		got = apptest.GQL[map[string]*docState](t, s, byNumber, map[string]any{"n": "ЗК-1999-000001"})
		require.Nil(t, got[tt.field], "%s: an unknown number is null", tt.field)
		for _, q := range []string{
			fmt.Sprintf(`{ %s { id } }`, tt.field),
			fmt.Sprintf(`{ %s(id: "%s", number: "%s") { id } }`, tt.field, tt.doc.ID, tt.doc.Number),
		} {
			e := refused(t, s, q, nil, "BAD_USER_INPUT")
			require.Contains(t, e.Message, "exactly one of id and number", tt.field)
		}
	}
}

func TestEventFilterEntityTakesTableOrPayloadName(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	so := createSalesOrder(t, s)
	apptest.GQL[map[string]any](t, s, `mutation { createPurchaseOrder(input: {supplier: "S", lines: [{sku: "A1", quantity: "1"}]}) { id } }`, nil)
	type page struct {
		Events struct {
			Edges []struct {
				Node struct{ Entity, EntityID string }
			}
		}
	}
	const q = `query($e: String) { events(filter: {entity: $e}) { edges { node { entity entityId } } } }`
	for _, name := range []string{"sales_orders", "sales_order", " sales_order "} {
		got := apptest.GQL[page](t, s, q, map[string]any{"e": name})
		require.Len(t, got.Events.Edges, 1, name)
		require.Equal(t, "sales_orders", got.Events.Edges[0].Node.Entity, name)
		require.Equal(t, so.ID, got.Events.Edges[0].Node.EntityID, name)
	}
	e := refused(t, s, q, map[string]any{"e": "sales"}, "BAD_USER_INPUT")
	require.Equal(t, "filter.entity", e.Extensions["field"])
	for _, known := range []string{"sales_orders", "sales_order", "prod_order", "wh_purchase_orders", "users"} {
		require.Contains(t, e.Message, known)
	}
}

// The status history the events page shows: one document's events by
// entity and entityId, on every page, and nothing of its neighbours. An
// id alone names no row (ids are per table), so it is refused rather than
// ignored (the live feed's filter goes through the same check).
func TestEventFilterEntityID(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	so := createSalesOrder(t, s)
	createSalesOrder(t, s) // a neighbour the filter must leave out
	sales := s.As(apptest.RoleToken(t, s, "clerk", "SALES"))
	apptest.GQL[map[string]any](t, sales, `mutation($id: ID!, $v: Int!) { cancelSalesOrder(id: $id, version: $v, reason: "дубль") { id } }`,
		map[string]any{"id": so.ID, "v": so.Version})
	type page struct {
		Events struct {
			Edges []struct {
				Node struct{ ID, Type, EntityID string }
			}
			PageInfo struct {
				HasNextPage bool
				EndCursor   *string
			}
		}
	}
	const q = `query($id: ID!, $after: String) { events(filter: {entity: "sales_order", entityId: $id, types: ["doc.created", "doc.status_changed"]}, first: 1, after: $after) {
		edges { node { id type entityId } } pageInfo { hasNextPage endCursor } } }`
	var types []string
	var after *string
	for {
		got := apptest.GQL[page](t, s, q, map[string]any{"id": so.ID, "after": after})
		for _, e := range got.Events.Edges {
			require.Equal(t, so.ID, e.Node.EntityID)
			types = append(types, e.Node.Type)
		}
		if !got.Events.PageInfo.HasNextPage {
			break
		}
		after = got.Events.PageInfo.EndCursor
	}
	require.Equal(t, []string{"doc.status_changed", "doc.created"}, types, "the order's own events, newest first, one per page")

	e := refused(t, s, `query($id: ID!) { events(filter: {entityId: $id}) { edges { node { id } } } }`, map[string]any{"id": so.ID}, "BAD_USER_INPUT")
	require.Equal(t, "filter.entityId", e.Extensions["field"])
	require.Contains(t, e.Message, "entity")
}

func TestReceiveOrderAgainWithChangesIsConflict(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	const q = `mutation($c: String!, $lines: [LineInput!]!) { receiveOrder(input: {source: SHOP, externalId: "shop-7826d8468b3d", customer: $c, lines: $lines}) {
		duplicate order { id number } } }`
	type result struct {
		ReceiveOrder struct {
			Duplicate bool
			Order     struct{ ID, Number string }
		} `json:"receiveOrder"`
	}
	one := []map[string]any{{"sku": "A1", "quantity": "1.5", "price": "10"}}
	first := apptest.GQL[result](t, s, q, map[string]any{"c": "Иванов", "lines": one}).ReceiveOrder
	require.False(t, first.Duplicate)
	again := apptest.GQL[result](t, s, q, map[string]any{"c": " Иванов ", "lines": []map[string]any{{"sku": "A1", "quantity": "1.500", "price": "10.00"}}}).ReceiveOrder
	require.True(t, again.Duplicate, "the same order again, written differently")
	require.Equal(t, first.Order, again.Order)
	apptest.WaitAllProcessed(t, s) // order_acceptance has moved it

	before := readJournal(t, s)
	var orders int
	for _, tt := range []struct {
		name     string
		vars     map[string]any
		field    string
		contains string
	}{
		{"customer", map[string]any{"c": "Петров", "lines": one}, "input.customer", "the customer differs"},
		{"quantity", map[string]any{"c": "Иванов", "lines": []map[string]any{{"sku": "A1", "quantity": "2", "price": "10"}}}, "input.lines.0.quantity", "the quantity of line 1 differs"},
		{"price", map[string]any{"c": "Иванов", "lines": []map[string]any{{"sku": "A1", "quantity": "1.5"}}}, "input.lines.0.price", "the price of line 1 differs"},
		{"lines", map[string]any{"c": "Иванов", "lines": append(one, map[string]any{"sku": "A1", "quantity": "1"})}, "input.lines", "the number of lines differs"},
	} {
		e := refused(t, s, q, tt.vars, "CONFLICT")
		require.Equal(t, tt.field, e.Extensions["field"], tt.name)
		require.Contains(t, e.Message, tt.contains, tt.name)
		require.Contains(t, e.Message, first.Order.Number, tt.name)
		for _, stored := range []string{"Иванов", "1.5", "10"} {
			require.NotContains(t, e.Message, stored, "%s: the stored value is not repeated", tt.name)
		}
	}
	require.Equal(t, before, readJournal(t, s))
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM sales_orders`).Scan(&orders))
	require.Equal(t, 1, orders)
}

func TestProductionPurchaseAndMoveLists(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	so := createSalesOrder(t, s)
	mk := func(q string) docState {
		t.Helper()
		res := apptest.GQL[map[string]docState](t, s, q, nil)
		for _, d := range res {
			return d
		}
		t.Fatal("no document")
		return docState{}
	}
	po1 := mk(fmt.Sprintf(`mutation { createProductionOrder(input: {sku: "A1", quantity: "1", salesOrderId: "%s"}) { id number status version } }`, so.ID))
	po2 := mk(`mutation { createProductionOrder(input: {sku: "A1", quantity: "2"}) { id number status version } }`)
	mutate(t, s, "releaseProductionOrder", releaseProductionOrder, map[string]any{"id": po2.ID, "v": 1})
	zp1 := mk(`mutation { createPurchaseOrder(input: {supplier: "ООО Лес", lines: [{sku: "A1", quantity: "1"}]}) { id number status version } }`)
	zp2 := mk(`mutation { createPurchaseOrder(input: {supplier: "ИП Гвоздь", lines: [{sku: "A1", quantity: "1"}]}) { id number status version } }`)
	mv := mk(fmt.Sprintf(`mutation { createWarehouseMove(input: {kind: RECEIPT, toWarehouse: "MAIN", purchaseOrderId: "%s", lines: [{sku: "A1", quantity: "1"}]}) { id number status version } }`, zp1.ID))
	mutate(t, s, "cancelPurchaseOrder", cancelPurchaseOrder, map[string]any{"id": zp2.ID, "v": 1, "r": "x"})

	list := func(field, filterType string, f map[string]any) []string {
		t.Helper()
		q := fmt.Sprintf(`query($f: %s) { %s(filter: $f, first: 10) { edges { cursor node { id } } pageInfo { hasNextPage endCursor } } }`, filterType, field)
		res := apptest.GQL[map[string]struct {
			Edges []struct{ Node struct{ ID string } }
		}](t, s, q, map[string]any{"f": f})
		out := []string{}
		for _, e := range res[field].Edges {
			out = append(out, e.Node.ID)
		}
		return out
	}
	require.Equal(t, []string{po2.ID, po1.ID}, list("productionOrders", "ProductionOrderFilter", nil))
	require.Equal(t, []string{po1.ID}, list("productionOrders", "ProductionOrderFilter", map[string]any{"salesOrderId": so.ID}))
	require.Equal(t, []string{po2.ID}, list("productionOrders", "ProductionOrderFilter", map[string]any{"statuses": []string{"released"}}))
	require.Equal(t, []string{po2.ID, po1.ID}, list("productionOrders", "ProductionOrderFilter", map[string]any{"sku": "A1", "number": "ПЗ-"}))
	require.Equal(t, []string{zp2.ID, zp1.ID}, list("purchaseOrders", "PurchaseOrderFilter", nil))
	require.Equal(t, []string{zp1.ID}, list("purchaseOrders", "PurchaseOrderFilter", map[string]any{"supplier": "ООО Лес"}))
	require.Equal(t, []string{zp2.ID}, list("purchaseOrders", "PurchaseOrderFilter", map[string]any{"statuses": []string{"cancelled"}}))
	require.Empty(t, list("purchaseOrders", "PurchaseOrderFilter", map[string]any{"sku": "NOPE"}))
	require.Equal(t, []string{mv.ID}, list("warehouseMoves", "WarehouseMoveFilter", map[string]any{"kinds": []string{"RECEIPT"}, "warehouse": "MAIN", "statuses": []string{"posted"}}))
	require.Empty(t, list("warehouseMoves", "WarehouseMoveFilter", map[string]any{"kinds": []string{"ISSUE_TO_PRODUCTION"}}))

	e := refused(t, s, `{ warehouseMoves(filter: {statuses: ["open"]}) { edges { cursor } } }`, nil, "BAD_USER_INPUT")
	require.Equal(t, "filter.statuses.0", e.Extensions["field"])
	// A cursor of another list is refused.
	soCursor := apptest.GQL[salesOrderPage](t, s, salesOrdersQuery, map[string]any{"first": 1}).SalesOrders.Edges[0].Cursor
	e = refused(t, s, `query($a: String) { purchaseOrders(after: $a) { edges { cursor } } }`, map[string]any{"a": soCursor}, "BAD_USER_INPUT")
	require.Equal(t, "after", e.Extensions["field"])
}
