package db

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
)

// Sales order sources and statuses, as stored in sales_orders.
const (
	SourceManual = "manual"
	SourceShop   = "shop"
	SourceCRM    = "crm"

	SalesOrderNew      = "new"
	SalesOrderAccepted = "accepted"

	MoveReceipt           = "receipt"
	MoveIssueToProduction = "issue_to_production"

	maxLines         = 1000
	maxTextLen       = 200
	quantityDecimals = 3
	priceDecimals    = 2
)

// Payload "entity" values of doc.created, one per document table.
const (
	payloadSalesOrder    = "sales_order"
	payloadProdOrder     = "prod_order"
	payloadWarehouseMove = "wh_move"
	payloadPurchaseOrder = "purchase_order"
)

// LineInput is one document line as a client sends it: an item by SKU, a
// quantity in the item's unit (> 0, at most 3 decimals) and an optional
// price per unit (>= 0, at most 2 decimals).
type LineInput struct {
	SKU      string
	Quantity decimal.Decimal
	Price    *decimal.Decimal
}

// DocLine is a stored document line with its item.
type DocLine struct {
	LineNo   int32            `db:"line_no"`
	SKU      string           `db:"sku"`
	ItemName string           `db:"item_name"`
	Unit     string           `db:"unit"`
	Quantity decimal.Decimal  `db:"quantity"`
	Price    *decimal.Decimal `db:"price"`
}

// SalesOrder is a row of sales_orders with its lines.
type SalesOrder struct {
	ID       int64  `db:"id"`
	Number   string `db:"number"`
	Customer string `db:"customer"`
	Status   string `db:"status"`
	Source   string `db:"source"`
	// ExternalID is the shop's sync_id or the CRM's order number; nil for
	// manual orders.
	ExternalID *string   `db:"external_id"`
	CreatedAt  time.Time `db:"created_at"`
	Lines      []DocLine `db:"-"`
}

// ProductionOrder is a row of plan_prod_orders.
type ProductionOrder struct {
	ID           int64           `db:"id"`
	Number       string          `db:"number"`
	SKU          string          `db:"sku"`
	ItemName     string          `db:"item_name"`
	Unit         string          `db:"unit"`
	Quantity     decimal.Decimal `db:"quantity"`
	SalesOrderID *int64          `db:"sales_order_id"`
	Status       string          `db:"status"`
	CreatedAt    time.Time       `db:"created_at"`
	// SalesOrderLineNo is the sales order line the order was planned for
	// (PlanSalesOrder); nil for one created by hand.
	SalesOrderLineNo *int32 `db:"sales_order_line_no"`
}

// PurchaseOrder is a row of wh_purchase_orders with its lines.
type PurchaseOrder struct {
	ID        int64     `db:"id"`
	Number    string    `db:"number"`
	Supplier  string    `db:"supplier"`
	Status    string    `db:"status"`
	CreatedAt time.Time `db:"created_at"`
	Lines     []DocLine `db:"-"`
}

// WarehouseMove is a row of wh_moves with its lines; warehouses by code.
type WarehouseMove struct {
	ID                int64     `db:"id"`
	Number            string    `db:"number"`
	Kind              string    `db:"kind"`
	FromWarehouse     *string   `db:"from_warehouse"`
	ToWarehouse       *string   `db:"to_warehouse"`
	PurchaseOrderID   *int64    `db:"purchase_order_id"`
	ProductionOrderID *int64    `db:"prod_order_id"`
	Status            string    `db:"status"`
	CreatedAt         time.Time `db:"created_at"`
	Lines             []DocLine `db:"-"`
	// SourceEventID is the journal event an automatic move answers
	// (IssueMaterials); nil for one created by hand.
	SourceEventID *int64 `db:"source_event_id"`
}

// SalesOrderInput creates a manual sales order.
type SalesOrderInput struct {
	Customer string
	Lines    []LineInput
}

// ReceiveOrderInput is an order from an integration. Source is SourceShop
// (ExternalID is the shop's sync_id) or SourceCRM (ExternalID is the CRM's
// order number, digits only).
type ReceiveOrderInput struct {
	Source     string
	ExternalID string
	Customer   string
	Lines      []LineInput
}

// ProductionOrderInput plans production of one item, optionally for a
// sales order.
type ProductionOrderInput struct {
	SKU          string
	Quantity     decimal.Decimal
	SalesOrderID *int64
}

// PurchaseOrderInput orders items from a supplier.
type PurchaseOrderInput struct {
	Supplier string
	Lines    []LineInput
}

// WarehouseMoveInput moves stock. Kind MoveReceipt needs ToWarehouse and
// may name its purchase order; MoveIssueToProduction needs FromWarehouse and
// may name its production order. Warehouses are given by code.
type WarehouseMoveInput struct {
	Kind              string
	FromWarehouse     *string
	ToWarehouse       *string
	Lines             []LineInput
	PurchaseOrderID   *int64
	ProductionOrderID *int64
}

type docCreatedPayload struct {
	ID     int64  `json:"id"`
	No     string `json:"no"`
	Entity string `json:"entity"`
}

// CreateSalesOrder writes a manual sales order (number ЗК-…) with its lines
// and its doc.created event in tx: InsertSalesOrder, then
// NumberSalesOrder. Bad input is an *InputError and writes nothing the
// caller's rollback would not undo.
func CreateSalesOrder(ctx context.Context, tx pgx.Tx, actorID *int64, in SalesOrderInput) (SalesOrder, []Event, error) {
	pending, _, err := InsertSalesOrder(ctx, tx, actorID, in)
	if err != nil {
		return SalesOrder{}, nil, err
	}
	so, ev, err := NumberSalesOrder(ctx, tx, pending)
	if err != nil {
		return SalesOrder{}, nil, err
	}
	return so, []Event{ev}, nil
}

// PendingSalesOrder is a sales order InsertSalesOrder wrote without its
// number; NumberSalesOrder, in the same transaction, gives it one.
type PendingSalesOrder struct {
	order   SalesOrder
	eventID int64
}

// InsertSalesOrder is the first half of CreateSalesOrder: it writes the
// order with a provisional number, its lines and its doc.created event
// (whose payload lacks "no" until then) in one statement, and returns the
// event, for the caller to enqueue its dispatch job. Bad input is an
// *InputError, as for CreateSalesOrder.
//
// The number comes last, from NumberSalesOrder, because taking it locks the
// series row until tx ends (that is what keeps the series gapless): called
// right before commit, after the job insert, it holds the lock for one
// statement and the commit instead of the whole transaction, which is what
// lets concurrent orders through.
func InsertSalesOrder(ctx context.Context, tx pgx.Tx, actorID *int64, in SalesOrderInput) (PendingSalesOrder, []Event, error) {
	customer, err := requireText("customer", in.Customer)
	if err != nil {
		return PendingSalesOrder{}, nil, err
	}
	skus, err := validateLines("lines", in.Lines)
	if err != nil {
		return PendingSalesOrder{}, nil, err
	}
	pending, events, err := insertPendingSalesOrder(ctx, tx, actorID, customer, SourceManual, nil, skus, in.Lines)
	if err != nil {
		return PendingSalesOrder{}, nil, err
	}
	if len(events) == 0 {
		return PendingSalesOrder{}, nil, fmt.Errorf("insert sales order: no row written")
	}
	return pending, events, nil
}

// insertPendingSalesOrder runs insertSalesOrderSQL for validated input. No
// events and no error means the order of (source, externalID) exists
// already and nothing was written.
func insertPendingSalesOrder(ctx context.Context, tx pgx.Tx, actorID *int64, customer, source string, externalID *string, skus []string, lines []LineInput) (PendingSalesOrder, []Event, error) {
	qty, price := lineValues(lines)
	rows, err := tx.Query(ctx, insertSalesOrderSQL, customer, actorID, skus, qty, price,
		EventDocCreated, EntitySalesOrders, payloadSalesOrder, source, externalID)
	if err != nil {
		return PendingSalesOrder{}, nil, fmt.Errorf("insert %s sales order: %w", source, err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByName[createdSalesOrderRow])
	if err != nil {
		return PendingSalesOrder{}, nil, fmt.Errorf("insert %s sales order: %w", source, err)
	}
	if len(got) != len(lines) {
		// A line's SKU matched no item, so it was left out (or, with no
		// rows, the order exists). Name the SKU; the caller's rollback
		// undoes the order.
		if _, err := itemIDsBySKU(ctx, tx, "lines", skus); err != nil {
			return PendingSalesOrder{}, nil, err
		}
		if len(got) == 0 && externalID != nil {
			return PendingSalesOrder{}, nil, nil
		}
		return PendingSalesOrder{}, nil, fmt.Errorf("insert %s sales order: %d lines written, want %d", source, len(got), len(lines))
	}
	first := got[0]
	so := SalesOrder{
		ID: first.SalesOrderID, Customer: first.Customer, Status: first.Status,
		Source: first.Source, ExternalID: first.ExternalID, CreatedAt: first.SalesOrderCreatedAt,
		Lines: make([]DocLine, len(got)),
	}
	for i, r := range got {
		so.Lines[i] = r.DocLine
	}
	return PendingSalesOrder{order: so, eventID: first.Event.ID}, []Event{first.Event}, nil
}

// NumberSalesOrder takes the next ЗК number for an order InsertSalesOrder
// wrote in tx and puts it in the order and in its event's payload, in one
// statement; call it last before commit. It returns the order and the event
// as stored. An exhausted series is ErrConflict.
func NumberSalesOrder(ctx context.Context, tx pgx.Tx, p PendingSalesOrder) (SalesOrder, Event, error) {
	rows, err := tx.Query(ctx, numberSalesOrderSQL, PrefixSalesOrder, p.order.ID, p.eventID)
	if err != nil {
		return SalesOrder{}, Event{}, insertNumberedErr(PrefixSalesOrder, fmt.Sprintf("number sales order %d", p.order.ID), err)
	}
	type numbered struct {
		Event
		Number string `db:"number"`
	}
	got, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[numbered])
	if err != nil {
		return SalesOrder{}, Event{}, insertNumberedErr(PrefixSalesOrder, fmt.Sprintf("number sales order %d", p.order.ID), err)
	}
	so := p.order
	so.Number = got.Number
	return so, got.Event, nil
}

// insertSalesOrderSQL writes a sales order numbered provisionally (a
// unique placeholder that NumberSalesOrder replaces before commit, so no
// other transaction ever sees it), its lines and its doc.created event
// (payload as docCreatedPayload but for "no"), returning one row per line
// (createdSalesOrderRow) in line order; a line whose SKU names no item is
// left out (the caller compares the count), and an order whose (source,
// external id) exists already is not written (no rows). $1 customer, $2
// actor, $3–$5 the lines' SKUs, quantities and prices, $6–$8 event type,
// entity and payload entity, $9 source, $10 external id (NULL for a manual
// order, which never conflicts).
const insertSalesOrderSQL = `
	WITH so AS (
		INSERT INTO sales_orders (number, customer, created_by, source, external_id)
		VALUES ('pending ' || gen_random_uuid(), $1::text, $2::bigint, $9::text, $10::text)
		ON CONFLICT (source, external_id) DO NOTHING
		RETURNING id, customer, status, source, external_id, created_at
	), l AS (
		INSERT INTO sales_order_lines (sales_order_id, line_no, item_id, quantity, price)
		SELECT so.id, t.ord, i.id, t.qty, t.price
		FROM so, unnest($3::text[], $4::numeric[], $5::numeric[]) WITH ORDINALITY AS t(sku, qty, price, ord)
		JOIN items i ON i.sku = t.sku
		RETURNING line_no, item_id, quantity, price
	), e AS (
		INSERT INTO events (type, entity, entity_id, payload, actor_id)
		SELECT $6::text, $7::text, so.id, jsonb_build_object('id', so.id, 'entity', $8::text), $2::bigint
		FROM so
		RETURNING *
	)
	SELECT ` + eventColumnsFromJoin + `,
		so.id AS so_id, so.customer, so.status, so.source, so.external_id, so.created_at AS so_created_at,
		l.line_no, i.sku, i.name AS item_name, i.unit, l.quantity, l.price
	FROM so CROSS JOIN e LEFT JOIN users u ON u.id = e.actor_id
	CROSS JOIN l JOIN items i ON i.id = l.item_id
	ORDER BY l.line_no`

// numberSalesOrderSQL takes the next number of series $1 (formatted as
// nextNumber does) and puts it in sales order $2 and in the payload of its
// event $3, returning the event (eventColumnsFromJoin) and the number.
const numberSalesOrderSQL = `
	WITH n AS (
		INSERT INTO number_series (prefix, year, last_value)
		VALUES ($1, extract(year FROM now())::int, 1)
		ON CONFLICT (prefix, year) DO UPDATE SET last_value = number_series.last_value + 1
		RETURNING prefix || '-' || year || '-' || lpad(last_value::text, 6, '0') AS number
	), so AS (
		UPDATE sales_orders s SET number = n.number FROM n WHERE s.id = $2 RETURNING s.number
	), e AS (
		UPDATE events e SET payload = e.payload || jsonb_build_object('no', so.number)
		FROM so WHERE e.id = $3
		RETURNING e.*
	)
	SELECT ` + eventColumnsFromJoin + `, so.number
	FROM so CROSS JOIN e LEFT JOIN users u ON u.id = e.actor_id`

// createdSalesOrderRow is one row of insertSalesOrderSQL: the order and its
// event, repeated on each of its lines.
type createdSalesOrderRow struct {
	Event
	DocLine
	SalesOrderID        int64     `db:"so_id"`
	Customer            string    `db:"customer"`
	Status              string    `db:"status"`
	Source              string    `db:"source"`
	ExternalID          *string   `db:"external_id"`
	SalesOrderCreatedAt time.Time `db:"so_created_at"`
}

// ReceiveOrder writes a sales order received from the shop or the CRM with
// its doc.created and order.received events, idempotently per (source,
// external id): when that order already exists it returns it with
// duplicate true and writes nothing. It is InsertReceivedOrder, then
// NumberSalesOrder.
func ReceiveOrder(ctx context.Context, tx pgx.Tx, actorID *int64, in ReceiveOrderInput) (so SalesOrder, events []Event, duplicate bool, err error) {
	r, events, err := InsertReceivedOrder(ctx, tx, actorID, in)
	if err != nil || r.Duplicate {
		return r.Existing, nil, r.Duplicate, err
	}
	so, docCreated, err := NumberSalesOrder(ctx, tx, r.Pending)
	if err != nil {
		return SalesOrder{}, nil, false, err
	}
	events[0] = docCreated
	return so, events, false, nil
}

// ReceivedOrder is what InsertReceivedOrder did: wrote a new order pending
// its number (Pending), or, when Duplicate, found the order it was sent
// before (Existing) and wrote nothing.
type ReceivedOrder struct {
	Pending   PendingSalesOrder
	Existing  SalesOrder
	Duplicate bool
}

// InsertReceivedOrder is the first half of ReceiveOrder: it writes the
// order as InsertSalesOrder does, with its doc.created and order.received
// events (returned, for the caller to enqueue), or finds the existing
// order. The unique constraint on (source, external id) decides, so two
// concurrent deliveries of one order yield one order; as the number comes
// only later (NumberSalesOrder, for a new order only), a duplicate never
// takes one and the series stays gapless.
func InsertReceivedOrder(ctx context.Context, tx pgx.Tx, actorID *int64, in ReceiveOrderInput) (ReceivedOrder, []Event, error) {
	externalID := strings.TrimSpace(in.ExternalID)
	var payloadKey string
	var payloadID any
	switch in.Source {
	case SourceShop:
		if externalID == "" || len(externalID) > maxTextLen || strings.ContainsRune(externalID, 0) || !utf8.ValidString(externalID) {
			return ReceivedOrder{}, nil, inputErr("externalId", "a shop sync_id of 1 to %d characters is required", maxTextLen)
		}
		payloadKey, payloadID = "sync_id", externalID
	case SourceCRM:
		if externalID == "" || strings.TrimLeft(externalID, "0123456789") != "" {
			return ReceivedOrder{}, nil, inputErr("externalId", "a CRM order number is digits only, got %q", in.ExternalID)
		}
		n, perr := strconv.ParseInt(externalID, 10, 64)
		if perr != nil || n < 1 || n > 999_999_999_999_999_999 {
			return ReceivedOrder{}, nil, inputErr("externalId", "a CRM order number is between 1 and 18 digits long, got %q", in.ExternalID)
		}
		// Canonical form: "051015" and "51015" are the same CRM order.
		externalID = strconv.FormatInt(n, 10)
		payloadKey, payloadID = "crm_order_id", n
	default:
		return ReceivedOrder{}, nil, inputErr("source", "unknown order source %q", in.Source)
	}
	customer, err := requireText("customer", in.Customer)
	if err != nil {
		return ReceivedOrder{}, nil, err
	}
	// Bad lines are refused even for an order sent before.
	skus, err := validateLines("lines", in.Lines)
	if err != nil {
		return ReceivedOrder{}, nil, err
	}
	if _, err := itemIDsBySKU(ctx, tx, "lines", skus); err != nil {
		return ReceivedOrder{}, nil, err
	}
	pending, events, err := insertPendingSalesOrder(ctx, tx, actorID, customer, in.Source, &externalID, skus, in.Lines)
	if err != nil {
		return ReceivedOrder{}, nil, err
	}
	if len(events) == 0 {
		existing, err := salesOrderByExternalID(ctx, tx, in.Source, externalID)
		return ReceivedOrder{Existing: existing, Duplicate: true}, nil, err
	}
	id := pending.order.ID
	received, err := appendEvent(ctx, tx, actorID, EventOrderReceived, EntitySalesOrders, id, map[string]any{
		"lines":    len(in.Lines),
		"source":   in.Source,
		payloadKey: payloadID,
		"order_id": id,
	})
	if err != nil {
		return ReceivedOrder{}, nil, err
	}
	return ReceivedOrder{Pending: pending}, append(events, received), nil
}

// AcceptSalesOrder moves a sales order from new to accepted; it reports
// whether the status changed (false when it was accepted already).
func AcceptSalesOrder(ctx context.Context, tx pgx.Tx, id int64) (bool, error) {
	tag, err := tx.Exec(ctx, `UPDATE sales_orders SET status = $2 WHERE id = $1 AND status = $3`,
		id, SalesOrderAccepted, SalesOrderNew)
	if err != nil {
		return false, fmt.Errorf("accept sales order %d: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// CreateProductionOrder writes a production order (number ПЗ-…) and its
// doc.created event in tx.
func CreateProductionOrder(ctx context.Context, tx pgx.Tx, actorID *int64, in ProductionOrderInput) (ProductionOrder, []Event, error) {
	itemIDs, err := resolveLines(ctx, tx, "", []LineInput{{SKU: in.SKU, Quantity: in.Quantity}})
	if err != nil {
		return ProductionOrder{}, nil, err
	}
	if in.SalesOrderID != nil {
		if err := requireRow(ctx, tx, "salesOrderId", "sales_orders", *in.SalesOrderID); err != nil {
			return ProductionOrder{}, nil, err
		}
	}
	return insertProductionOrder(ctx, tx, actorID, itemIDs[0], in.Quantity, in.SalesOrderID, nil)
}

// insertProductionOrder writes a validated production order with its
// number and doc.created event and reads it back. lineNo, when set, is the
// line of sales order salesOrderID it is planned for.
func insertProductionOrder(ctx context.Context, tx pgx.Tx, actorID *int64, itemID int64, quantity decimal.Decimal, salesOrderID *int64, lineNo *int32) (ProductionOrder, []Event, error) {
	no, err := nextNumber(ctx, tx, PrefixProductionOrder)
	if err != nil {
		return ProductionOrder{}, nil, err
	}
	var id int64
	if err := tx.QueryRow(ctx, `
		INSERT INTO plan_prod_orders (number, item_id, quantity, sales_order_id, sales_order_line_no, created_by)
		VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`,
		no, itemID, quantity, salesOrderID, lineNo, actorID).Scan(&id); err != nil {
		return ProductionOrder{}, nil, fmt.Errorf("insert production order %s: %w", no, err)
	}
	ev, err := appendEvent(ctx, tx, actorID, EventDocCreated, EntityProdOrders, id,
		docCreatedPayload{ID: id, No: no, Entity: payloadProdOrder})
	if err != nil {
		return ProductionOrder{}, nil, err
	}
	po, err := ProductionOrderByID(ctx, tx, id)
	return po, []Event{ev}, err
}

// CreatePurchaseOrder writes a purchase order to a supplier (number ЗП-…)
// with its lines and doc.created event in tx.
func CreatePurchaseOrder(ctx context.Context, tx pgx.Tx, actorID *int64, in PurchaseOrderInput) (PurchaseOrder, []Event, error) {
	supplier, err := requireText("supplier", in.Supplier)
	if err != nil {
		return PurchaseOrder{}, nil, err
	}
	itemIDs, err := resolveLines(ctx, tx, "lines", in.Lines)
	if err != nil {
		return PurchaseOrder{}, nil, err
	}
	no, err := nextNumber(ctx, tx, PrefixPurchaseOrder)
	if err != nil {
		return PurchaseOrder{}, nil, err
	}
	var id int64
	if err := tx.QueryRow(ctx, `
		INSERT INTO wh_purchase_orders (number, supplier, created_by) VALUES ($1, $2, $3) RETURNING id`,
		no, supplier, actorID).Scan(&id); err != nil {
		return PurchaseOrder{}, nil, fmt.Errorf("insert purchase order %s: %w", no, err)
	}
	if err := insertLines(ctx, tx, purchaseOrderLines, id, itemIDs, in.Lines); err != nil {
		return PurchaseOrder{}, nil, err
	}
	ev, err := appendEvent(ctx, tx, actorID, EventDocCreated, EntityPurchaseOrders, id,
		docCreatedPayload{ID: id, No: no, Entity: payloadPurchaseOrder})
	if err != nil {
		return PurchaseOrder{}, nil, err
	}
	po, err := PurchaseOrderByID(ctx, tx, id)
	return po, []Event{ev}, err
}

// CreateWarehouseMove writes a warehouse move (ПР-… for a receipt, ВЦ-… for
// an issue to production) with its lines and doc.created event in tx.
func CreateWarehouseMove(ctx context.Context, tx pgx.Tx, actorID *int64, in WarehouseMoveInput) (WarehouseMove, []Event, error) {
	var prefix string
	switch in.Kind {
	case MoveReceipt:
		prefix = PrefixReceipt
		if in.ToWarehouse == nil {
			return WarehouseMove{}, nil, inputErr("toWarehouse", "a receipt needs the warehouse it arrives at")
		}
		if in.FromWarehouse != nil {
			return WarehouseMove{}, nil, inputErr("fromWarehouse", "a receipt comes from a supplier, not a warehouse")
		}
		if in.ProductionOrderID != nil {
			return WarehouseMove{}, nil, inputErr("productionOrderId", "only an issue to production references a production order")
		}
	case MoveIssueToProduction:
		prefix = PrefixIssueToProduction
		if in.FromWarehouse == nil {
			return WarehouseMove{}, nil, inputErr("fromWarehouse", "an issue to production needs the warehouse it leaves")
		}
		if in.ToWarehouse != nil {
			return WarehouseMove{}, nil, inputErr("toWarehouse", "an issue goes to the shop floor, not a warehouse")
		}
		if in.PurchaseOrderID != nil {
			return WarehouseMove{}, nil, inputErr("purchaseOrderId", "only a receipt references a purchase order")
		}
	default:
		return WarehouseMove{}, nil, inputErr("kind", "unknown move kind %q", in.Kind)
	}
	fromID, err := warehouseIDByCode(ctx, tx, "fromWarehouse", in.FromWarehouse)
	if err != nil {
		return WarehouseMove{}, nil, err
	}
	toID, err := warehouseIDByCode(ctx, tx, "toWarehouse", in.ToWarehouse)
	if err != nil {
		return WarehouseMove{}, nil, err
	}
	if in.PurchaseOrderID != nil {
		if err := requireRow(ctx, tx, "purchaseOrderId", "wh_purchase_orders", *in.PurchaseOrderID); err != nil {
			return WarehouseMove{}, nil, err
		}
	}
	if in.ProductionOrderID != nil {
		if err := requireRow(ctx, tx, "productionOrderId", "plan_prod_orders", *in.ProductionOrderID); err != nil {
			return WarehouseMove{}, nil, err
		}
	}
	itemIDs, err := resolveLines(ctx, tx, "lines", in.Lines)
	if err != nil {
		return WarehouseMove{}, nil, err
	}
	return insertWarehouseMove(ctx, tx, actorID, moveRow{
		kind: in.Kind, prefix: prefix, fromID: fromID, toID: toID,
		purchaseOrderID: in.PurchaseOrderID, prodOrderID: in.ProductionOrderID,
	}, itemIDs, in.Lines)
}

// moveRow is a validated wh_moves row before it has a number.
type moveRow struct {
	kind, prefix    string
	fromID, toID    *int64
	purchaseOrderID *int64
	prodOrderID     *int64
	sourceEventID   *int64
}

// insertWarehouseMove writes a validated warehouse move with its number,
// lines and doc.created event and reads it back.
func insertWarehouseMove(ctx context.Context, tx pgx.Tx, actorID *int64, m moveRow, itemIDs []int64, lines []LineInput) (WarehouseMove, []Event, error) {
	no, err := nextNumber(ctx, tx, m.prefix)
	if err != nil {
		return WarehouseMove{}, nil, err
	}
	var id int64
	if err := tx.QueryRow(ctx, `
		INSERT INTO wh_moves (number, kind, from_warehouse_id, to_warehouse_id, purchase_order_id, prod_order_id, source_event_id, created_by)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id`,
		no, m.kind, m.fromID, m.toID, m.purchaseOrderID, m.prodOrderID, m.sourceEventID, actorID).Scan(&id); err != nil {
		return WarehouseMove{}, nil, fmt.Errorf("insert warehouse move %s: %w", no, err)
	}
	if err := insertLines(ctx, tx, warehouseMoveLines, id, itemIDs, lines); err != nil {
		return WarehouseMove{}, nil, err
	}
	ev, err := appendEvent(ctx, tx, actorID, EventDocCreated, EntityWarehouseMoves, id,
		docCreatedPayload{ID: id, No: no, Entity: payloadWarehouseMove})
	if err != nil {
		return WarehouseMove{}, nil, err
	}
	mv, err := WarehouseMoveByID(ctx, tx, id)
	return mv, []Event{ev}, err
}

// SalesOrderByID returns a sales order with its lines, or ErrNotFound.
func SalesOrderByID(ctx context.Context, q Querier, id int64) (SalesOrder, error) {
	so, err := getOne[SalesOrder](ctx, q, `
		SELECT id, number, customer, status, source, external_id, created_at
		FROM sales_orders WHERE id = $1`, id)
	if err != nil {
		return SalesOrder{}, fmt.Errorf("get sales order %d: %w", id, err)
	}
	so.Lines, err = docLines(ctx, q, salesOrderLines, id)
	return so, err
}

func salesOrderByExternalID(ctx context.Context, q Querier, source, externalID string) (SalesOrder, error) {
	var id int64
	if err := q.QueryRow(ctx, `SELECT id FROM sales_orders WHERE source = $1 AND external_id = $2`,
		source, externalID).Scan(&id); err != nil {
		return SalesOrder{}, fmt.Errorf("get %s order %s: %w", source, externalID, translate(err))
	}
	return SalesOrderByID(ctx, q, id)
}

// ProductionOrderByID returns a production order, or ErrNotFound.
func ProductionOrderByID(ctx context.Context, q Querier, id int64) (ProductionOrder, error) {
	po, err := getOne[ProductionOrder](ctx, q, `
		SELECT p.id, p.number, i.sku, i.name AS item_name, i.unit, p.quantity, p.sales_order_id, p.sales_order_line_no, p.status, p.created_at
		FROM plan_prod_orders p JOIN items i ON i.id = p.item_id WHERE p.id = $1`, id)
	if err != nil {
		return ProductionOrder{}, fmt.Errorf("get production order %d: %w", id, err)
	}
	return po, nil
}

// PurchaseOrderByID returns a purchase order with its lines, or ErrNotFound.
func PurchaseOrderByID(ctx context.Context, q Querier, id int64) (PurchaseOrder, error) {
	po, err := getOne[PurchaseOrder](ctx, q, `
		SELECT id, number, supplier, status, created_at FROM wh_purchase_orders WHERE id = $1`, id)
	if err != nil {
		return PurchaseOrder{}, fmt.Errorf("get purchase order %d: %w", id, err)
	}
	po.Lines, err = docLines(ctx, q, purchaseOrderLines, id)
	return po, err
}

// WarehouseMoveByID returns a warehouse move with its lines, or ErrNotFound.
func WarehouseMoveByID(ctx context.Context, q Querier, id int64) (WarehouseMove, error) {
	mv, err := getOne[WarehouseMove](ctx, q, `
		SELECT m.id, m.number, m.kind, wf.code AS from_warehouse, wt.code AS to_warehouse,
		       m.purchase_order_id, m.prod_order_id, m.source_event_id, m.status, m.created_at
		FROM wh_moves m
		LEFT JOIN warehouses wf ON wf.id = m.from_warehouse_id
		LEFT JOIN warehouses wt ON wt.id = m.to_warehouse_id
		WHERE m.id = $1`, id)
	if err != nil {
		return WarehouseMove{}, fmt.Errorf("get warehouse move %d: %w", id, err)
	}
	mv.Lines, err = docLines(ctx, q, warehouseMoveLines, id)
	return mv, err
}

// lineTable names a document's line table and its key column; only the
// constants below are used, so the names are never caller input.
type lineTable struct{ table, docColumn string }

var (
	salesOrderLines    = lineTable{"sales_order_lines", "sales_order_id"}
	purchaseOrderLines = lineTable{"wh_purchase_order_lines", "purchase_order_id"}
	warehouseMoveLines = lineTable{"wh_move_lines", "move_id"}
)

// resolveLines validates lines and returns their item ids in order. field
// is the input path of the list ("lines"); empty means a single line whose
// fields sit at the top level of the input (a production order).
func resolveLines(ctx context.Context, q Querier, field string, lines []LineInput) ([]int64, error) {
	skus, err := validateLines(field, lines)
	if err != nil {
		return nil, err
	}
	return itemIDsBySKU(ctx, q, field, skus)
}

// linePath is the input path of field name of line i (see resolveLines).
func linePath(field string, i int, name string) string {
	if field == "" {
		return name
	}
	return fmt.Sprintf("%s.%d.%s", field, i, name)
}

// validateLines checks lines without the database and returns their SKUs,
// trimmed, in order. field is as for resolveLines.
func validateLines(field string, lines []LineInput) ([]string, error) {
	if len(lines) == 0 {
		return nil, inputErr(field, "at least one line is required")
	}
	if len(lines) > maxLines {
		return nil, inputErr(field, "at most %d lines", maxLines)
	}
	skus := make([]string, len(lines))
	for i, l := range lines {
		skus[i] = strings.TrimSpace(l.SKU)
		if skus[i] == "" {
			return nil, inputErr(linePath(field, i, "sku"), "must not be empty")
		}
		if !l.Quantity.IsPositive() {
			return nil, inputErr(linePath(field, i, "quantity"), "must be greater than 0, got %s", echoDecimal(l.Quantity))
		}
		if -l.Quantity.Exponent() > quantityDecimals {
			return nil, inputErr(linePath(field, i, "quantity"), "at most %d decimal places, got %s", quantityDecimals, echoDecimal(l.Quantity))
		}
		if l.Quantity.GreaterThanOrEqual(decimal.New(1, 15)) {
			return nil, inputErr(linePath(field, i, "quantity"), "too large: at most 15 digits before the decimal point, got %s", echoDecimal(l.Quantity))
		}
		if l.Price != nil {
			if l.Price.IsNegative() {
				return nil, inputErr(linePath(field, i, "price"), "must not be negative, got %s", echoDecimal(*l.Price))
			}
			if -l.Price.Exponent() > priceDecimals {
				return nil, inputErr(linePath(field, i, "price"), "at most %d decimal places, got %s", priceDecimals, echoDecimal(*l.Price))
			}
			if l.Price.GreaterThanOrEqual(decimal.New(1, 16)) {
				return nil, inputErr(linePath(field, i, "price"), "too large: at most 16 digits before the decimal point, got %s", echoDecimal(*l.Price))
			}
		}
	}
	return skus, nil
}

// maxEchoDigits bounds how much of a bad decimal an error message repeats:
// a request may carry a number of thousands of digits.
const maxEchoDigits = 24

// echoDecimal is d as an error message quotes it: in full when short,
// else its first digits and its size ("123456…(5001 digits)").
func echoDecimal(d decimal.Decimal) string {
	s := d.String()
	if len(s) <= maxEchoDigits {
		return s
	}
	return fmt.Sprintf("%s…(%d digits)", s[:maxEchoDigits], len(strings.TrimLeft(strings.ReplaceAll(s, ".", ""), "-")))
}

// itemIDsBySKU returns the item ids of skus in order; an unknown SKU is an
// *InputError on its line's sku field.
func itemIDsBySKU(ctx context.Context, q Querier, field string, skus []string) ([]int64, error) {
	rows, err := q.Query(ctx, `SELECT sku, id FROM items WHERE sku = ANY($1)`, skus)
	if err != nil {
		return nil, fmt.Errorf("resolve items: %w", err)
	}
	type skuID struct {
		SKU string `db:"sku"`
		ID  int64  `db:"id"`
	}
	found, err := pgx.CollectRows(rows, pgx.RowToStructByName[skuID])
	if err != nil {
		return nil, fmt.Errorf("resolve items: %w", err)
	}
	bySKU := make(map[string]int64, len(found))
	for _, f := range found {
		bySKU[f.SKU] = f.ID
	}
	ids := make([]int64, len(skus))
	for i, sku := range skus {
		id, ok := bySKU[sku]
		if !ok {
			return nil, inputErr(linePath(field, i, "sku"), "unknown item %q", sku)
		}
		ids[i] = id
	}
	return ids, nil
}

// insertLines writes lines (already validated by resolveLines) numbered
// from 1 in one statement.
func insertLines(ctx context.Context, tx pgx.Tx, lt lineTable, docID int64, itemIDs []int64, lines []LineInput) error {
	qty, price := lineValues(lines)
	_, err := tx.Exec(ctx, `
		INSERT INTO `+lt.table+` (`+lt.docColumn+`, line_no, item_id, quantity, price)
		SELECT $1, t.ord, t.item, t.qty, t.price
		FROM unnest($2::bigint[], $3::numeric[], $4::numeric[]) WITH ORDINALITY AS t(item, qty, price, ord)`,
		docID, itemIDs, qty, price)
	if err != nil {
		return fmt.Errorf("insert %d lines into %s for %d: %w", len(lines), lt.table, docID, err)
	}
	return nil
}

// lineValues splits lines into the quantity and price arrays the line
// inserts unnest.
func lineValues(lines []LineInput) ([]decimal.Decimal, []*decimal.Decimal) {
	qty := make([]decimal.Decimal, len(lines))
	price := make([]*decimal.Decimal, len(lines))
	for i, l := range lines {
		qty[i], price[i] = l.Quantity, l.Price
	}
	return qty, price
}

func docLines(ctx context.Context, q Querier, lt lineTable, docID int64) ([]DocLine, error) {
	rows, err := q.Query(ctx, `
		SELECT l.line_no, i.sku, i.name AS item_name, i.unit, l.quantity, l.price
		FROM `+lt.table+` l JOIN items i ON i.id = l.item_id
		WHERE l.`+lt.docColumn+` = $1 ORDER BY l.line_no`, docID)
	if err != nil {
		return nil, fmt.Errorf("get lines of %s %d: %w", lt.table, docID, err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowToStructByName[DocLine])
	if err != nil {
		return nil, fmt.Errorf("get lines of %s %d: %w", lt.table, docID, err)
	}
	return lines, nil
}

// requireRow returns an *InputError on field unless table has row id.
// table is always a constant of this package.
func requireRow(ctx context.Context, q Querier, field, table string, id int64) error {
	var ok bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+table+` WHERE id = $1)`, id).Scan(&ok); err != nil {
		return fmt.Errorf("check %s %d: %w", table, id, err)
	}
	if !ok {
		return inputErr(field, "no %s row with id %d", table, id)
	}
	return nil
}

func warehouseIDByCode(ctx context.Context, q Querier, field string, code *string) (*int64, error) {
	if code == nil {
		return nil, nil
	}
	var id int64
	err := q.QueryRow(ctx, `SELECT id FROM warehouses WHERE code = $1`, strings.TrimSpace(*code)).Scan(&id)
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, inputErr(field, "unknown warehouse %q", *code)
		}
		return nil, fmt.Errorf("find warehouse %s: %w", *code, err)
	}
	return &id, nil
}

func requireText(field, s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", inputErr(field, "must not be empty")
	}
	if strings.ContainsRune(s, 0) || !utf8.ValidString(s) {
		return "", inputErr(field, "must be valid UTF-8 text without NUL characters")
	}
	if len([]rune(s)) > maxTextLen {
		return "", inputErr(field, "at most %d characters", maxTextLen)
	}
	return s, nil
}

// getOne runs a query that must return one row and collects it by column
// name; no row is ErrNotFound.
func getOne[T any](ctx context.Context, q Querier, sql string, args ...any) (T, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		var zero T
		return zero, err
	}
	v, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[T])
	return v, translate(err)
}
