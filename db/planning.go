package db

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
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
	LineNo   int32           `db:"line_no"`
	SKU      string          `db:"sku"`
	Name     string          `db:"name"`
	Unit     string          `db:"unit"`
	Quantity decimal.Decimal `db:"quantity"`
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
	if _, err := tx.Exec(ctx, `LOCK TABLE item_components IN SHARE ROW EXCLUSIVE MODE`); err != nil {
		return Item{}, fmt.Errorf("lock bills of materials: %w", err)
	}
	item, err := getOne[Item](ctx, tx, `SELECT id, sku, name, unit, created_at FROM items WHERE sku = $1`, sku)
	if errors.Is(err, ErrNotFound) {
		return Item{}, inputErr("sku", "unknown item %q", sku)
	}
	if err != nil {
		return Item{}, fmt.Errorf("get item %s: %w", sku, err)
	}

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
		var via *int64
		err := tx.QueryRow(ctx, `
			WITH RECURSIVE reach (id, root) AS (
				SELECT c, c FROM unnest($2::bigint[]) AS c
				UNION
				SELECT ic.component_item_id, r.root
				FROM item_components ic JOIN reach r ON ic.item_id = r.id
				WHERE ic.item_id <> $1
			)
			SELECT root FROM reach WHERE id = $1 LIMIT 1`, item.ID, itemIDs).Scan(&via)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return Item{}, fmt.Errorf("check bill of materials of %s for cycles: %w", sku, err)
		}
		if via != nil {
			i := first[*via]
			return Item{}, inputErr(fmt.Sprintf("components.%d.sku", i),
				"%q contains %q through its bill of materials: the item would contain itself", lines[i].SKU, sku)
		}
	}

	if _, err := tx.Exec(ctx, `DELETE FROM item_components WHERE item_id = $1`, item.ID); err != nil {
		return Item{}, fmt.Errorf("clear bill of materials of %s: %w", sku, err)
	}
	if len(itemIDs) > 0 {
		if _, err := tx.Exec(ctx, `
			INSERT INTO item_components (item_id, component_item_id, line_no, quantity)
			SELECT $1, t.component, t.ord, t.qty
			FROM unnest($2::bigint[], $3::numeric[]) WITH ORDINALITY AS t(component, qty, ord)`,
			item.ID, itemIDs, quantities); err != nil {
			return Item{}, fmt.Errorf("insert %d components of %s: %w", len(itemIDs), sku, err)
		}
	}
	return item, nil
}

// BillOfMaterials returns the bill of materials of item itemID (table
// item_components) in line order; empty for an item not made in-house.
func BillOfMaterials(ctx context.Context, q Querier, itemID int64) ([]Component, error) {
	rows, err := q.Query(ctx, `
		SELECT c.line_no, i.sku, i.name, i.unit, c.quantity
		FROM item_components c JOIN items i ON i.id = c.component_item_id
		WHERE c.item_id = $1 ORDER BY c.line_no`, itemID)
	if err != nil {
		return nil, fmt.Errorf("get bill of materials of item %d: %w", itemID, err)
	}
	comps, err := pgx.CollectRows(rows, pgx.RowToStructByName[Component])
	if err != nil {
		return nil, fmt.Errorf("get bill of materials of item %d: %w", itemID, err)
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
	if _, err := tx.Exec(ctx, `UPDATE warehouses SET supplies_production = false WHERE supplies_production AND code <> $1`, code); err != nil {
		return Warehouse{}, fmt.Errorf("clear production warehouse: %w", err)
	}
	wh, err := getOne[Warehouse](ctx, tx, `
		UPDATE warehouses SET supplies_production = true WHERE code = $1 RETURNING `+warehouseColumns, code)
	if errors.Is(err, ErrNotFound) {
		return Warehouse{}, inputErr("code", "unknown warehouse %q", code)
	}
	if err != nil {
		return Warehouse{}, fmt.Errorf("set production warehouse %s: %w", code, err)
	}
	return wh, nil
}

// PlanSalesOrder plans production for sales order salesOrderID: one
// production order ПЗ (plan_prod_orders) per order line whose item has a
// bill of materials, for the line's quantity, linked to the order and the
// line, each with its doc.created event ({"id", "no", "entity":
// "prod_order"}) by the system (actor null). Lines planned before are
// skipped, so a repeat plans nothing twice; the order row is locked first,
// so concurrent calls for one order wait for each other. It returns the new
// production orders and their events; ErrNotFound when the order does not
// exist.
func PlanSalesOrder(ctx context.Context, tx pgx.Tx, salesOrderID int64) ([]ProductionOrder, []Event, error) {
	var id int64
	if err := tx.QueryRow(ctx, `SELECT id FROM sales_orders WHERE id = $1 FOR NO KEY UPDATE`, salesOrderID).Scan(&id); err != nil {
		return nil, nil, fmt.Errorf("plan sales order %d: %w", salesOrderID, translate(err))
	}
	rows, err := tx.Query(ctx, `
		SELECT l.line_no, l.item_id, l.quantity FROM sales_order_lines l
		WHERE l.sales_order_id = $1
		  AND EXISTS (SELECT 1 FROM item_components c WHERE c.item_id = l.item_id)
		  AND NOT EXISTS (SELECT 1 FROM plan_prod_orders p
		                  WHERE p.sales_order_id = l.sales_order_id AND p.sales_order_line_no = l.line_no)
		ORDER BY l.line_no`, salesOrderID)
	if err != nil {
		return nil, nil, fmt.Errorf("lines to plan of sales order %d: %w", salesOrderID, err)
	}
	type toPlan struct {
		LineNo   int32           `db:"line_no"`
		ItemID   int64           `db:"item_id"`
		Quantity decimal.Decimal `db:"quantity"`
	}
	lines, err := pgx.CollectRows(rows, pgx.RowToStructByName[toPlan])
	if err != nil {
		return nil, nil, fmt.Errorf("lines to plan of sales order %d: %w", salesOrderID, err)
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

// IssueMaterials issues the materials of production order prodOrderID to
// the shop floor in answer to journal event sourceEventID (normally the
// order's doc.created): one warehouse move ВЦ (wh_moves, kind
// issue_to_production) from the warehouse that supplies production, linked
// to the production order, one line per component of the item's bill of
// materials for the ordered quantity (rounded up to 0.001), with its
// doc.created event ({"entity": "wh_move"}) by the system (actor null).
//
// It is idempotent per source event: when a move answering sourceEventID
// exists, it returns that move with created false and writes nothing.
// Errors: ErrNotFound (no such production order), ErrNoBillOfMaterials (the
// item has none: nothing to issue), ErrNoProductionWarehouse.
func IssueMaterials(ctx context.Context, tx pgx.Tx, prodOrderID, sourceEventID int64) (mv WarehouseMove, events []Event, created bool, err error) {
	var itemID int64
	var quantity decimal.Decimal
	var no string
	// The lock makes the existence check below hold against a concurrent
	// issue for the same order.
	if err := tx.QueryRow(ctx, `SELECT item_id, quantity, number FROM plan_prod_orders WHERE id = $1 FOR NO KEY UPDATE`,
		prodOrderID).Scan(&itemID, &quantity, &no); err != nil {
		return WarehouseMove{}, nil, false, fmt.Errorf("issue materials for production order %d: %w", prodOrderID, translate(err))
	}
	var existing int64
	err = tx.QueryRow(ctx, `SELECT id FROM wh_moves WHERE source_event_id = $1`, sourceEventID).Scan(&existing)
	if err == nil {
		mv, err := WarehouseMoveByID(ctx, tx, existing)
		return mv, nil, false, err
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return WarehouseMove{}, nil, false, fmt.Errorf("find move answering event %d: %w", sourceEventID, err)
	}

	rows, err := tx.Query(ctx, `SELECT component_item_id, quantity FROM item_components WHERE item_id = $1 ORDER BY line_no`, itemID)
	if err != nil {
		return WarehouseMove{}, nil, false, fmt.Errorf("components for production order %s: %w", no, err)
	}
	type component struct {
		ItemID   int64           `db:"component_item_id"`
		Quantity decimal.Decimal `db:"quantity"`
	}
	comps, err := pgx.CollectRows(rows, pgx.RowToStructByName[component])
	if err != nil {
		return WarehouseMove{}, nil, false, fmt.Errorf("components for production order %s: %w", no, err)
	}
	if len(comps) == 0 {
		return WarehouseMove{}, nil, false, fmt.Errorf("issue materials for production order %s: %w", no, ErrNoBillOfMaterials)
	}
	var warehouseID int64
	err = tx.QueryRow(ctx, `SELECT id FROM warehouses WHERE supplies_production`).Scan(&warehouseID)
	if errors.Is(err, pgx.ErrNoRows) {
		return WarehouseMove{}, nil, false, fmt.Errorf("issue materials for production order %s: %w", no, ErrNoProductionWarehouse)
	}
	if err != nil {
		return WarehouseMove{}, nil, false, fmt.Errorf("find production warehouse: %w", err)
	}

	itemIDs := make([]int64, len(comps))
	lines := make([]LineInput, len(comps))
	for i, c := range comps {
		q := c.Quantity.Mul(quantity).RoundCeil(quantityDecimals)
		if q.GreaterThanOrEqual(decimal.New(1, 15)) {
			return WarehouseMove{}, nil, false, fmt.Errorf("issue materials for production order %s: quantity %s of component %d is too large", no, q, i+1)
		}
		itemIDs[i], lines[i] = c.ItemID, LineInput{Quantity: q}
	}
	mv, events, err = insertWarehouseMove(ctx, tx, nil, moveRow{
		kind: MoveIssueToProduction, prefix: PrefixIssueToProduction, fromID: &warehouseID,
		prodOrderID: &prodOrderID, sourceEventID: &sourceEventID,
	}, itemIDs, lines)
	if err != nil {
		return WarehouseMove{}, nil, false, err
	}
	return mv, events, true, nil
}
