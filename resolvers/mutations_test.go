package resolvers_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"erp/app/apptest"
)

func TestMutationErrorsAreCodedAndWriteNothing(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	tests := []struct {
		name, query string
		vars        map[string]any
		code, field string
	}{
		{"unknown sku", `mutation { createSalesOrder(input: {customer: "X", lines: [{sku: "NOPE", quantity: "1"}]}) { id } }`, nil, "BAD_USER_INPUT", "input.lines.0.sku"},
		{"empty lines", `mutation { createPurchaseOrder(input: {supplier: "X", lines: []}) { id } }`, nil, "BAD_USER_INPUT", "input.lines"},
		{"zero quantity", `mutation { createSalesOrder(input: {customer: "X", lines: [{sku: "A1", quantity: "0"}]}) { id } }`, nil, "BAD_USER_INPUT", "input.lines.0.quantity"},
		{"malformed decimal", `mutation($q: Decimal!) { createSalesOrder(input: {customer: "X", lines: [{sku: "A1", quantity: $q}]}) { id } }`, map[string]any{"q": "two"}, "BAD_USER_INPUT", ""},
		{"unknown production order", `mutation { createWarehouseMove(input: {kind: ISSUE_TO_PRODUCTION, fromWarehouse: "MAIN", productionOrderId: "999", lines: [{sku: "A1", quantity: "1"}]}) { id } }`, nil, "BAD_USER_INPUT", "input.productionOrderId"},
		{"bad crm id", `mutation { receiveOrder(input: {source: CRM, externalId: "abc", customer: "X", lines: [{sku: "A1", quantity: "1"}]}) { duplicate } }`, nil, "BAD_USER_INPUT", "input.externalId"},
		{"duplicate sku", `mutation { createItem(input: {sku: "A1", name: "again", unit: "шт"}) { id } }`, nil, "CONFLICT", "input.sku"},
		{"bad cursor", `{ events(after: "garbage") { edges { cursor } } }`, nil, "BAD_USER_INPUT", "after"},
	}
	for _, tt := range tests {
		e := apptest.GQLErr(t, s, tt.query, tt.vars)
		require.Equal(t, tt.code, e.Extensions["code"], "%s: %s", tt.name, e.Message)
		if tt.field != "" {
			require.Equal(t, tt.field, e.Extensions["field"], tt.name)
		}
	}
	type counts struct {
		Events struct {
			Edges []struct{ Cursor string } `json:"edges"`
		} `json:"events"`
	}
	require.Empty(t, apptest.GQL[counts](t, s, `{ events { edges { cursor } } }`, nil).Events.Edges, "a refused mutation must journal nothing")
	var n int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM river_job WHERE kind = 'dispatch_event') + (SELECT count(*) FROM number_series)`).Scan(&n))
	require.Zero(t, n, "a refused mutation must enqueue nothing and take no number")
}

func TestReceiveOrderConcurrentOverHTTP(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	const q = `mutation { receiveOrder(input: {source: SHOP, externalId: "shop-7826d8468b3d", customer: "Web", lines: [{sku: "A1", quantity: "1"}]}) { duplicate order { id number } } }`
	type result struct {
		ReceiveOrder struct {
			Duplicate bool
			Order     struct{ ID, Number string }
		} `json:"receiveOrder"`
	}
	var wg sync.WaitGroup
	results := make([]result, 2)
	for i := range results {
		wg.Go(func() { results[i] = apptest.GQL[result](t, s, q, nil) })
	}
	wg.Wait()
	require.Equal(t, results[0].ReceiveOrder.Order, results[1].ReceiveOrder.Order, "both deliveries see the same order")
	require.NotEqual(t, results[0].ReceiveOrder.Duplicate, results[1].ReceiveOrder.Duplicate, "exactly one is the first")
	type events struct {
		Events struct {
			Edges []struct{ Node apptest.FeedEvent } `json:"edges"`
		} `json:"events"`
	}
	got := apptest.GQL[events](t, s, `{ events(filter: {types: ["order.received"]}) { edges { node { id payload } } } }`, nil)
	require.Len(t, got.Events.Edges, 1)
}

// Concurrent createSalesOrder and receiveOrder calls, each numbered at its
// commit, get the series' numbers without a gap or a repeat; each answer
// carries its order's number, and so does the order's doc.created payload.
// With the series exhausted, the next order is CONFLICT and writes nothing.
func TestSalesOrderNumbersOverHTTP(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	const n = 40
	type order struct{ ID, Number string }
	orders := make([]order, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if i%2 == 0 {
				orders[i] = apptest.GQL[struct{ CreateSalesOrder order }](t, s,
					`mutation { createSalesOrder(input: {customer: "X", lines: [{sku: "A1", quantity: "1"}]}) { id number } }`, nil).CreateSalesOrder
				return
			}
			orders[i] = apptest.GQL[struct{ ReceiveOrder struct{ Order order } }](t, s,
				`mutation($id: String!) { receiveOrder(input: {source: SHOP, externalId: $id, customer: "X", lines: [{sku: "A1", quantity: "1"}]}) { order { id number } } }`,
				map[string]any{"id": fmt.Sprintf("shop-%d", i)}).ReceiveOrder.Order
		})
	}
	wg.Wait()
	var year int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT extract(year FROM now())::int`).Scan(&year))
	seen := map[string]bool{}
	for _, o := range orders {
		require.False(t, seen[o.Number], "%s handed out twice", o.Number)
		seen[o.Number] = true
		var no string
		require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT payload->>'no' FROM events WHERE entity = 'sales_orders' AND entity_id = $1 AND type = 'doc.created'`, o.ID).Scan(&no))
		require.Equal(t, o.Number, no, "order %s", o.ID)
	}
	for i := 1; i <= n; i++ {
		require.True(t, seen[fmt.Sprintf("ЗК-%d-%06d", year, i)], "number %d missing", i)
	}

	apptest.GQL[map[string]any](t, s, `mutation($y: Int!) { setNumberSeriesStart(prefix: "ЗК", year: $y, start: 999999) }`, map[string]any{"y": year})
	last := apptest.GQL[struct{ CreateSalesOrder order }](t, s, `mutation { createSalesOrder(input: {customer: "X", lines: [{sku: "A1", quantity: "1"}]}) { id number } }`, nil)
	require.Equal(t, fmt.Sprintf("ЗК-%d-999999", year), last.CreateSalesOrder.Number)
	// The built-ins journal the received orders' acceptance meanwhile:
	// count once they are done.
	apptest.WaitAllProcessed(t, s)
	var before int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM sales_orders) + (SELECT count(*) FROM events)`).Scan(&before))
	e := apptest.GQLErr(t, s, `mutation { createSalesOrder(input: {customer: "X", lines: [{sku: "A1", quantity: "1"}]}) { id number } }`, nil)
	require.Equal(t, "CONFLICT", e.Extensions["code"], e.Message)
	require.Contains(t, e.Message, "exhausted")
	apptest.WaitAllProcessed(t, s)
	var after int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM sales_orders) + (SELECT count(*) FROM events)`).Scan(&after))
	require.Equal(t, before, after, "the refused order wrote nothing")
}

func TestInputEdgeCases(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	type received struct {
		ReceiveOrder struct {
			Duplicate bool
			Order     struct{ ID string }
		} `json:"receiveOrder"`
	}
	const crm = `mutation($id: String!) { receiveOrder(input: {source: CRM, externalId: $id, customer: "X", lines: [{sku: "A1", quantity: "1"}]}) { duplicate order { id } } }`
	first := apptest.GQL[received](t, s, crm, map[string]any{"id": "51015"})
	again := apptest.GQL[received](t, s, crm, map[string]any{"id": "051015"})
	require.True(t, again.ReceiveOrder.Duplicate, "leading zeros name the same CRM order")
	require.Equal(t, first.ReceiveOrder.Order.ID, again.ReceiveOrder.Order.ID)

	tests := []struct {
		name, query string
		vars        map[string]any
		field       string
	}{
		{"NUL in text", `mutation($c: String!) { createSalesOrder(input: {customer: $c, lines: [{sku: "A1", quantity: "1"}]}) { id } }`, map[string]any{"c": "a\x00b"}, "input.customer"},
		{"NUL in a filter", `query($t: [String!]) { events(filter: {types: $t}) { edges { cursor } } }`, map[string]any{"t": []string{"a\x00"}}, "filter.types.0"},
		{"long event type", `query($t: [String!]) { events(filter: {types: $t}) { edges { cursor } } }`, map[string]any{"t": []string{strings.Repeat("t", 5000)}}, "filter.types.0"},
		{"unknown prefix", `mutation { setNumberSeriesStart(prefix: "XX", year: 2026, start: 5) }`, nil, "prefix"},
		{"first 0", `{ events(first: 0) { edges { cursor } } }`, nil, "first"},
		{"crm zero", crm, map[string]any{"id": "0"}, "input.externalId"},
		{"bad decimal", `mutation { createSalesOrder(input: {customer: "X", lines: [{sku: "A1", quantity: "x"}]}) { id } }`, nil, "input.lines.0.quantity"},
		{"huge quantity", `mutation($q: Decimal!) { createSalesOrder(input: {customer: "X", lines: [{sku: "A1", quantity: $q}]}) { id } }`, map[string]any{"q": "9" + strings.Repeat("0", 5000)}, "input.lines.0.quantity"},
		{"long garbage", `mutation($q: Decimal!) { createSalesOrder(input: {customer: "X", lines: [{sku: "A1", quantity: $q}]}) { id } }`, map[string]any{"q": strings.Repeat("x", 5000)}, ""},
		{"float literal past 15 digits", `mutation { createSalesOrder(input: {customer: "X", lines: [{sku: "A1", quantity: 123456789012345.678}]}) { id } }`, nil, "input.lines.0.quantity"},
		{"float literal of 16 digits", `mutation { createSalesOrder(input: {customer: "X", lines: [{sku: "A1", quantity: 1E15}]}) { id } }`, nil, "input.lines.0.quantity"},
		{"exponent", `mutation($q: Decimal!) { createSalesOrder(input: {customer: "X", lines: [{sku: "A1", quantity: $q}]}) { id } }`, map[string]any{"q": "1e3"}, "input.lines.0.quantity"},
		{"long fraction", `mutation($p: Decimal!) { createSalesOrder(input: {customer: "X", lines: [{sku: "A1", quantity: "1", price: $p}]}) { id } }`, map[string]any{"p": "1." + strings.Repeat("1", 5000)}, "input.lines.0.price"},
	}
	for _, tt := range tests {
		e := apptest.GQLErr(t, s, tt.query, tt.vars)
		require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"], "%s: %s", tt.name, e.Message)
		if tt.field != "" {
			require.Equal(t, tt.field, e.Extensions["field"], tt.name)
		}
		// An unknown event type's error lists the known ones, about 280 characters.
		require.Less(t, len(e.Message), 400, "%s: the error repeats the input in full: %.500s", tt.name, e.Message)
	}
	// A short float literal is exact, and taken.
	got := apptest.GQL[struct {
		CreateSalesOrder struct{ Lines []struct{ Quantity string } }
	}](t, s,
		`mutation { createSalesOrder(input: {customer: "X", lines: [{sku: "A1", quantity: 2.5}]}) { lines { quantity } } }`, nil)
	require.Equal(t, "2.500", got.CreateSalesOrder.Lines[0].Quantity)
}
