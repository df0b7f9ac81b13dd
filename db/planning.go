package db

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"erp/db/internal/dbsqlc"
)

// constraintOneProductionWarehouse is the unique index that lets at most one
// warehouse supply production.
const constraintOneProductionWarehouse = "warehouses_supplies_production"

// Planning errors. Callers test them with errors.Is.
var (
	// ErrNoProductionWarehouse: materials cannot be issued because no
	// warehouse is marked as supplying production (warehouses.
	// supplies_production). Mark one, then redeliver.
	ErrNoProductionWarehouse = errors.New("no warehouse supplies production: mark one with setProductionWarehouse, then redeliver")
	// ErrNoBillOfMaterials: the item of a production order has no bill of
	// materials (item_components), so it has nothing to issue.
	ErrNoBillOfMaterials = errors.New("the item has no bill of materials")

	// ErrQuantityTooLarge is a material issue whose component quantity
	// (the bill of materials × the ordered quantity) has more than 15
	// digits before the point: no move can carry it, so retrying is
	// useless.
	ErrQuantityTooLarge = errors.New("the component quantity is too large for a warehouse move")
)

// ComponentInput is one line of a bill of materials as a client sends it:
// a component by SKU and its quantity per one unit of the item, in the
// component's unit (> 0, at most 3 decimals).
type ComponentInput struct {
	SKU      string
	Quantity decimal.Decimal
}

// Component is a stored line of a bill of materials (item_components) with
// the component item's SKU, name and unit.
type Component struct {
	LineNo   int32
	SKU      string
	Name     string
	Unit     string
	Quantity decimal.Decimal
}

// SetBillOfMaterials replaces the bill of materials of item sku (table
// item_components) with components, in the order given; an empty list
// removes it, and the item is no longer made in-house. Bad input is an
// *InputError on "sku" or on the component's path ("components.1.sku",
// "components.0.quantity"): an unknown item, a component listed twice, or
// an item that would contain itself, directly or through the bills of its
// components. Edits of bills of materials are serialised (a table lock that
// does not block readers), so two concurrent edits cannot build a cycle.
func SetBillOfMaterials(ctx context.Context, tx pgx.Tx, sku string, components []ComponentInput) (Item, error) {
	sku, err := requireText("sku", sku)
	if err != nil {
		return Item{}, err
	}
	if err := queries.ItemComponentLock(ctx, tx); err != nil {
		return Item{}, fmt.Errorf("lock bills of materials: %w", translate(err))
	}
	row, err := queries.ItemGetBySKU(ctx, tx, sku)
	switch err = translate(err); {
	case errors.Is(err, ErrNotFound):
		return Item{}, inputErr("sku", "unknown item %q", sku)
	case err != nil:
		return Item{}, fmt.Errorf("get item %s: %w", sku, err)
	}
	item := Item(row)

	var itemIDs []int64
	quantities := make([]decimal.Decimal, len(components))
	if len(components) > 0 {
		lines := make([]LineInput, len(components))
		for i, c := range components {
			lines[i] = LineInput{SKU: c.SKU, Quantity: c.Quantity}
			quantities[i] = c.Quantity
		}
		if itemIDs, err = resolveLines(ctx, tx, "components", lines); err != nil {
			return Item{}, err
		}
		first := make(map[int64]int, len(itemIDs))
		for i, id := range itemIDs {
			path := fmt.Sprintf("components.%d.sku", i)
			if id == item.ID {
				return Item{}, inputErr(path, "an item cannot be a component of itself")
			}
			if j, ok := first[id]; ok {
				return Item{}, inputErr(path, "%q is listed already at components.%d", lines[i].SKU, j)
			}
			first[id] = i
		}
		// A cycle closes when the item is reachable from a new component
		// through the bills as they stand (the item's own, being replaced,
		// left out).
		via, err := queries.ItemComponentFindCycle(ctx, tx, item.ID, itemIDs)
		switch err = translate(err); {
		case err == nil:
			i := first[via]
			return Item{}, inputErr(fmt.Sprintf("components.%d.sku", i),
				"%q contains %q through its bill of materials: the item would contain itself", lines[i].SKU, sku)
		case !errors.Is(err, ErrNotFound):
			return Item{}, fmt.Errorf("check bill of materials of %s for cycles: %w", sku, err)
		}
	}

	if err := queries.ItemComponentDeleteByItem(ctx, tx, item.ID); err != nil {
		return Item{}, fmt.Errorf("clear bill of materials of %s: %w", sku, translate(err))
	}
	if len(itemIDs) > 0 {
		if err := queries.ItemComponentInsertMany(ctx, tx, item.ID, itemIDs, quantities); err != nil {
			return Item{}, fmt.Errorf("insert %d components of %s: %w", len(itemIDs), sku, translate(err))
		}
	}
	return item, nil
}

// BillOfMaterials returns the bill of materials of item itemID (table
// item_components) in line order; empty for an item not made in-house.
func BillOfMaterials(ctx context.Context, q Querier, itemID int64) ([]Component, error) {
	rows, err := queries.ItemComponentListByItem(ctx, q, itemID)
	if err != nil {
		return nil, fmt.Errorf("get bill of materials of item %d: %w", itemID, translate(err))
	}
	comps := make([]Component, len(rows))
	for i, r := range rows {
		comps[i] = Component{LineNo: r.LineNo, SKU: r.SKU, Name: r.Name, Unit: r.Unit, Quantity: r.Quantity}
	}
	return comps, nil
}

// SetProductionWarehouse makes warehouse code the one that supplies
// production (warehouses.supplies_production), taking the mark from any
// other. An unknown code is an *InputError on "code"; a concurrent call
// marking another warehouse may fail with ErrConflict.
func SetProductionWarehouse(ctx context.Context, tx pgx.Tx, code string) (Warehouse, error) {
	code, err := requireText("code", code)
	if err != nil {
		return Warehouse{}, err
	}
	// Two statements: a unique index is checked row by row, so moving the
	// mark in one UPDATE could see both rows marked.
	if err := queries.WarehouseClearProduction(ctx, tx, code); err != nil {
		return Warehouse{}, fmt.Errorf("clear production warehouse: %w", translate(err))
	}
	wh, err := queries.WarehouseSetProduction(ctx, tx, code)
	switch err = translate(err); {
	case errors.Is(err, ErrNotFound):
		return Warehouse{}, inputErr("code", "unknown warehouse %q", code)
	case err != nil:
		return Warehouse{}, fmt.Errorf("set production warehouse %s: %w", code, err)
	}
	return Warehouse(wh), nil
}

// PlanSalesOrder plans production for sales order salesOrderID: one
// production order ПЗ (plan_prod_orders) per order line whose item has a
// bill of materials, for the line's quantity, linked to the order and the
// line, each with its doc.created event ({"id", "no", "entity":
// "prod_order"}) by the system (actor null). Lines planned before are
// skipped, so a repeat plans nothing twice; the order row is locked first,
// so concurrent calls for one order wait for each other and for a
// cancellation. An order cancelled or shipped before its planning runs
// gets no production: nothing is written and no event returned. It
// returns the new production orders and their events; ErrNotFound when
// the order does not exist.
func PlanSalesOrder(ctx context.Context, tx pgx.Tx, salesOrderID int64) ([]ProductionOrder, []Event, error) {
	so, err := LockDocument(ctx, tx, SalesOrders, salesOrderID)
	if err != nil {
		return nil, nil, err
	}
	if so.Status == SalesOrderCancelled || so.Status == SalesOrderShipped {
		return nil, nil, nil
	}
	lines, err := queries.SalesOrderLineListToPlan(ctx, tx, salesOrderID)
	if err != nil {
		return nil, nil, fmt.Errorf("lines to plan of sales order %d: %w", salesOrderID, translate(err))
	}
	var orders []ProductionOrder
	var events []Event
	for _, l := range lines {
		po, evs, err := insertProductionOrder(ctx, tx, nil, l.ItemID, l.Quantity, &salesOrderID, &l.LineNo)
		if err != nil {
			return nil, nil, fmt.Errorf("plan line %d of sales order %d: %w", l.LineNo, salesOrderID, err)
		}
		orders = append(orders, po)
		events = append(events, evs...)
	}
	return orders, events, nil
}

// PlanSalesOrders is PlanSalesOrder for the orders ids (distinct) at
// once, in three statements whatever the number of orders: their locks
// (in id order), the lines to plan of them all, and the production orders
// with their doc.created events, written in the order of ids and line
// order, so that the numbers they take at commit follow that order. events[i] holds the doc.created events written for ids[i]. An id
// listed twice is an error and an unknown one ErrNotFound.
func PlanSalesOrders(ctx context.Context, tx pgx.Tx, ids []int64) ([][]Event, error) {
	states, err := lockSalesOrders(ctx, tx, ids)
	if err != nil {
		return nil, err
	}
	plan := make([]int64, 0, len(ids))
	for _, id := range ids {
		if st := states[id].Status; st != SalesOrderCancelled && st != SalesOrderShipped {
			plan = append(plan, id)
		}
	}
	lines, err := queries.SalesOrderLineListToPlanMany(ctx, tx, plan)
	if err != nil {
		return nil, fmt.Errorf("lines to plan of %d sales orders: %w", len(plan), translate(err))
	}
	byOrder := make(map[int64][]dbsqlc.SalesOrderLineListToPlanManyRow, len(plan))
	for _, l := range lines {
		byOrder[l.SalesOrderID] = append(byOrder[l.SalesOrderID], l)
	}
	events := make([][]Event, len(ids))
	if len(lines) == 0 {
		return events, nil
	}
	p := dbsqlc.ProductionOrderPlanManyParams{TraceParent: traceParent(ctx)}
	var at []int // the k-th production order is for ids[at[k]]
	for i, id := range ids {
		for _, l := range byOrder[id] {
			p.Numbers = append(p.Numbers, pendingNumber(PrefixProductionOrder))
			p.ItemIds = append(p.ItemIds, l.ItemID)
			p.Quantities = append(p.Quantities, l.Quantity)
			p.SalesOrderIds = append(p.SalesOrderIds, id)
			p.LineNos = append(p.LineNos, l.LineNo)
			at = append(at, i)
		}
	}
	rows, err := queries.ProductionOrderPlanMany(ctx, tx, p)
	if err != nil {
		return nil, fmt.Errorf("plan %d lines of %d sales orders: %w", len(at), len(plan), translate(err))
	}
	if len(rows) != len(at) {
		return nil, fmt.Errorf("plan %d lines of %d sales orders: %d production orders written", len(at), len(plan), len(rows))
	}
	// The orders' events come in the order of p (see the query).
	for k, r := range rows {
		ev := eventFrom(dbsqlc.EventRow(r))
		if r.DispatchJobID != nil {
			ev.NewDispatchJobID = *r.DispatchJobID
		}
		events[at[k]] = append(events[at[k]], ev)
	}
	return events, nil
}

// IssueMaterials issues the materials of production order prodOrderID to
// the shop floor in answer to journal event sourceEventID (normally the
// order's doc.created): one warehouse move ВЦ (wh_moves, kind
// issue_to_production) from the warehouse that supplies production, linked
// to the production order, one line per component of the item's bill of
// materials for the ordered quantity (rounded up to 0.001), with its
// doc.created event ({"entity": "wh_move"}) by the system (actor null).
// The move is a draft: it moves no stock until the warehouse posts it
// (PostWarehouseMove), so a shortage of materials never fails the
// planning chain; it fails the posting instead, where a person can act.
//
// It is idempotent per source event: when a move answering sourceEventID
// exists, it returns that move with created false and writes nothing. A
// production order cancelled or completed by then gets no issue (a zero
// move, created false).
// Errors: ErrNotFound (no such production order), ErrNoBillOfMaterials (the
// item has none: nothing to issue), ErrNoProductionWarehouse.
func IssueMaterials(ctx context.Context, tx pgx.Tx, prodOrderID, sourceEventID int64) (mv WarehouseMove, events []Event, created bool, err error) {
	// The lock makes the existence check below hold against a concurrent
	// issue for the same order.
	po, err := queries.ProductionOrderLockByID(ctx, tx, prodOrderID)
	if err != nil {
		return WarehouseMove{}, nil, false, fmt.Errorf("issue materials for production order %d: %w", prodOrderID, translate(err))
	}
	quantity, no := po.Quantity, po.Number
	if po.Status == ProductionCancelled || po.Status == ProductionCompleted {
		// Cancelled (with its sales order, say) or done before its
		// materials were issued: nothing to issue.
		return WarehouseMove{}, nil, false, nil
	}
	existing, err := queries.WarehouseMoveGetIDBySourceEvent(ctx, tx, &sourceEventID)
	switch err = translate(err); {
	case err == nil:
		mv, err := WarehouseMoveByID(ctx, tx, existing)
		return mv, nil, false, err
	case !errors.Is(err, ErrNotFound):
		return WarehouseMove{}, nil, false, fmt.Errorf("find move answering event %d: %w", sourceEventID, err)
	}

	comps, err := queries.ItemComponentListByItem(ctx, tx, po.ItemID)
	if err != nil {
		return WarehouseMove{}, nil, false, fmt.Errorf("components for production order %s: %w", no, translate(err))
	}
	if len(comps) == 0 {
		return WarehouseMove{}, nil, false, fmt.Errorf("issue materials for production order %s: %w", no, ErrNoBillOfMaterials)
	}
	warehouseID, err := queries.WarehouseGetProductionID(ctx, tx)
	switch err = translate(err); {
	case errors.Is(err, ErrNotFound):
		return WarehouseMove{}, nil, false, fmt.Errorf("issue materials for production order %s: %w", no, ErrNoProductionWarehouse)
	case err != nil:
		return WarehouseMove{}, nil, false, fmt.Errorf("find production warehouse: %w", err)
	}

	itemIDs := make([]int64, len(comps))
	lines := make([]LineInput, len(comps))
	for i, c := range comps {
		q := c.Quantity.Mul(quantity).RoundCeil(quantityDecimals)
		if q.GreaterThanOrEqual(decimal.New(1, 15)) {
			return WarehouseMove{}, nil, false, fmt.Errorf("issue materials for production order %s: quantity %s of component %d: %w", no, q, i+1, ErrQuantityTooLarge)
		}
		itemIDs[i], lines[i] = c.ComponentItemID, LineInput{Quantity: q}
	}
	mv, events, err = insertWarehouseMove(ctx, tx, nil, moveRow{
		kind: MoveIssueToProduction, prefix: PrefixIssueToProduction, status: MoveDraft, fromID: &warehouseID,
		prodOrderID: &prodOrderID, sourceEventID: &sourceEventID,
	}, itemIDs, lines)
	if err != nil {
		return WarehouseMove{}, nil, false, err
	}
	return mv, events, true, nil
}

// MaterialsRequest asks IssueMaterialsMany to issue the materials of
// production order ProdOrderID in answer to journal event SourceEventID.
type MaterialsRequest struct {
	ProdOrderID, SourceEventID int64
}

// IssueMaterialsMany is IssueMaterials for the requests reqs (distinct
// production orders) at once, in five statements whatever their number:
// it locks the orders in id order, then finds the moves answering the
// events, the bills of materials and the production warehouse, and writes
// every move with its lines and doc.created event in one statement, in
// the order of reqs, so that the numbers they take at commit follow that
// order. events[i] holds the doc.created written for reqs[i]: none when
// IssueMaterials would create no move (a move answers the event, the
// order is cancelled or completed) and none for an item without a bill of
// materials (IssueMaterials' ErrNoBillOfMaterials). A production order
// listed twice is an error; an unknown one ErrNotFound, then
// ErrNoProductionWarehouse and ErrQuantityTooLarge as IssueMaterials
// returns them; on any error the caller's rollback leaves nothing written.
func IssueMaterialsMany(ctx context.Context, tx pgx.Tx, reqs []MaterialsRequest) ([][]Event, error) {
	ids := make([]int64, len(reqs))
	for i, r := range reqs {
		if slices.Contains(ids[:i], r.ProdOrderID) {
			return nil, fmt.Errorf("issue materials: production order %d is listed twice", r.ProdOrderID)
		}
		ids[i] = r.ProdOrderID
	}
	locked, err := queries.ProductionOrderLockMany(ctx, tx, ids)
	if err != nil {
		return nil, fmt.Errorf("lock %d production orders: %w", len(ids), translate(err))
	}
	orders := make(map[int64]dbsqlc.ProductionOrderLockManyRow, len(locked))
	for _, po := range locked {
		orders[po.ID] = po
	}
	// The requests IssueMaterials would go on with: the order open, its
	// event not answered yet (read after the locks, as there).
	var open []MaterialsRequest
	for _, r := range reqs {
		po, ok := orders[r.ProdOrderID]
		if !ok {
			return nil, fmt.Errorf("issue materials for production order %d: %w", r.ProdOrderID, ErrNotFound)
		}
		if po.Status != ProductionCancelled && po.Status != ProductionCompleted {
			open = append(open, r)
		}
	}
	sources := make([]int64, len(open))
	for i, r := range open {
		sources[i] = r.SourceEventID
	}
	answered, err := queries.WarehouseMoveListSourceEvents(ctx, tx, sources)
	if err != nil {
		return nil, fmt.Errorf("find moves answering %d events: %w", len(sources), translate(err))
	}
	open = slices.DeleteFunc(open, func(r MaterialsRequest) bool {
		return slices.ContainsFunc(answered, func(id *int64) bool { return *id == r.SourceEventID })
	})
	items := make([]int64, 0, len(open))
	for _, r := range open {
		items = append(items, orders[r.ProdOrderID].ItemID)
	}
	comps, err := queries.ItemComponentListByItems(ctx, tx, items)
	if err != nil {
		return nil, fmt.Errorf("components of %d items: %w", len(items), translate(err))
	}
	bom := make(map[int64][]dbsqlc.ItemComponentListByItemsRow)
	for _, c := range comps {
		bom[c.ItemID] = append(bom[c.ItemID], c)
	}
	open = slices.DeleteFunc(open, func(r MaterialsRequest) bool { return len(bom[orders[r.ProdOrderID].ItemID]) == 0 })
	events := make([][]Event, len(reqs))
	if len(open) == 0 {
		return events, nil
	}

	warehouseID, err := queries.WarehouseGetProductionID(ctx, tx)
	switch err = translate(err); {
	case errors.Is(err, ErrNotFound):
		return nil, fmt.Errorf("issue materials for production order %s: %w", orders[open[0].ProdOrderID].Number, ErrNoProductionWarehouse)
	case err != nil:
		return nil, fmt.Errorf("find production warehouse: %w", err)
	}
	p := dbsqlc.WarehouseMoveIssueManyParams{
		Kind: MoveIssueToProduction, Status: MoveDraft, FromWarehouseID: &warehouseID, TraceParent: traceParent(ctx),
	}
	for _, r := range open {
		po := orders[r.ProdOrderID]
		p.Numbers = append(p.Numbers, pendingNumber(PrefixIssueToProduction))
		p.ProdOrderIds = append(p.ProdOrderIds, r.ProdOrderID)
		p.SourceEventIds = append(p.SourceEventIds, r.SourceEventID)
		for i, c := range bom[po.ItemID] {
			q := c.Quantity.Mul(po.Quantity).RoundCeil(quantityDecimals)
			if q.GreaterThanOrEqual(decimal.New(1, 15)) {
				return nil, fmt.Errorf("issue materials for production order %s: quantity %s of component %d: %w", po.Number, q, i+1, ErrQuantityTooLarge)
			}
			p.LineSourceEventIds = append(p.LineSourceEventIds, r.SourceEventID)
			p.LineNos = append(p.LineNos, int32(i+1))
			p.LineItemIds = append(p.LineItemIds, c.ComponentItemID)
			p.LineQuantities = append(p.LineQuantities, q)
		}
	}
	rows, err := queries.WarehouseMoveIssueMany(ctx, tx, p)
	if err != nil {
		return nil, fmt.Errorf("issue materials for %d production orders: %w", len(open), translate(err))
	}
	if len(rows) != len(open) {
		return nil, fmt.Errorf("issue materials for %d production orders: %d moves written", len(open), len(rows))
	}
	at := make(map[int64]int, len(reqs))
	for i, r := range reqs {
		at[r.ProdOrderID] = i
	}
	// The moves' events come in the order of open (see the query).
	for k, r := range rows {
		ev := eventFrom(dbsqlc.EventRow(r))
		if r.DispatchJobID != nil {
			ev.NewDispatchJobID = *r.DispatchJobID
		}
		events[at[open[k].ProdOrderID]] = []Event{ev}
	}
	return events, nil
}
