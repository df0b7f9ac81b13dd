package resolvers_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"erp/app/apptest"
	"erp/db"
	"erp/db/pgtest"
)

const createMove = `mutation($in: WarehouseMoveInput!) {
	createWarehouseMove(input: $in) { id number kind status version reversalOfId lines { lineNo sku quantity } }
}`

const postMove = `mutation($id: ID!, $v: Int!) { postWarehouseMove(id: $id, version: $v) { id number status version } }`

const reverseMove = `mutation($id: ID!, $v: Int!, $r: String!) {
	reverseWarehouseMove(id: $id, version: $v, reason: $r) { id number kind status version reversalOfId fromWarehouse toWarehouse lines { lineNo sku quantity } }
}`

type moveState struct {
	ID, Number, Kind, Status string
	Version                  int
	ReversalOfID             *string
	FromWarehouse            *string
	ToWarehouse              *string
	Lines                    []struct {
		LineNo   int
		SKU      string
		Quantity string
	}
}

// line is one LineInput.
func line(sku, qty string) map[string]any { return map[string]any{"sku": sku, "quantity": qty} }

// receipt is the input of a receipt of lines into MAIN.
func receipt(lines ...map[string]any) map[string]any {
	return map[string]any{"kind": "RECEIPT", "toWarehouse": "MAIN", "lines": lines}
}

// issue is the input of an issue to production of lines from MAIN.
func issue(lines ...map[string]any) map[string]any {
	return map[string]any{"kind": "ISSUE_TO_PRODUCTION", "fromWarehouse": "MAIN", "lines": lines}
}

func mustMove(t *testing.T, s *apptest.Server, in map[string]any) moveState {
	t.Helper()
	return apptest.GQL[struct {
		CreateWarehouseMove moveState `json:"createWarehouseMove"`
	}](t, s, createMove, map[string]any{"in": in}).CreateWarehouseMove
}

// seedStock makes items A1 and B1 and warehouse MAIN.
func seedStock(t *testing.T, s *apptest.Server) {
	t.Helper()
	apptest.SeedItem(t, s)
	apptest.GQL[map[string]any](t, s, `mutation { createItem(input: {sku: "B1", name: "Стул", unit: "шт"}) { id } }`, nil)
}

// onHand reads stockBalances for sku at MAIN ("0" when it has no row).
func onHand(t *testing.T, s *apptest.Server, sku string) decimal.Decimal {
	t.Helper()
	res := apptest.GQL[struct {
		StockBalances struct {
			Edges []struct{ Node struct{ OnHand string } }
		}
	}](t, s, `query($sku: String!) { stockBalances(filter: {sku: $sku, warehouse: "MAIN"}) { edges { node { onHand } } } }`,
		map[string]any{"sku": sku})
	if len(res.StockBalances.Edges) == 0 {
		return decimal.Zero
	}
	return decimal.RequireFromString(res.StockBalances.Edges[0].Node.OnHand)
}

type ledgerRow struct {
	Move         struct{ ID, Number string }
	LineNo       int
	Warehouse    string
	Quantity     string
	BalanceAfter string
}

// ledger reads the whole stock ledger of sku, page by page (10 a page, so
// the cursor is used).
func ledger(t *testing.T, s *apptest.Server, sku string) []ledgerRow {
	t.Helper()
	var out []ledgerRow
	var after *string
	for {
		res := apptest.GQL[struct {
			StockLedger struct {
				Edges    []struct{ Node ledgerRow }
				PageInfo struct {
					HasNextPage bool
					EndCursor   *string
				}
			}
		}](t, s, `query($sku: String!, $after: String) { stockLedger(sku: $sku, first: 10, after: $after) {
			edges { node { move { id number } lineNo warehouse quantity balanceAfter } } pageInfo { hasNextPage endCursor } } }`,
			map[string]any{"sku": sku, "after": after})
		for _, e := range res.StockLedger.Edges {
			out = append(out, e.Node)
		}
		if !res.StockLedger.PageInfo.HasNextPage {
			return out
		}
		after = res.StockLedger.PageInfo.EndCursor
	}
}

// requireLedgerMatches checks that the ledger of sku sums to its balance
// and that each row's balanceAfter is the running sum.
func requireLedgerMatches(t *testing.T, s *apptest.Server, sku string) []ledgerRow {
	t.Helper()
	rows := ledger(t, s, sku)
	sum := decimal.Zero
	for _, r := range rows {
		sum = sum.Add(decimal.RequireFromString(r.Quantity))
		require.True(t, sum.Equal(decimal.RequireFromString(r.BalanceAfter)), "%s line %d: balance after %s, running sum %s", r.Move.Number, r.LineNo, r.BalanceAfter, sum)
		require.False(t, sum.IsNegative())
	}
	require.True(t, sum.Equal(onHand(t, s, sku)), "ledger of %s sums to %s, on hand %s", sku, sum, onHand(t, s, sku))
	return rows
}

// writes counts what a refused request must not write: moves, their
// lines, ledger rows, balances' total, events, dispatch jobs, numbers.
type writes struct{ moves, lines, ledger, events, jobs, numbers int64 }

func readWrites(t *testing.T, s *apptest.Server) writes {
	t.Helper()
	// Dispatch in flight deletes the jobs of events a batch takes on (and
	// built-ins journal), so the counts are read once all is processed.
	apptest.WaitAllProcessed(t, s)
	var w writes
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT
		(SELECT count(*) FROM wh_moves), (SELECT count(*) FROM wh_move_lines), (SELECT count(*) FROM stock_ledger),
		(SELECT count(*) FROM events), (SELECT count(*) FROM river_job WHERE kind = 'dispatch_event'),
		(SELECT coalesce(sum(last_value), 0) FROM number_series)`).Scan(&w.moves, &w.lines, &w.ledger, &w.events, &w.jobs, &w.numbers))
	return w
}

func TestConcurrentIssuesNeverTakeStockBelowZero(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	seedStock(t, s)
	mustMove(t, s, receipt(line("A1", "10")))

	const clients = 16
	type result struct {
		id, qty string
		err     *apptest.Error
	}
	results := make([]result, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			qty := fmt.Sprint(i%2 + 1) // 1 or 2: 24 asked for, 10 on hand
			_, res, err := s.Post(s.Token, `mutation($in: WarehouseMoveInput!) { createWarehouseMove(input: $in) { id } }`,
				map[string]any{"in": issue(line("A1", qty))})
			results[i].qty = qty
			switch {
			case err != nil:
				results[i].err = &apptest.Error{Message: err.Error()}
			case len(res.Errors) > 0:
				results[i].err = &res.Errors[0]
			default:
				var d struct{ CreateWarehouseMove struct{ ID string } }
				if jerr := json.Unmarshal(res.Data, &d); jerr != nil {
					results[i].err = &apptest.Error{Message: jerr.Error()}
				}
				results[i].id = d.CreateWarehouseMove.ID
			}
		})
	}
	wg.Wait()

	issued := decimal.Zero
	okMoves := map[string]bool{}
	for _, r := range results {
		if r.err != nil {
			require.Equal(t, "BAD_USER_INPUT", r.err.Extensions["code"], r.err.Message)
			require.Equal(t, "input.lines.0.quantity", r.err.Extensions["field"])
			require.Contains(t, r.err.Message, "on hand at warehouse MAIN")
			continue
		}
		okMoves[r.id] = true
		issued = issued.Add(decimal.RequireFromString(r.qty))
	}
	require.NotEmpty(t, okMoves)
	require.Less(t, len(okMoves), clients, "24 units asked of 10: some issues must fail")
	left := decimal.NewFromInt(10).Sub(issued)
	require.False(t, left.IsNegative(), "issued %s of 10", issued)
	require.True(t, left.Equal(onHand(t, s, "A1")), "on hand %s, want %s", onHand(t, s, "A1"), left)

	rows := requireLedgerMatches(t, s, "A1")
	inLedger := map[string]bool{}
	for _, r := range rows[1:] { // the first row is the receipt
		require.True(t, okMoves[r.Move.ID], "move %s in the ledger but refused", r.Move.Number)
		inLedger[r.Move.ID] = true
	}
	require.Equal(t, okMoves, inLedger, "exactly the successful issues are in the ledger")
	var moves int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM wh_moves WHERE kind = 'issue_to_production'`).Scan(&moves))
	require.Equal(t, len(okMoves), moves, "a refused issue leaves no move")
}

func TestOppositeLineOrdersDoNotDeadlock(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	seedStock(t, s)
	mustMove(t, s, receipt(line("A1", "100"), line("B1", "100")))
	const rounds = 50
	drafts := make([]moveState, rounds)
	for i := range rounds {
		if i%2 == 1 {
			in := issue(line("B1", "1"), line("A1", "1"))
			in["draft"] = true
			drafts[i] = mustMove(t, s, in)
			require.Equal(t, "draft", drafts[i].Status)
		}
	}
	require.True(t, onHand(t, s, "A1").Equal(decimal.NewFromInt(100)), "a draft moves no stock")

	// Even rounds receive A1 then B1 (number series ПР, then balances);
	// odd ones post an issue of B1 then A1 (no series: balances only).
	errs := make([]error, rounds)
	var wg sync.WaitGroup
	for i := range rounds {
		wg.Go(func() {
			var res apptest.Response
			var err error
			if i%2 == 0 {
				_, res, err = s.Post(s.Token, createMove, map[string]any{"in": receipt(line("A1", "1"), line("B1", "1"))})
			} else {
				_, res, err = s.Post(s.Token, postMove, map[string]any{"id": drafts[i].ID, "v": drafts[i].Version})
			}
			if err == nil && len(res.Errors) > 0 {
				err = fmt.Errorf("%s: %v", res.Errors[0].Message, res.Errors[0].Extensions)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "round %d", i)
	}
	for _, sku := range []string{"A1", "B1"} {
		require.True(t, onHand(t, s, sku).Equal(decimal.NewFromInt(100)), "%s: +25 -25", sku)
		require.Len(t, requireLedgerMatches(t, s, sku), 1+rounds)
	}
}

func TestReverseRestoresBalances(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	seedStock(t, s)
	mustMove(t, s, receipt(line("A1", "5"), line("B1", "7")))
	mv := mustMove(t, s, issue(line("A1", "2"), line("B1", "3.5"), line("A1", "1")))
	require.Equal(t, "posted", mv.Status)
	require.True(t, onHand(t, s, "A1").Equal(decimal.NewFromInt(2)))
	require.True(t, onHand(t, s, "B1").Equal(decimal.RequireFromString("3.5")))

	rev := apptest.GQL[struct {
		ReverseWarehouseMove moveState `json:"reverseWarehouseMove"`
	}](t, s, reverseMove, map[string]any{"id": mv.ID, "v": mv.Version, "r": "wrong order"}).ReverseWarehouseMove
	require.Equal(t, "posted", rev.Status)
	require.Equal(t, "ISSUE_TO_PRODUCTION", rev.Kind)
	require.NotEqual(t, mv.Number, rev.Number)
	require.Equal(t, mv.Number[:len("ВЦ-2026-")], rev.Number[:len("ВЦ-2026-")], "same series")
	require.Equal(t, mv.ID, *rev.ReversalOfID)
	require.Equal(t, "MAIN", *rev.FromWarehouse)
	require.Len(t, rev.Lines, 3)
	require.True(t, onHand(t, s, "A1").Equal(decimal.NewFromInt(5)), "reversal restores A1")
	require.True(t, onHand(t, s, "B1").Equal(decimal.NewFromInt(7)), "reversal restores B1")
	rows := requireLedgerMatches(t, s, "A1")
	require.Len(t, rows, 5)
	require.Equal(t, "2.000", rows[3].Quantity, "the reversal's rows negate the issue's")
	require.Equal(t, rev.ID, rows[3].Move.ID)
	requireLedgerMatches(t, s, "B1")

	orig := apptest.GQL[struct{ WarehouseMove moveState }](t, s, `query($id: ID!) { warehouseMove(id: $id) { id status version } }`,
		map[string]any{"id": mv.ID}).WarehouseMove
	require.Equal(t, "reversed", orig.Status)
	require.Equal(t, 2, orig.Version)
	ev := statusEvents(t, s, "wh_moves", mv.ID)
	require.Len(t, ev, 1)
	require.Equal(t, "reversed", ev[0].Payload["to"])
	require.Equal(t, "wrong order", ev[0].Payload["reason"])

	before := readWrites(t, s)
	for name, vars := range map[string]map[string]any{
		"reverse twice":      {"id": mv.ID, "v": orig.Version, "r": "again"},
		"reverse a reversal": {"id": rev.ID, "v": rev.Version, "r": "undo"},
		"stale version":      {"id": mv.ID, "v": 1, "r": "again"},
	} {
		e := apptest.GQLErr(t, s, reverseMove, vars)
		require.Equal(t, "CONFLICT", e.Extensions["code"], "%s: %s", name, e.Message)
		require.NotEmpty(t, e.Extensions["currentStatus"], name)
	}
	require.Equal(t, before, readWrites(t, s), "a refused reversal writes nothing")

	// Taking back a receipt whose goods left already fails on stock.
	rc := mustMove(t, s, receipt(line("B1", "4")))
	mustMove(t, s, issue(line("B1", "9")))
	before = readWrites(t, s)
	e := apptest.GQLErr(t, s, reverseMove, map[string]any{"id": rc.ID, "v": rc.Version, "r": "supplier took it back"})
	require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"], e.Message)
	require.Equal(t, "lines.0.quantity", e.Extensions["field"])
	require.Contains(t, e.Message, "only 2.000 шт of B1 on hand")
	require.Equal(t, before, readWrites(t, s))
}

func TestDraftPostedTwiceConcurrently(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	seedStock(t, s)
	in := receipt(line("A1", "3"))
	in["draft"] = true
	d := mustMove(t, s, in)
	require.Equal(t, "draft", d.Status)
	require.Empty(t, ledger(t, s, "A1"))

	const clients = 4
	codes := make([]string, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			_, res, err := s.Post(s.Token, postMove, map[string]any{"id": d.ID, "v": d.Version})
			switch {
			case err != nil:
				codes[i] = err.Error()
			case len(res.Errors) > 0:
				codes[i] = fmt.Sprint(res.Errors[0].Extensions["code"])
			default:
				codes[i] = "ok"
			}
		})
	}
	wg.Wait()
	var won, conflicts int
	for _, c := range codes {
		switch c {
		case "ok":
			won++
		case "CONFLICT":
			conflicts++
		}
	}
	require.Equal(t, 1, won, "codes %v", codes)
	require.Equal(t, clients-1, conflicts, "codes %v", codes)
	require.True(t, onHand(t, s, "A1").Equal(decimal.NewFromInt(3)))
	require.Len(t, requireLedgerMatches(t, s, "A1"), 1)
	ev := statusEvents(t, s, "wh_moves", d.ID)
	require.Len(t, ev, 1)
	require.Equal(t, "draft", ev[0].Payload["from"])
	require.Equal(t, "posted", ev[0].Payload["to"])
}

func TestShipmentsAndRefusals(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	seedStock(t, s)
	so := createSalesOrder(t, s) // 1 A1
	two := apptest.GQL[struct{ CreateSalesOrder docState }](t, s,
		`mutation { createSalesOrder(input: {customer: "Петров", lines: [{sku: "A1", quantity: "2"}, {sku: "B1", quantity: "1"}]}) { id number status version } }`,
		nil).CreateSalesOrder
	mustMove(t, s, receipt(line("A1", "1.5")))
	ship := func(order string, lines ...map[string]any) map[string]any {
		return map[string]any{"kind": "SHIPMENT", "fromWarehouse": "MAIN", "salesOrderId": order, "lines": lines}
	}

	before := readWrites(t, s)
	refusals := []struct {
		name, field, contains string
		in                    map[string]any
	}{
		{"more than ordered", "input.lines.0.quantity", "1.000 шт of A1 open", ship(so.ID, line("A1", "1.5"))},
		{"not ordered", "input.lines.0.sku", "orders no B1", ship(so.ID, line("B1", "1"))},
		{"more than on hand", "input.lines.0.quantity", "only 1.500 шт of A1 on hand", ship(two.ID, line("A1", "2"))},
		{"negative", "input.lines.0.quantity", "greater than 0", ship(two.ID, line("A1", "-1"))},
		{"four decimals", "input.lines.0.quantity", "at most 3 decimal places", ship(two.ID, line("A1", "0.0001"))},
		{"no sales order", "input.salesOrderId", "needs the sales order", map[string]any{"kind": "SHIPMENT", "fromWarehouse": "MAIN", "lines": []any{line("A1", "1")}}},
		{"unknown sales order", "input.salesOrderId", "no sales order", ship("999999", line("A1", "1"))},
		{"issue below zero", "input.lines.1.quantity", "only 0.000 шт of B1 on hand", issue(line("A1", "1"), line("B1", "1"))},
		{"issue negative", "input.lines.0.quantity", "greater than 0", issue(line("A1", "-1"))},
		{"receipt four decimals", "input.lines.0.quantity", "at most 3 decimal places", receipt(line("A1", "1.0005"))},
	}
	for _, tt := range refusals {
		e := apptest.GQLErr(t, s, createMove, map[string]any{"in": tt.in})
		require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"], "%s: %s", tt.name, e.Message)
		require.Equal(t, tt.field, e.Extensions["field"], "%s: %s", tt.name, e.Message)
		require.Contains(t, e.Message, tt.contains, tt.name)
	}
	require.Equal(t, before, readWrites(t, s), "a refused move writes nothing")
	require.True(t, onHand(t, s, "A1").Equal(decimal.RequireFromString("1.5")))

	// A shipment that covers the order ships it, in the same transaction.
	sh := mustMove(t, s, ship(so.ID, line("A1", "1")))
	require.Equal(t, "SHIPMENT", sh.Kind)
	require.Regexp(t, `^ОТ-\d{4}-000001$`, sh.Number)
	got := apptest.GQL[struct{ SalesOrder docState }](t, s, `query($id: ID!) { salesOrder(id: $id) { id number status version } }`,
		map[string]any{"id": so.ID}).SalesOrder
	require.Equal(t, "shipped", got.Status)
	ev := statusEvents(t, s, "sales_orders", so.ID)
	require.Len(t, ev, 1)
	require.Equal(t, "shipped", ev[0].Payload["to"])
	e := apptest.GQLErr(t, s, createMove, map[string]any{"in": ship(so.ID, line("A1", "0.5"))})
	require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"])
	require.Contains(t, e.Message, "is shipped")

	// Part of an order leaves it as it is.
	mustMove(t, s, ship(two.ID, line("A1", "0.5")))
	got = apptest.GQL[struct{ SalesOrder docState }](t, s, `query($id: ID!) { salesOrder(id: $id) { id number status version } }`,
		map[string]any{"id": two.ID}).SalesOrder
	require.Equal(t, "new", got.Status)
	require.True(t, onHand(t, s, "A1").IsZero())
	requireLedgerMatches(t, s, "A1")
}

func TestReceiptsMovePurchaseOrder(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	seedStock(t, s)
	po := apptest.GQL[struct{ CreatePurchaseOrder docState }](t, s,
		`mutation { createPurchaseOrder(input: {supplier: "ООО Лес", lines: [{sku: "A1", quantity: "10"}, {sku: "B1", quantity: "2"}]}) { id number status version } }`,
		nil).CreatePurchaseOrder
	status := func() string {
		return apptest.GQL[struct{ PurchaseOrder docState }](t, s, `query($id: ID!) { purchaseOrder(id: $id) { id number status version } }`,
			map[string]any{"id": po.ID}).PurchaseOrder.Status
	}
	in := receipt(line("A1", "10"))
	in["purchaseOrderId"] = po.ID
	mustMove(t, s, in)
	require.Equal(t, "partially_received", status())
	in = receipt(line("B1", "2"))
	in["purchaseOrderId"] = po.ID
	in["draft"] = true
	d := mustMove(t, s, in)
	require.Equal(t, "partially_received", status(), "a draft receives nothing")
	apptest.GQL[map[string]any](t, s, postMove, map[string]any{"id": d.ID, "v": d.Version})
	require.Equal(t, "received", status())
	ev := statusEvents(t, s, "wh_purchase_orders", po.ID)
	require.Len(t, ev, 2)
}

func TestCompleteProductionOrderPostsReceipt(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	seedStock(t, s)
	po := apptest.GQL[struct{ CreateProductionOrder docState }](t, s,
		`mutation { createProductionOrder(input: {sku: "A1", quantity: "4"}) { id number status version } }`, nil).CreateProductionOrder
	const complete = `mutation($id: ID!, $v: Int!, $wh: String!, $q: Decimal) {
		completeProductionOrder(id: $id, version: $v, toWarehouse: $wh, quantity: $q) { id status version } }`

	before := readWrites(t, s)
	e := apptest.GQLErr(t, s, complete, map[string]any{"id": po.ID, "v": po.Version, "wh": "MAIN"})
	require.Equal(t, "CONFLICT", e.Extensions["code"], "a planned order is not completed: %s", e.Message)
	require.Equal(t, "planned", e.Extensions["currentStatus"])
	require.Equal(t, before, readWrites(t, s), "a refused completion writes nothing")
	rel := apptest.GQL[struct{ ReleaseProductionOrder docState }](t, s,
		`mutation($id: ID!, $v: Int!) { releaseProductionOrder(id: $id, version: $v) { id number status version } }`,
		map[string]any{"id": po.ID, "v": po.Version}).ReleaseProductionOrder
	before = readWrites(t, s)
	e = apptest.GQLErr(t, s, complete, map[string]any{"id": po.ID, "v": rel.Version, "wh": "NOPE"})
	require.Equal(t, "toWarehouse", e.Extensions["field"], e.Message)
	e = apptest.GQLErr(t, s, complete, map[string]any{"id": po.ID, "v": rel.Version, "wh": "MAIN", "q": "0.0001"})
	require.Equal(t, "quantity", e.Extensions["field"], e.Message)
	require.Equal(t, before, readWrites(t, s))

	done := apptest.GQL[struct{ CompleteProductionOrder docState }](t, s, complete,
		map[string]any{"id": po.ID, "v": rel.Version, "wh": "MAIN", "q": "3.5"}).CompleteProductionOrder
	require.Equal(t, "completed", done.Status)
	require.Equal(t, rel.Version+1, done.Version)
	require.True(t, onHand(t, s, "A1").Equal(decimal.RequireFromString("3.5")))
	rows := requireLedgerMatches(t, s, "A1")
	require.Len(t, rows, 1)
	mv := apptest.GQL[struct {
		WarehouseMove struct{ Number, Kind, Status, ProductionOrderID string }
	}](t, s, `query($id: ID!) { warehouseMove(id: $id) { number kind status productionOrderId } }`,
		map[string]any{"id": rows[0].Move.ID}).WarehouseMove
	require.Equal(t, "RECEIPT", mv.Kind)
	require.Equal(t, "posted", mv.Status)
	require.Equal(t, po.ID, mv.ProductionOrderID)
	require.Regexp(t, `^ПР-`, mv.Number)
}

func TestStockBalancesPages(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	seedStock(t, s)
	apptest.GQL[map[string]any](t, s, `mutation { createWarehouse(input: {code: "SPARE", name: "Запасной"}) { id } }`, nil)
	mustMove(t, s, receipt(line("B1", "1"), line("A1", "2")))
	mustMove(t, s, map[string]any{"kind": "RECEIPT", "toWarehouse": "SPARE", "lines": []any{line("A1", "3")}})
	type page struct {
		StockBalances struct {
			Edges []struct {
				Node struct {
					SKU, ItemName, Unit, Warehouse, OnHand string
				}
			}
			PageInfo struct {
				HasNextPage bool
				EndCursor   *string
			}
		}
	}
	const q = `query($after: String, $f: StockFilter) { stockBalances(filter: $f, first: 2, after: $after) {
		edges { node { sku itemName unit warehouse onHand } } pageInfo { hasNextPage endCursor } } }`
	p1 := apptest.GQL[page](t, s, q, nil).StockBalances
	require.True(t, p1.PageInfo.HasNextPage)
	require.Len(t, p1.Edges, 2)
	require.Equal(t, "A1", p1.Edges[0].Node.SKU)
	require.Equal(t, "MAIN", p1.Edges[0].Node.Warehouse)
	require.Equal(t, "2.000", p1.Edges[0].Node.OnHand)
	require.Equal(t, "SPARE", p1.Edges[1].Node.Warehouse)
	p2 := apptest.GQL[page](t, s, q, map[string]any{"after": p1.PageInfo.EndCursor}).StockBalances
	require.False(t, p2.PageInfo.HasNextPage)
	require.Len(t, p2.Edges, 1)
	require.Equal(t, "B1", p2.Edges[0].Node.SKU)
	spare := apptest.GQL[page](t, s, q, map[string]any{"f": map[string]any{"warehouse": "SPARE"}}).StockBalances
	require.Len(t, spare.Edges, 1)
	e := apptest.GQLErr(t, s, q, map[string]any{"after": "bogus"})
	require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"])
	require.Equal(t, "after", e.Extensions["field"], "after is an argument of its own, not the filter's")
	e = apptest.GQLErr(t, s, `{ stockLedger(sku: "NOPE") { edges { cursor } } }`, nil)
	require.Equal(t, "sku", e.Extensions["field"])
	// A viewer may read stock.
	viewer := s.As(apptest.RoleToken(t, s, "viewer", "VIEWER"))
	require.Len(t, apptest.GQL[page](t, viewer, q, nil).StockBalances.Edges, 2)
	e = apptest.GQLErr(t, viewer, createMove, map[string]any{"in": receipt(line("A1", "1"))})
	require.Equal(t, "FORBIDDEN", e.Extensions["code"])
}

// A page of the stock ledger that shows each entry's move reads the moves
// in one batch, and what it shows of each move is what warehouseMove(id)
// and the warehouseMoves list show.
func TestStockLedgerPageBatchesMoves(t *testing.T) {
	t.Parallel()
	statements := &statementLog{}
	pool, err := db.Connect(t.Context(), pgtest.NewDB(t), func(c *pgxpool.Config) { c.ConnConfig.Tracer = statements })
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := apptest.NewOn(t, pool)
	seedStock(t, s)
	for range 3 {
		mustMove(t, s, receipt(line("A1", "5"), line("B1", "1")))
	}
	mv := mustMove(t, s, issue(line("A1", "2")))
	apptest.GQL[map[string]any](t, s, reverseMove, map[string]any{"id": mv.ID, "v": mv.Version, "r": "ошибка"})

	const fields = `id number kind status version fromWarehouse toWarehouse reversalOfId salesOrderId lines { lineNo sku quantity }`
	mark := statements.mark()
	page := apptest.GQL[struct {
		StockLedger struct {
			Edges []struct{ Node struct{ Move map[string]any } }
		}
	}](t, s, `{ stockLedger(sku: "A1", first: 50) { edges { node { move { `+fields+` } } } } }`, nil)
	require.Len(t, page.StockLedger.Edges, 5, "three receipts, the issue and its reversal")
	require.Equal(t, 1, statements.count(mark, "FROM wh_moves m", "m.id = ANY"), "the moves of the page")
	require.Equal(t, 1, statements.count(mark, "FROM wh_move_lines l", "l.move_id = ANY"), "their lines")

	list := apptest.GQL[struct {
		WarehouseMoves struct {
			Edges []struct{ Node map[string]any }
		}
	}](t, s, `{ warehouseMoves(first: 50) { edges { node { `+fields+` } } } }`, nil)
	listed := map[any]map[string]any{}
	for _, e := range list.WarehouseMoves.Edges {
		listed[e.Node["id"]] = e.Node
	}
	reversals := 0
	for _, e := range page.StockLedger.Edges {
		single := apptest.GQL[struct{ WarehouseMove map[string]any }](t, s, `query($id: ID!) { warehouseMove(id: $id) { `+fields+` } }`,
			map[string]any{"id": e.Node.Move["id"]}).WarehouseMove
		require.Equal(t, single, e.Node.Move, "move %v: the batched page and warehouseMove disagree", e.Node.Move["id"])
		require.Equal(t, single, listed[e.Node.Move["id"]], "move %v: the list and warehouseMove disagree", e.Node.Move["id"])
		if e.Node.Move["reversalOfId"] != nil {
			require.Equal(t, mv.ID, e.Node.Move["reversalOfId"])
			reversals++
		}
	}
	require.Equal(t, 1, reversals)
}

// Receipts of a purchase order bring only what it orders and no more than
// is still to come; no materials go to a production order that was
// cancelled or completed, by a new issue or by posting its draft one.
// Each refusal names the field and writes nothing.
func TestMovesKeepToTheirOrders(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	seedStock(t, s)
	po := apptest.GQL[struct{ CreatePurchaseOrder docState }](t, s,
		`mutation { createPurchaseOrder(input: {supplier: "ООО Лес", lines: [{sku: "A1", quantity: "10"}]}) { id number status version } }`,
		nil).CreatePurchaseOrder
	against := func(in map[string]any) map[string]any { in["purchaseOrderId"] = po.ID; return in }
	mustMove(t, s, against(receipt(line("A1", "6"))))
	mustMove(t, s, receipt(line("A1", "20"))) // stock for the issues below

	prod := apptest.GQL[struct{ CreateProductionOrder docState }](t, s,
		`mutation { createProductionOrder(input: {sku: "B1", quantity: "1"}) { id number status version } }`, nil).CreateProductionOrder
	draft := issue(line("A1", "1"))
	draft["productionOrderId"], draft["draft"] = prod.ID, true
	d := mustMove(t, s, draft)
	apptest.GQL[map[string]any](t, s, `mutation($id: ID!, $v: Int!) { cancelProductionOrder(id: $id, version: $v, reason: "отменён") { id } }`,
		map[string]any{"id": prod.ID, "v": prod.Version})

	before := readWrites(t, s)
	for _, tt := range []struct {
		name, code, field, msg string
		in                     map[string]any
	}{
		{"an item the order does not order", "BAD_USER_INPUT", "input.lines.0.sku", "orders no B1", against(receipt(line("B1", "1")))},
		{"more than is still to come", "BAD_USER_INPUT", "input.lines.0.quantity", "4.000 шт of A1 still to receive", against(receipt(line("A1", "5")))},
		{"an issue to a cancelled production order", "BAD_USER_INPUT", "input.productionOrderId", "is cancelled", func() map[string]any {
			in := issue(line("A1", "1"))
			in["productionOrderId"] = prod.ID
			return in
		}()},
	} {
		e := apptest.GQLErr(t, s, createMove, map[string]any{"in": tt.in})
		require.Equal(t, tt.code, e.Extensions["code"], "%s: %s", tt.name, e.Message)
		require.Equal(t, tt.field, e.Extensions["field"], tt.name)
		require.Contains(t, e.Message, tt.msg, tt.name)
	}
	// The draft issue went with its order (cancelled, version 2): posting
	// it is refused, at the version it was drafted at or at its own.
	e := apptest.GQLErr(t, s, postMove, map[string]any{"id": d.ID, "v": d.Version})
	require.Equal(t, "CONFLICT", e.Extensions["code"], e.Message)
	require.Equal(t, "cancelled", e.Extensions["currentStatus"], e.Message)
	e = apptest.GQLErr(t, s, postMove, map[string]any{"id": d.ID, "v": d.Version + 1})
	require.Equal(t, "CONFLICT", e.Extensions["code"], e.Message)
	require.Contains(t, e.Message, "is cancelled and cannot become posted")
	require.Equal(t, "cancelled", e.Extensions["currentStatus"], e.Message)
	require.NotContains(t, e.Message, "conflict:")
	require.Equal(t, before, readWrites(t, s), "a refused move writes nothing")
	require.True(t, onHand(t, s, "A1").Equal(decimal.NewFromInt(26)))

	// The rest of the order is still welcome.
	mustMove(t, s, against(receipt(line("A1", "4"))))
	require.Equal(t, "received", apptest.GQL[struct{ PurchaseOrder docState }](t, s,
		`query($id: ID!) { purchaseOrder(id: $id) { id number status version } }`, map[string]any{"id": po.ID}).PurchaseOrder.Status)
}

// Reversing a move takes its order back as far as the move had taken it:
// a shipped sales order to the status it had before, which ships again; a
// purchase order to what its remaining receipts cover. Each change is
// journaled by the reversing user with the reason naming the move.
func TestReversalReopensItsOrder(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	seedStock(t, s)
	so := createSalesOrder(t, s) // 1 A1, new
	mustMove(t, s, receipt(line("A1", "5")))
	ship := map[string]any{"kind": "SHIPMENT", "fromWarehouse": "MAIN", "salesOrderId": so.ID, "lines": []any{line("A1", "1")}}
	sh := mustMove(t, s, ship)
	status := func(q, id string) string {
		out := apptest.GQL[map[string]struct{ Status string }](t, s, fmt.Sprintf(`query($id: ID!) { doc: %s(id: $id) { status } }`, q), map[string]any{"id": id})
		return out["doc"].Status
	}
	require.Equal(t, "shipped", status("salesOrder", so.ID))

	apptest.GQL[map[string]any](t, s, reverseMove, map[string]any{"id": sh.ID, "v": sh.Version, "r": "вернули на склад"})
	require.Equal(t, "new", status("salesOrder", so.ID), "back to the status it had before the shipment")
	ev := statusEvents(t, s, "sales_orders", so.ID) // newest first
	require.Len(t, ev, 2)
	require.Equal(t, "shipped", ev[0].Payload["from"])
	require.Equal(t, "new", ev[0].Payload["to"])
	require.Equal(t, "вернули на склад", ev[0].Payload["reason"])
	require.Equal(t, sh.Number, ev[0].Payload["reversedMove"])
	require.Equal(t, "admin", ev[0].Actor.Login)
	require.True(t, onHand(t, s, "A1").Equal(decimal.NewFromInt(5)))
	mustMove(t, s, ship)
	require.Equal(t, "shipped", status("salesOrder", so.ID), "it ships again")

	po := apptest.GQL[struct{ CreatePurchaseOrder docState }](t, s,
		`mutation { createPurchaseOrder(input: {supplier: "ООО Лес", lines: [{sku: "B1", quantity: "4"}]}) { id number status version } }`,
		nil).CreatePurchaseOrder
	rc := func(q string) moveState {
		in := receipt(line("B1", q))
		in["purchaseOrderId"] = po.ID
		return mustMove(t, s, in)
	}
	first, second := rc("1"), rc("3")
	require.Equal(t, "received", status("purchaseOrder", po.ID))
	apptest.GQL[map[string]any](t, s, reverseMove, map[string]any{"id": second.ID, "v": second.Version, "r": "брак"})
	require.Equal(t, "partially_received", status("purchaseOrder", po.ID))
	apptest.GQL[map[string]any](t, s, reverseMove, map[string]any{"id": first.ID, "v": first.Version, "r": "брак"})
	require.Equal(t, "open", status("purchaseOrder", po.ID))
	pev := statusEvents(t, s, "wh_purchase_orders", po.ID)
	require.Len(t, pev, 4, "partially received, received, back to partially received, back to open")
	require.Equal(t, "брак", pev[0].Payload["reason"])
	require.Equal(t, first.Number, pev[0].Payload["reversedMove"])
	require.Equal(t, "open", pev[0].Payload["to"])
	rc("4")
	require.Equal(t, "received", status("purchaseOrder", po.ID), "the whole order can be received again")
}

// TestDraftCancelled: a draft move is discarded with a reason (journaled,
// no stock, no ledger row); a cancelled move can be neither posted nor
// cancelled again, a posted one not cancelled, and a missing reason is
// BAD_USER_INPUT that writes nothing.
func TestDraftCancelled(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	seedStock(t, s)
	const cancel = `mutation($id: ID!, $v: Int!, $r: String!) { cancelWarehouseMove(id: $id, version: $v, reason: $r) { id status version } }`
	in := receipt(line("A1", "3"))
	in["draft"] = true
	d := mustMove(t, s, in)

	e := apptest.GQLErr(t, s, cancel, map[string]any{"id": d.ID, "v": d.Version, "r": " "})
	require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"], e.Message)
	require.Equal(t, "reason", e.Extensions["field"])

	got := apptest.GQL[struct{ CancelWarehouseMove moveState }](t, s, cancel, map[string]any{"id": d.ID, "v": d.Version, "r": "ошибка ввода"}).CancelWarehouseMove
	require.Equal(t, "cancelled", got.Status)
	require.Equal(t, d.Version+1, got.Version)
	ev := statusEvents(t, s, "wh_moves", d.ID)
	require.Len(t, ev, 1)
	require.Equal(t, "draft", ev[0].Payload["from"])
	require.Equal(t, "cancelled", ev[0].Payload["to"])
	require.Equal(t, "ошибка ввода", ev[0].Payload["reason"])
	require.Empty(t, ledger(t, s, "A1"))
	require.True(t, onHand(t, s, "A1").IsZero())
	listed := apptest.GQL[struct {
		WarehouseMoves struct{ Edges []struct{ Node moveState } }
	}](t, s, `{ warehouseMoves(filter: {statuses: ["cancelled"]}) { edges { node { id status version } } } }`, nil)
	require.Len(t, listed.WarehouseMoves.Edges, 1, "listed by its status")
	require.Equal(t, got, listed.WarehouseMoves.Edges[0].Node)

	for _, q := range []string{postMove, cancel} {
		e = apptest.GQLErr(t, s, q, map[string]any{"id": d.ID, "v": got.Version, "r": "again"})
		require.Equal(t, "CONFLICT", e.Extensions["code"], e.Message)
		require.Equal(t, "cancelled", e.Extensions["currentStatus"])
	}
	posted := mustMove(t, s, receipt(line("A1", "2")))
	e = apptest.GQLErr(t, s, cancel, map[string]any{"id": posted.ID, "v": posted.Version, "r": "поздно"})
	require.Equal(t, "CONFLICT", e.Extensions["code"], e.Message)
	require.True(t, onHand(t, s, "A1").Equal(decimal.NewFromInt(2)))
}
