package resolvers_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"erp/app/apptest"
)

func TestPlanningThroughTheAPI(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	for _, it := range [][2]string{{"P1", "шт"}, {"M1", "м"}, {"M2", "кг"}} {
		apptest.GQL[map[string]any](t, s, `mutation($sku: String!, $unit: String!) { createItem(input: {sku: $sku, name: $sku, unit: $unit}) { id } }`,
			map[string]any{"sku": it[0], "unit": it[1]})
	}

	// A bill of materials, read back in the order given.
	type component struct {
		LineNo   int `json:"lineNo"`
		SKU      string
		Name     string
		Unit     string
		Quantity string
	}
	set := apptest.GQL[struct {
		SetBillOfMaterials struct {
			SKU        string
			Components []component
		} `json:"setBillOfMaterials"`
	}](t, s, `mutation { setBillOfMaterials(sku: "P1", components: [{sku: "M2", quantity: "0.5"}, {sku: "M1", quantity: 2}]) {
		sku components { lineNo sku name unit quantity } } }`, nil).SetBillOfMaterials
	require.Equal(t, "P1", set.SKU)
	require.Equal(t, []component{{1, "M2", "M2", "кг", "0.500"}, {2, "M1", "M1", "м", "2.000"}}, set.Components)

	tests := []struct {
		name, query, code, field string
	}{
		{"unknown item", `mutation { setBillOfMaterials(sku: "NOPE", components: []) { id } }`, "BAD_USER_INPUT", "sku"},
		{"unknown component", `mutation { setBillOfMaterials(sku: "P1", components: [{sku: "M1", quantity: "1"}, {sku: "NOPE", quantity: "1"}]) { id } }`, "BAD_USER_INPUT", "components.1.sku"},
		{"itself", `mutation { setBillOfMaterials(sku: "M1", components: [{sku: "P1", quantity: "1"}]) { id } }`, "BAD_USER_INPUT", "components.0.sku"},
		{"zero quantity", `mutation { setBillOfMaterials(sku: "P1", components: [{sku: "M1", quantity: "0"}]) { id } }`, "BAD_USER_INPUT", "components.0.quantity"},
		{"unknown warehouse", `mutation { setProductionWarehouse(code: "NOPE") { id } }`, "BAD_USER_INPUT", "code"},
	}
	for _, tt := range tests {
		e := apptest.GQLErr(t, s, tt.query, nil)
		require.Equal(t, tt.code, e.Extensions["code"], "%s: %s", tt.name, e.Message)
		require.Equal(t, tt.field, e.Extensions["field"], tt.name)
	}

	// One warehouse supplies production; the mark moves, it is not shared.
	type warehouse struct {
		Code               string
		SuppliesProduction bool `json:"suppliesProduction"`
	}
	const createWarehouse = `mutation($code: String!, $supplies: Boolean!) {
		createWarehouse(input: {code: $code, name: $code, suppliesProduction: $supplies}) { code suppliesProduction } }`
	apptest.GQL[map[string]any](t, s, createWarehouse, map[string]any{"code": "W1", "supplies": true})
	e := apptest.GQLErr(t, s, createWarehouse, map[string]any{"code": "W2", "supplies": true})
	require.Equal(t, "CONFLICT", e.Extensions["code"], e.Message)
	require.Equal(t, "input.suppliesProduction", e.Extensions["field"])
	apptest.GQL[map[string]any](t, s, `mutation { createWarehouse(input: {code: "W2", name: "W2"}) { id } }`, nil)
	moved := apptest.GQL[struct {
		SetProductionWarehouse warehouse `json:"setProductionWarehouse"`
	}](t, s, `mutation { setProductionWarehouse(code: "W2") { code suppliesProduction } }`, nil)
	require.Equal(t, warehouse{"W2", true}, moved.SetProductionWarehouse)
	whs := apptest.GQL[struct{ Warehouses []warehouse }](t, s, `{ warehouses { code suppliesProduction } }`, nil)
	require.Equal(t, []warehouse{{"W1", false}, {"W2", true}}, whs.Warehouses)

	// A received order is planned and its materials issued by the server.
	order := apptest.GQL[struct {
		ReceiveOrder struct{ Order struct{ ID string } } `json:"receiveOrder"`
	}](t, s, `mutation { receiveOrder(input: {source: SHOP, externalId: "shop-7826d8468b3d", customer: "Иванов",
		lines: [{sku: "M1", quantity: "3"}, {sku: "P1", quantity: "2"}]}) { order { id } } }`, nil).ReceiveOrder.Order
	type move struct {
		Number            string
		Kind              string
		FromWarehouse     string `json:"fromWarehouse"`
		ProductionOrderID string `json:"productionOrderId"`
		SourceEventID     string `json:"sourceEventId"`
		Status            string
		Version           int
		Lines             []struct{ SKU, Quantity string }
	}
	var issue move
	apptest.WaitFor(t, 10*time.Second, "the material issue", func() bool {
		res := apptest.GQL[struct {
			WarehouseMove *move `json:"warehouseMove"`
		}](t, s, `{ warehouseMove(id: 1) { number kind fromWarehouse productionOrderId sourceEventId status version lines { sku quantity } } }`, nil)
		if res.WarehouseMove != nil {
			issue = *res.WarehouseMove
		}
		return res.WarehouseMove != nil
	})
	require.Equal(t, "ISSUE_TO_PRODUCTION", issue.Kind)
	require.Equal(t, "W2", issue.FromWarehouse)
	require.Equal(t, []struct{ SKU, Quantity string }{{"M2", "1.000"}, {"M1", "4.000"}}, issue.Lines)
	require.NotEmpty(t, issue.SourceEventID)
	require.Equal(t, "draft", issue.Status, "a shortage must not fail the chain: the issue waits as a draft")

	// Posting it needs the materials on hand at W2.
	const post = `mutation { postWarehouseMove(id: 1, version: 1) { status version } }`
	e = apptest.GQLErr(t, s, post, nil)
	require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"], e.Message)
	require.Equal(t, "lines.0.quantity", e.Extensions["field"])
	apptest.GQL[map[string]any](t, s, `mutation { createWarehouseMove(input: {kind: RECEIPT, toWarehouse: "W2",
		lines: [{sku: "M1", quantity: "4"}, {sku: "M2", quantity: "1"}]}) { id } }`, nil)
	posted := apptest.GQL[struct {
		PostWarehouseMove struct{ Status string } `json:"postWarehouseMove"`
	}](t, s, post, nil).PostWarehouseMove
	require.Equal(t, "posted", posted.Status)

	po := apptest.GQL[struct {
		ProductionOrder struct {
			SKU              string
			SalesOrderID     string `json:"salesOrderId"`
			SalesOrderLineNo *int   `json:"salesOrderLineNo"`
		} `json:"productionOrder"`
	}](t, s, `query($id: ID!) { productionOrder(id: $id) { sku salesOrderId salesOrderLineNo } }`,
		map[string]any{"id": issue.ProductionOrderID}).ProductionOrder
	require.Equal(t, "P1", po.SKU)
	require.Equal(t, order.ID, po.SalesOrderID)
	require.Equal(t, 2, *po.SalesOrderLineNo, "line 1 is a material, bought not made")
}

// A production order cancelled with its sales order, or by itself, takes
// its draft material issue along (a clerk must not post materials to a
// cancelled order), journaled as the move's own doc.status_changed.
func TestCancelledProductionCancelsItsDraftIssue(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	for _, sku := range []string{"P1", "M1"} {
		apptest.GQL[map[string]any](t, s, `mutation($sku: String!) { createItem(input: {sku: $sku, name: $sku, unit: "шт"}) { id } }`,
			map[string]any{"sku": sku})
	}
	apptest.GQL[map[string]any](t, s, `mutation { setBillOfMaterials(sku: "P1", components: [{sku: "M1", quantity: 2}]) { id } }`, nil)
	apptest.GQL[map[string]any](t, s, `mutation { createWarehouse(input: {code: "W1", name: "W1", suppliesProduction: true}) { id } }`, nil)

	type doc struct {
		ID, Status string
		Version    int
	}
	type issue struct {
		doc
		ProductionOrderID string `json:"productionOrderId"`
		SalesOrderID      string
	}
	// order receives an order of P1 and waits for its draft material issue.
	order := func(externalID string) issue {
		t.Helper()
		so := apptest.GQL[struct {
			ReceiveOrder struct{ Order struct{ ID string } } `json:"receiveOrder"`
		}](t, s, `mutation($x: String!) { receiveOrder(input: {source: SHOP, externalId: $x, customer: "Иванов",
			lines: [{sku: "P1", quantity: "1"}]}) { order { id } } }`, map[string]any{"x": externalID}).ReceiveOrder.Order
		var got issue
		apptest.WaitFor(t, 10*time.Second, "the material issue of "+externalID, func() bool {
			res := apptest.GQL[struct {
				WarehouseMoves struct{ Edges []struct{ Node issue } }
			}](t, s, `{ warehouseMoves(filter: {kinds: [ISSUE_TO_PRODUCTION]}) { edges { node { id status version productionOrderId } } } }`, nil)
			for _, e := range res.WarehouseMoves.Edges {
				po := apptest.GQL[struct{ ProductionOrder struct{ SalesOrderID string } }](t, s,
					`query($id: ID!) { productionOrder(id: $id) { salesOrderId } }`, map[string]any{"id": e.Node.ProductionOrderID}).ProductionOrder
				if po.SalesOrderID == so.ID {
					got, got.SalesOrderID = e.Node, so.ID
					return true
				}
			}
			return false
		})
		require.Equal(t, "draft", got.Status)
		return got
	}
	state := func(field, id string) doc {
		t.Helper()
		res := apptest.GQL[map[string]doc](t, s, `query($id: ID!) { d: `+field+`(id: $id) { id status version } }`, map[string]any{"id": id})
		return res["d"]
	}

	viaSales := order("shop-1")
	so := state("salesOrder", viaSales.SalesOrderID)
	apptest.GQL[map[string]any](t, s, `mutation($id: ID!, $v: Int!) { cancelSalesOrder(id: $id, version: $v, reason: "передумал") { id } }`,
		map[string]any{"id": so.ID, "v": so.Version})
	require.Equal(t, "cancelled", state("productionOrder", viaSales.ProductionOrderID).Status)
	require.Equal(t, "cancelled", state("warehouseMove", viaSales.ID).Status, "the draft issue goes with its production order")
	ev := statusEvents(t, s, "wh_moves", viaSales.ID)
	require.Len(t, ev, 1)
	require.Equal(t, "cancelled", ev[0].Payload["to"])
	require.Contains(t, ev[0].Payload["reason"], "передумал")

	direct := order("shop-2")
	po := state("productionOrder", direct.ProductionOrderID)
	apptest.GQL[map[string]any](t, s, `mutation($id: ID!, $v: Int!) { cancelProductionOrder(id: $id, version: $v, reason: "нет мощностей") { id } }`,
		map[string]any{"id": po.ID, "v": po.Version})
	require.Equal(t, "cancelled", state("warehouseMove", direct.ID).Status)
	ev = statusEvents(t, s, "wh_moves", direct.ID)
	require.Len(t, ev, 1)
	require.Contains(t, ev[0].Payload["reason"], "нет мощностей")
}
