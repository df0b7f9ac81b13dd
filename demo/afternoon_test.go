package demo_test

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"erp/app/apptest"
	"erp/demo"
)

// TestDemoLeavesEveryEventProcessedAndTheLedgerEqualToTheBalances: the
// extended demo, run twice on one database, leaves every journal event
// processed and, for every item and warehouse, the stock ledger summing to
// the balance on hand (through the API, and in the tables); each run's
// afternoon leaves its documents at their final statuses, with the
// doc.status_changed events that took them there.
func TestDemoLeavesEveryEventProcessedAndTheLedgerEqualToTheBalances(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	// On hand after each run on a fresh database: the day's delivery of
	// oak and lacquer less the two issues (2 chairs × 3.200 m, a table's
	// 6.500 m and 0.800 kg), the table made and not shipped, the chairs
	// made and shipped, the afternoon's delivery taken back.
	wantOnHand := func(runs int64) map[string]string {
		n := decimal.NewFromInt(runs)
		q := func(s string) string { return decimal.RequireFromString(s).Mul(n).StringFixed(3) }
		return map[string]string{
			"МАТ-ДУБ/СКЛ-1": q("237.100"), "МАТ-ЛАК/СКЛ-1": q("29.200"),
			"СТЛ-01/СКЛ-1": q("1.000"), "СТУ-02/СКЛ-1": "0.000",
			"МАТ-ЛДСП/СКЛ-2": "0.000", "МАТ-КРОМ/СКЛ-2": "0.000", "МАТ-ФУРН/СКЛ-2": "0.000",
		}
	}
	for run := int64(1); run <= 2; run++ {
		sum, err := demo.Replay(t.Context(), s.URL+"/graphql", s.Token, &bytes.Buffer{})
		require.NoError(t, err, "run %d", run)

		for _, ev := range demoJournal(t, s) {
			require.NotNil(t, ev.ProcessedAt, "run %d: event %s (%s, %s) unprocessed", run, ev.ID, ev.Type, ev.Object)
		}
		var unprocessed int
		require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM events WHERE processed_at IS NULL`).Scan(&unprocessed))
		require.Zero(t, unprocessed, "run %d", run)

		balances := stockBalances(t, s)
		require.Equal(t, wantOnHand(run), balances, "run %d", run)
		require.Equal(t, balances, ledgerSums(t, s), "run %d: the stock ledger sums to the balances", run)
		requireTablesAgree(t, s)

		requireAfternoonDocuments(t, s, sum.Afternoon)
	}
}

// stockBalances reads every stockBalances row: "SKU/warehouse" → on hand.
func stockBalances(t *testing.T, s *apptest.Server) map[string]string {
	t.Helper()
	type balance struct {
		SKU       string `json:"sku"`
		Warehouse string `json:"warehouse"`
		OnHand    string `json:"onHand"`
	}
	out := map[string]string{}
	vars := map[string]any{"first": 500}
	for {
		res := apptest.GQL[struct {
			StockBalances page[balance] `json:"stockBalances"`
		}](t, s, `query($first: Int, $after: String) { stockBalances(first: $first, after: $after) {
			edges { node { sku warehouse onHand } } pageInfo { hasNextPage endCursor } } }`, vars).StockBalances
		for _, e := range res.Edges {
			out[e.Node.SKU+"/"+e.Node.Warehouse] = decimal.RequireFromString(e.Node.OnHand).StringFixed(3)
		}
		if !res.PageInfo.HasNextPage {
			return out
		}
		vars["after"] = res.PageInfo.EndCursor
	}
}

// ledgerSums reads the stock ledger of every item through stockLedger and
// sums its rows per warehouse: "SKU/warehouse" → quantity. Each row's
// balanceAfter is the running sum of its item and warehouse, in posting
// order.
func ledgerSums(t *testing.T, s *apptest.Server) map[string]string {
	t.Helper()
	type entry struct {
		Warehouse    string `json:"warehouse"`
		Quantity     string `json:"quantity"`
		BalanceAfter string `json:"balanceAfter"`
	}
	items := apptest.GQL[struct{ Items []struct{ SKU string } }](t, s, `{ items { sku } }`, nil).Items
	require.NotEmpty(t, items)
	sums := map[string]decimal.Decimal{}
	for _, it := range items {
		vars := map[string]any{"sku": it.SKU, "first": 500}
		for {
			res := apptest.GQL[struct {
				StockLedger page[entry] `json:"stockLedger"`
			}](t, s, `query($sku: String!, $first: Int, $after: String) { stockLedger(sku: $sku, first: $first, after: $after) {
				edges { node { warehouse quantity balanceAfter } } pageInfo { hasNextPage endCursor } } }`, vars).StockLedger
			for _, e := range res.Edges {
				k := it.SKU + "/" + e.Node.Warehouse
				sums[k] = sums[k].Add(decimal.RequireFromString(e.Node.Quantity))
				require.True(t, sums[k].Equal(decimal.RequireFromString(e.Node.BalanceAfter)),
					"%s: balanceAfter %s, the rows so far sum to %s", k, e.Node.BalanceAfter, sums[k])
			}
			if !res.PageInfo.HasNextPage {
				break
			}
			vars["after"] = res.PageInfo.EndCursor
		}
	}
	out := make(map[string]string, len(sums))
	for k, v := range sums {
		out[k] = v.StringFixed(3)
	}
	return out
}

// page is a Relay connection as the tests decode it.
type page[T any] struct {
	Edges []struct {
		Node T `json:"node"`
	} `json:"edges"`
	PageInfo struct {
		HasNextPage bool   `json:"hasNextPage"`
		EndCursor   string `json:"endCursor"`
	} `json:"pageInfo"`
}

// requireTablesAgree cross-checks the tables behind the API: every
// (item, warehouse) of stock_ledger has a stock_balances row and every
// balance row's on_hand is the sum of its ledger rows.
func requireTablesAgree(t *testing.T, s *apptest.Server) {
	t.Helper()
	rows, err := s.Pool.Query(t.Context(), `
		SELECT coalesce(b.item_id, l.item_id), coalesce(b.warehouse_id, l.warehouse_id),
		       b.on_hand::text, coalesce(l.total, 0)::text
		FROM stock_balances b
		FULL JOIN (SELECT item_id, warehouse_id, sum(quantity) AS total FROM stock_ledger GROUP BY 1, 2) l
		  USING (item_id, warehouse_id)`)
	require.NoError(t, err)
	defer rows.Close()
	n := 0
	for rows.Next() {
		var item, wh int64
		var onHand *string
		var total string
		require.NoError(t, rows.Scan(&item, &wh, &onHand, &total))
		require.NotNil(t, onHand, "item %d at warehouse %d has ledger rows and no balance", item, wh)
		require.True(t, decimal.RequireFromString(*onHand).Equal(decimal.RequireFromString(total)),
			"item %d at warehouse %d: on_hand %s, ledger sum %s", item, wh, *onHand, total)
		n++
	}
	require.NoError(t, rows.Err())
	require.Positive(t, n)
}

// requireAfternoonDocuments checks, through the API, the final statuses of
// the documents an afternoon acted on and that the journal holds the
// doc.status_changed events of each, in order: the production orders
// completed, their issues posted and their finished goods received, the
// produced sales orders in production, the first of them shipped by its
// shipment, the cancelled one cancelled, the delivery reversed by its
// reversal move.
func requireAfternoonDocuments(t *testing.T, s *apptest.Server, a demo.AfternoonSummary) {
	t.Helper()
	type move struct {
		ID, Number, Kind, Status string
		ToWarehouse              *string `json:"toWarehouse"`
		ProductionOrderID        *string `json:"productionOrderId"`
		SalesOrderID             *string `json:"salesOrderId"`
		ReversalOfID             *string `json:"reversalOfId"`
	}
	type document struct{ ID, Number, Status string }
	moveByNumber := func(no string) move {
		t.Helper()
		mv := apptest.GQL[struct{ WarehouseMove *move }](t, s, `query($no: String!) { warehouseMove(number: $no) {
			id number kind status toWarehouse productionOrderId salesOrderId reversalOfId } }`, map[string]any{"no": no}).WarehouseMove
		require.NotNil(t, mv, "warehouse move %s", no)
		return *mv
	}
	docByNumber := func(field, no string) document {
		t.Helper()
		d := apptest.GQL[map[string]*document](t, s, fmt.Sprintf(`query($no: String!) { %s(number: $no) { id number status } }`, field),
			map[string]any{"no": no})[field]
		require.NotNil(t, d, "%s %s", field, no)
		return *d
	}
	// transitions are an entity's doc.status_changed, oldest first, as "from→to".
	transitions := func(entity, id string) []string {
		t.Helper()
		res := apptest.GQL[struct {
			Events page[demo.Event] `json:"events"`
		}](t, s, `query($entity: String!, $id: ID!) { events(filter: {types: ["doc.status_changed"], entity: $entity, entityId: $id}, first: 50) {
			edges { node { id type entity entityId object payload createdAt processedAt } } pageInfo { hasNextPage endCursor } } }`,
			map[string]any{"entity": entity, "id": id}).Events
		var out []string
		for i := len(res.Edges) - 1; i >= 0; i-- {
			p := decodePayload(t, res.Edges[i].Node.Payload)
			out = append(out, fmt.Sprintf("%s→%s", p["from"], p["to"]))
		}
		return out
	}

	require.Len(t, a.Completed, 2)
	// The completions' receipts of finished goods, by production order.
	finished := map[string]move{}
	res := apptest.GQL[struct {
		WarehouseMoves page[move] `json:"warehouseMoves"`
	}](t, s, `{ warehouseMoves(filter: {kinds: [RECEIPT]}, first: 500) {
		edges { node { id number kind status toWarehouse productionOrderId salesOrderId reversalOfId } } pageInfo { hasNextPage endCursor } } }`, nil).WarehouseMoves
	require.False(t, res.PageInfo.HasNextPage)
	for _, e := range res.Edges {
		if e.Node.ProductionOrderID != nil && e.Node.ReversalOfID == nil {
			_, dup := finished[*e.Node.ProductionOrderID]
			require.False(t, dup, "two receipts of production order %s", *e.Node.ProductionOrderID)
			finished[*e.Node.ProductionOrderID] = e.Node
		}
	}
	for i, no := range a.Completed {
		pz := docByNumber("productionOrder", no)
		require.Equal(t, "completed", pz.Status, no)
		require.Equal(t, []string{"planned→released", "released→completed"}, transitions("plan_prod_orders", pz.ID), no)
		pr, ok := finished[pz.ID]
		require.True(t, ok, "no receipt of the finished goods of %s", no)
		require.Equal(t, "posted", pr.Status, pr.Number)
		require.Equal(t, "СКЛ-1", *pr.ToWarehouse, pr.Number)

		vc := moveByNumber(a.Issued[i])
		require.Equal(t, "ISSUE_TO_PRODUCTION", vc.Kind)
		require.Equal(t, "posted", vc.Status, vc.Number)
		require.Equal(t, pz.ID, *vc.ProductionOrderID, "%s issues for %s", vc.Number, no)
		require.Equal(t, []string{"draft→posted"}, transitions("wh_moves", vc.ID), vc.Number)
	}

	shipped := docByNumber("salesOrder", a.Shipped)
	require.Equal(t, a.Produced[0], a.Shipped)
	require.Equal(t, "shipped", shipped.Status)
	require.Equal(t, []string{"new→accepted", "accepted→in_production", "in_production→shipped"}, transitions("sales_orders", shipped.ID))
	ot := moveByNumber(a.Shipment)
	require.Equal(t, "SHIPMENT", ot.Kind)
	require.Equal(t, "posted", ot.Status)
	require.Equal(t, shipped.ID, *ot.SalesOrderID)
	made := docByNumber("salesOrder", a.Produced[1])
	require.Equal(t, "in_production", made.Status, "made, not shipped yet")

	cancelled := docByNumber("salesOrder", a.Cancelled)
	require.Equal(t, "cancelled", cancelled.Status)
	require.Equal(t, []string{"new→accepted", "accepted→cancelled"}, transitions("sales_orders", cancelled.ID))

	receipt := moveByNumber(a.Receipt)
	require.Equal(t, "RECEIPT", receipt.Kind)
	require.Equal(t, "reversed", receipt.Status)
	require.Equal(t, []string{"posted→reversed"}, transitions("wh_moves", receipt.ID))
	reversal := moveByNumber(a.Reversal)
	require.Equal(t, "RECEIPT", reversal.Kind)
	require.Equal(t, "posted", reversal.Status)
	require.Equal(t, receipt.ID, *reversal.ReversalOfID, "%s reverses %s", a.Reversal, a.Receipt)
	require.Empty(t, transitions("wh_moves", reversal.ID), "a reversal is written posted")
}

// The shipment example of docs/documents.md works on what the demo leaves on a fresh
// database: the table of sales order 22, made in the afternoon, is in
// СКЛ-1 and ships it.
func TestShipmentExampleAfterTheDemo(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	_, err := demo.Replay(t.Context(), s.URL+"/graphql", s.Token, io.Discard)
	require.NoError(t, err)
	got := apptest.GQL[struct {
		CreateWarehouseMove struct{ Number, Status string }
	}](t, s, `mutation {
  createWarehouseMove(input: {kind: SHIPMENT, fromWarehouse: "СКЛ-1", salesOrderId: "22",
    lines: [{sku: "СТЛ-01", quantity: "1"}]}) { number status }
}`, nil)
	require.Equal(t, "posted", got.CreateWarehouseMove.Status)
	require.Regexp(t, `^ОТ-\d{4}-000002$`, got.CreateWarehouseMove.Number)
	so := apptest.GQL[struct {
		SalesOrder struct{ Number, Status string }
	}](t, s, `{ salesOrder(id: "22") { number status } }`, nil)
	require.Regexp(t, `^ЗК-\d{4}-000422$`, so.SalesOrder.Number)
	require.Equal(t, "shipped", so.SalesOrder.Status)
}
