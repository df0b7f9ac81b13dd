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

	"erp/db/internal/dbsqlc"
)

// Sales order sources and statuses, as stored in sales_orders.
const (
	SourceManual = "manual"
	SourceShop   = "shop"
	SourceCRM    = "crm"

	MoveReceipt           = "receipt"
	MoveIssueToProduction = "issue_to_production"
	MoveShipment          = "shipment"

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
	LineNo   int32
	SKU      string
	ItemName string
	Unit     string
	Quantity decimal.Decimal
	Price    *decimal.Decimal
}

// SalesOrder is a row of sales_orders with its lines.
type SalesOrder struct {
	ID       int64
	Number   string
	Customer string
	Status   string
	Source   string
	// ExternalID is the shop's sync_id or the CRM's order number; nil for
	// manual orders.
	ExternalID *string
	CreatedAt  time.Time
	// Version is 1 at creation and grows by one with every transition
	// (optimistic concurrency: a transition names the version it saw).
	Version int32
	Lines   []DocLine
}

// ProductionOrder is a row of plan_prod_orders.
type ProductionOrder struct {
	ID           int64
	Number       string
	SKU          string
	ItemName     string
	Unit         string
	Quantity     decimal.Decimal
	SalesOrderID *int64
	Status       string
	CreatedAt    time.Time
	// SalesOrderLineNo is the sales order line the order was planned for
	// (PlanSalesOrder); nil for one created by hand.
	SalesOrderLineNo *int32
	// Version is as SalesOrder's.
	Version int32
}

// PurchaseOrder is a row of wh_purchase_orders with its lines.
type PurchaseOrder struct {
	ID        int64
	Number    string
	Supplier  string
	Status    string
	CreatedAt time.Time
	// Version is as SalesOrder's.
	Version int32
	Lines   []DocLine
}

// WarehouseMove is a row of wh_moves with its lines; warehouses by code.
type WarehouseMove struct {
	ID                int64
	Number            string
	Kind              string
	FromWarehouse     *string
	ToWarehouse       *string
	PurchaseOrderID   *int64
	ProductionOrderID *int64
	Status            string
	CreatedAt         time.Time
	Lines             []DocLine
	// SourceEventID is the journal event an automatic move answers
	// (IssueMaterials); nil for one created by hand.
	SourceEventID *int64
	// Version is as SalesOrder's.
	Version int32
	// SalesOrderID is the sales order a shipment ships.
	SalesOrderID *int64
	// ReversalOfID, on a reversal move, is the move it reverses: its
	// lines are the original's, negated in the stock ledger.
	ReversalOfID *int64
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
// may name its production order; MoveShipment needs FromWarehouse and
// SalesOrderID. Warehouses are given by code. Draft creates the move
// without posting it (no stock moves until PostWarehouseMove).
type WarehouseMoveInput struct {
	Kind              string
	FromWarehouse     *string
	ToWarehouse       *string
	Lines             []LineInput
	PurchaseOrderID   *int64
	ProductionOrderID *int64
	SalesOrderID      *int64
	Draft             bool
}

// docCreatedPayload is a doc.created payload as written; "no" joins it at
// commit, with the document's number (take_document_number, migration
// 00015).
type docCreatedPayload struct {
	ID     int64  `json:"id"`
	Entity string `json:"entity"`
}

// CreateSalesOrder writes a manual sales order (number ЗК-…) with its lines
// and its doc.created event in tx: InsertSalesOrder, then
// NumberSalesOrder, for a caller that needs the number before commit. Bad
// input is an *InputError and writes nothing the caller's rollback would
// not undo.
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
// number; it takes one at commit (the sales_orders_number trigger), or
// earlier from NumberSalesOrder.
type PendingSalesOrder struct {
	order SalesOrder
	event Event
}

// Order is the pending order as written, its number a placeholder until
// commit.
func (p PendingSalesOrder) Order() SalesOrder { return p.order }

// InsertSalesOrder is the first half of CreateSalesOrder: it writes the
// order with a provisional number, its lines and its doc.created event
// (whose payload lacks "no" until then) in one statement, and returns the
// event, for the caller to enqueue its dispatch job. Bad input is an
// *InputError, as for CreateSalesOrder.
//
// The number comes at commit, from a deferred trigger, because taking it
// locks the series row until the transaction ends (that is what keeps the
// series gapless): taken inside COMMIT, the lock is held for the commit's
// WAL flush only, which is what lets concurrent orders through. After
// commit, NumberedSalesOrder reads the order with its number; an exhausted
// series fails the commit (CommitErr makes that ErrConflict).
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

// insertPendingSalesOrder runs SalesOrderInsert for validated input. No
// events and no error means the order of (source, externalID) exists
// already and nothing was written.
func insertPendingSalesOrder(ctx context.Context, tx pgx.Tx, actorID *int64, customer, source string, externalID *string, skus []string, lines []LineInput) (PendingSalesOrder, []Event, error) {
	qty, price := lineValues(lines)
	got, err := queries.SalesOrderInsert(ctx, tx, dbsqlc.SalesOrderInsertParams{
		PendingNumber: pendingNumber(PrefixSalesOrder), Customer: customer, ActorID: actorID, Source: source, ExternalID: externalID,
		Skus: skus, Quantities: qty, Prices: price,
		EventType: EventDocCreated, EventEntity: EntitySalesOrders, PayloadEntity: payloadSalesOrder,
		TraceParent: traceParent(ctx),
	})
	if err != nil {
		return PendingSalesOrder{}, nil, fmt.Errorf("insert %s sales order: %w", source, translate(err))
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
		ID: first.ID, Customer: first.Customer, Status: first.Status,
		Source: first.Source, ExternalID: first.ExternalID, CreatedAt: first.CreatedAt, Version: first.Version,
		Lines: make([]DocLine, len(got)),
	}
	for i, r := range got {
		so.Lines[i] = DocLine{LineNo: r.LineNo, SKU: r.SKU, ItemName: r.ItemName, Unit: r.Unit, Quantity: r.Quantity, Price: r.Price}
	}
	ev := Event{
		ID: first.EventID, Type: first.EventType, Entity: first.EventEntity, EntityID: first.EventEntityID,
		Payload: first.EventPayload, CreatedAt: first.EventCreatedAt, DispatchedAt: first.EventDispatchedAt,
		ProcessedAt: first.EventProcessedAt, FeedSeq: first.EventFeedSeq, ActorID: first.EventActorID,
		ActorLogin: first.ActorLogin, ActorName: first.ActorName, ActorRole: first.ActorRole,
		TraceParent: first.EventTraceParent,
	}
	if first.EventDispatchJobID != nil {
		ev.NewDispatchJobID = *first.EventDispatchJobID
	}
	return PendingSalesOrder{order: so, event: ev}, []Event{ev}, nil
}

// NumberSalesOrder numbers, in tx and now rather than at commit, the
// orders InsertSalesOrder wrote in tx (p among them) and returns p and its
// event as stored, number and "no" included. The series row stays locked
// from here until tx ends, so call it only where the number is needed
// before commit. An exhausted series is ErrConflict.
func NumberSalesOrder(ctx context.Context, tx pgx.Tx, p PendingSalesOrder) (SalesOrder, Event, error) {
	if err := NumberNow(ctx, tx); err != nil {
		return SalesOrder{}, Event{}, fmt.Errorf("number sales order %d: %w", p.order.ID, err)
	}
	return p.read(ctx, tx)
}

// NumberedSalesOrder returns p, committed, with the number and "no" its
// commit gave it, read through q.
func NumberedSalesOrder(ctx context.Context, q Querier, p PendingSalesOrder) (SalesOrder, error) {
	so, _, err := p.read(ctx, q)
	return so, err
}

func (p PendingSalesOrder) read(ctx context.Context, q Querier) (SalesOrder, Event, error) {
	got, err := queries.SalesOrderGetNumber(ctx, q, p.order.ID, p.event.ID)
	if err != nil {
		return SalesOrder{}, Event{}, fmt.Errorf("read number of sales order %d: %w", p.order.ID, translate(err))
	}
	so, ev := p.order, p.event
	so.Number, ev.Payload = got.Number, got.Payload
	return so, ev, nil
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
		if err == nil && isPending(existing.Number) {
			// Written earlier in this transaction (a batch): the answer and
			// a conflict's message name its number, so take it now.
			if err = NumberNow(ctx, tx); err == nil {
				existing, err = salesOrderByExternalID(ctx, tx, in.Source, externalID)
			}
		}
		if err != nil {
			return ReceivedOrder{}, nil, err
		}
		if err := sameOrder(existing, in.Source, externalID, customer, skus, in.Lines); err != nil {
			return ReceivedOrder{}, nil, err
		}
		return ReceivedOrder{Existing: existing, Duplicate: true}, nil, nil
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

// CreateProductionOrder writes a production order (number ПЗ-…) and its
// doc.created event in tx.
func CreateProductionOrder(ctx context.Context, tx pgx.Tx, actorID *int64, in ProductionOrderInput) (ProductionOrder, []Event, error) {
	itemIDs, err := resolveLines(ctx, tx, "", []LineInput{{SKU: in.SKU, Quantity: in.Quantity}})
	if err != nil {
		return ProductionOrder{}, nil, err
	}
	if in.SalesOrderID != nil {
		if err := lockOrderFor(ctx, tx, SalesOrders, "salesOrderId", *in.SalesOrderID, "production orders"); err != nil {
			return ProductionOrder{}, nil, err
		}
	}
	return insertProductionOrder(ctx, tx, actorID, itemIDs[0], in.Quantity, in.SalesOrderID, nil)
}

// insertProductionOrder writes a validated production order with its
// number and doc.created event and reads it back. lineNo, when set, is the
// line of sales order salesOrderID it is planned for.
func insertProductionOrder(ctx context.Context, tx pgx.Tx, actorID *int64, itemID int64, quantity decimal.Decimal, salesOrderID *int64, lineNo *int32) (ProductionOrder, []Event, error) {
	id, err := queries.ProductionOrderInsert(ctx, tx, dbsqlc.ProductionOrderInsertParams{
		Number: pendingNumber(PrefixProductionOrder), ItemID: itemID, Quantity: quantity,
		SalesOrderID: salesOrderID, SalesOrderLineNo: lineNo, CreatedBy: actorID,
	})
	if err != nil {
		return ProductionOrder{}, nil, fmt.Errorf("insert production order: %w", translate(err))
	}
	ev, err := appendEvent(ctx, tx, actorID, EventDocCreated, EntityProdOrders, id,
		docCreatedPayload{ID: id, Entity: payloadProdOrder})
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
	id, err := queries.PurchaseOrderInsert(ctx, tx, pendingNumber(PrefixPurchaseOrder), supplier, actorID)
	if err != nil {
		return PurchaseOrder{}, nil, fmt.Errorf("insert purchase order: %w", translate(err))
	}
	qty, price := lineValues(in.Lines)
	if err := queries.PurchaseOrderLineInsertMany(ctx, tx, id, itemIDs, qty, price); err != nil {
		return PurchaseOrder{}, nil, fmt.Errorf("insert %d lines of purchase order %d: %w", len(in.Lines), id, translate(err))
	}
	ev, err := appendEvent(ctx, tx, actorID, EventDocCreated, EntityPurchaseOrders, id,
		docCreatedPayload{ID: id, Entity: payloadPurchaseOrder})
	if err != nil {
		return PurchaseOrder{}, nil, err
	}
	po, err := PurchaseOrderByID(ctx, tx, id)
	return po, []Event{ev}, err
}

// CreateWarehouseMove writes a warehouse move (ПР-… for a receipt, ВЦ-… for
// an issue to production, ОТ-… for a shipment) with its lines and
// doc.created event in tx. Unless in.Draft it is created posted: its stock
// ledger rows and balances are written too (postMove), and a line that
// would take on hand below zero is an *InputError on lines.N.quantity. A
// posted shipment that covers its sales order ships it, a posted receipt
// of a purchase order moves that to partially_received or received (each
// journaling doc.status_changed by actorID).
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
	case MoveShipment:
		prefix = PrefixShipment
		if in.FromWarehouse == nil {
			return WarehouseMove{}, nil, inputErr("fromWarehouse", "a shipment needs the warehouse it leaves")
		}
		if in.ToWarehouse != nil {
			return WarehouseMove{}, nil, inputErr("toWarehouse", "a shipment goes to the customer, not a warehouse")
		}
		if in.SalesOrderID == nil {
			return WarehouseMove{}, nil, inputErr("salesOrderId", "a shipment needs the sales order it ships")
		}
		if in.PurchaseOrderID != nil {
			return WarehouseMove{}, nil, inputErr("purchaseOrderId", "only a receipt references a purchase order")
		}
		if in.ProductionOrderID != nil {
			return WarehouseMove{}, nil, inputErr("productionOrderId", "only an issue to production references a production order")
		}
	default:
		return WarehouseMove{}, nil, inputErr("kind", "unknown move kind %q", in.Kind)
	}
	if in.SalesOrderID != nil && in.Kind != MoveShipment {
		return WarehouseMove{}, nil, inputErr("salesOrderId", "only a shipment references a sales order")
	}
	fromID, err := warehouseIDByCode(ctx, tx, "fromWarehouse", in.FromWarehouse)
	if err != nil {
		return WarehouseMove{}, nil, err
	}
	toID, err := warehouseIDByCode(ctx, tx, "toWarehouse", in.ToWarehouse)
	if err != nil {
		return WarehouseMove{}, nil, err
	}
	// The order a move refers to is locked before the stock balances and
	// the number series (the lock order, see LockDocument), so that no
	// posting waits on another in a circle.
	if in.PurchaseOrderID != nil {
		if err := lockOrderFor(ctx, tx, PurchaseOrders, "purchaseOrderId", *in.PurchaseOrderID, "warehouse moves"); err != nil {
			return WarehouseMove{}, nil, err
		}
	}
	if in.SalesOrderID != nil {
		if err := lockOrderFor(ctx, tx, SalesOrders, "salesOrderId", *in.SalesOrderID, "warehouse moves"); err != nil {
			return WarehouseMove{}, nil, err
		}
	}
	if in.ProductionOrderID != nil {
		if err := lockOrderFor(ctx, tx, ProductionOrders, "productionOrderId", *in.ProductionOrderID, "warehouse moves"); err != nil {
			return WarehouseMove{}, nil, err
		}
	}
	itemIDs, err := resolveLines(ctx, tx, "lines", in.Lines)
	if err != nil {
		return WarehouseMove{}, nil, err
	}
	status := MovePosted
	if in.Draft {
		status = MoveDraft
	}
	return insertWarehouseMove(ctx, tx, actorID, moveRow{
		kind: in.Kind, prefix: prefix, status: status, fromID: fromID, toID: toID,
		purchaseOrderID: in.PurchaseOrderID, prodOrderID: in.ProductionOrderID, salesOrderID: in.SalesOrderID,
	}, itemIDs, in.Lines)
}

// lockOrderFor locks order id of kind k (a purchase, sales or production
// order) that a new document (what: "warehouse moves") refers to, on input
// field field: an unknown id, or an order that takes no more of them
// (cancelled, closed, shipped, completed), is an *InputError on field.
func lockOrderFor(ctx context.Context, tx pgx.Tx, k *DocKind, field string, id int64, what string) error {
	d, err := LockDocument(ctx, tx, k, id)
	if errors.Is(err, ErrNotFound) {
		return inputErr(field, "no %s with id %d", k.Noun, id)
	}
	if err != nil {
		return err
	}
	if finished(d.Status) {
		return inputErr(field, "%s %s is %s: it takes no more %s", k.Noun, d.Number, d.Status, what)
	}
	return nil
}

// finished reports an order status after which an order takes no more
// documents: cancelled (any kind), shipped, closed, completed.
func finished(status string) bool {
	switch status {
	case SalesOrderCancelled, SalesOrderShipped, PurchaseClosed, ProductionCompleted: // the other kinds' cancelled is SalesOrderCancelled
		return true
	}
	return false
}

// moveRow is a validated wh_moves row before it has a number.
type moveRow struct {
	kind, prefix    string
	status          string
	fromID, toID    *int64
	purchaseOrderID *int64
	prodOrderID     *int64
	salesOrderID    *int64
	sourceEventID   *int64
	reversalOfID    *int64
}

// insertWarehouseMove writes a validated warehouse move with its number,
// lines and doc.created event, posts it when its status is posted, and
// reads it back.
func insertWarehouseMove(ctx context.Context, tx pgx.Tx, actorID *int64, m moveRow, itemIDs []int64, lines []LineInput) (WarehouseMove, []Event, error) {
	id, err := queries.WarehouseMoveInsert(ctx, tx, dbsqlc.WarehouseMoveInsertParams{
		Number: pendingNumber(m.prefix), Kind: m.kind, FromWarehouseID: m.fromID, ToWarehouseID: m.toID,
		PurchaseOrderID: m.purchaseOrderID, ProdOrderID: m.prodOrderID, SourceEventID: m.sourceEventID,
		CreatedBy: actorID, Status: m.status, SalesOrderID: m.salesOrderID, ReversalOfID: m.reversalOfID,
	})
	if err != nil {
		return WarehouseMove{}, nil, fmt.Errorf("insert %s warehouse move: %w", m.kind, translate(err))
	}
	qty, price := lineValues(lines)
	if err := queries.WarehouseMoveLineInsertMany(ctx, tx, id, itemIDs, qty, price); err != nil {
		return WarehouseMove{}, nil, fmt.Errorf("insert %d lines of warehouse move %d: %w", len(lines), id, translate(err))
	}
	ev, err := appendEvent(ctx, tx, actorID, EventDocCreated, EntityWarehouseMoves, id,
		docCreatedPayload{ID: id, Entity: payloadWarehouseMove})
	if err != nil {
		return WarehouseMove{}, nil, err
	}
	events := []Event{ev}
	mv, err := WarehouseMoveByID(ctx, tx, id)
	if err != nil {
		return WarehouseMove{}, nil, err
	}
	if m.status == MovePosted {
		more, err := postMove(ctx, tx, actorID, mv)
		if err != nil {
			return WarehouseMove{}, nil, err
		}
		events = append(events, more...)
	}
	return mv, events, nil
}

// SalesOrderByID returns a sales order with its lines, or ErrNotFound.
func SalesOrderByID(ctx context.Context, q Querier, id int64) (SalesOrder, error) {
	r, err := queries.SalesOrderGetByID(ctx, q, id)
	if err != nil {
		return SalesOrder{}, fmt.Errorf("get sales order %d: %w", id, translate(err))
	}
	lines, err := queries.SalesOrderLineList(ctx, q, id)
	if err != nil {
		return SalesOrder{}, fmt.Errorf("get lines of sales order %d: %w", id, translate(err))
	}
	return SalesOrder{
		ID: r.ID, Number: r.Number, Customer: r.Customer, Status: r.Status, Source: r.Source,
		ExternalID: r.ExternalID, CreatedAt: r.CreatedAt, Version: r.Version, Lines: docLines(lines),
	}, nil
}

func salesOrderByExternalID(ctx context.Context, q Querier, source, externalID string) (SalesOrder, error) {
	id, err := queries.SalesOrderGetIDByExternalID(ctx, q, source, &externalID)
	if err != nil {
		return SalesOrder{}, fmt.Errorf("get %s order %s: %w", source, externalID, translate(err))
	}
	return SalesOrderByID(ctx, q, id)
}

// ProductionOrderByID returns a production order, or ErrNotFound.
func ProductionOrderByID(ctx context.Context, q Querier, id int64) (ProductionOrder, error) {
	r, err := queries.ProductionOrderGetByID(ctx, q, id)
	if err != nil {
		return ProductionOrder{}, fmt.Errorf("get production order %d: %w", id, translate(err))
	}
	return ProductionOrder(r), nil
}

// PurchaseOrderByID returns a purchase order with its lines, or ErrNotFound.
func PurchaseOrderByID(ctx context.Context, q Querier, id int64) (PurchaseOrder, error) {
	r, err := queries.PurchaseOrderGetByID(ctx, q, id)
	if err != nil {
		return PurchaseOrder{}, fmt.Errorf("get purchase order %d: %w", id, translate(err))
	}
	lines, err := queries.PurchaseOrderLineList(ctx, q, id)
	if err != nil {
		return PurchaseOrder{}, fmt.Errorf("get lines of purchase order %d: %w", id, translate(err))
	}
	return PurchaseOrder{
		ID: r.ID, Number: r.Number, Supplier: r.Supplier, Status: r.Status, CreatedAt: r.CreatedAt,
		Version: r.Version, Lines: docLines(lines),
	}, nil
}

// WarehouseMoveByID returns a warehouse move with its lines, or ErrNotFound.
func WarehouseMoveByID(ctx context.Context, q Querier, id int64) (WarehouseMove, error) {
	r, err := queries.WarehouseMoveGetByID(ctx, q, id)
	if err != nil {
		return WarehouseMove{}, fmt.Errorf("get warehouse move %d: %w", id, translate(err))
	}
	lines, err := queries.WarehouseMoveLineList(ctx, q, id)
	if err != nil {
		return WarehouseMove{}, fmt.Errorf("get lines of warehouse move %d: %w", id, translate(err))
	}
	mv := moveFrom(r)
	mv.Lines = docLines(lines)
	return mv, nil
}

// WarehouseMovesByIDs returns the warehouse moves ids with their lines, in
// no order, in two statements whatever their number; an unknown id is left
// out.
func WarehouseMovesByIDs(ctx context.Context, q Querier, ids []int64) ([]WarehouseMove, error) {
	rows, err := queries.WarehouseMoveListByIDs(ctx, q, ids)
	if err != nil {
		return nil, fmt.Errorf("get %d warehouse moves: %w", len(ids), translate(err))
	}
	moves := mapRows(rows, func(r dbsqlc.WarehouseMoveListByIDsRow) WarehouseMove {
		return moveFrom(dbsqlc.WarehouseMoveGetByIDRow(r))
	})
	if err := addMoveLines(ctx, q, moves); err != nil {
		return nil, err
	}
	return moves, nil
}

// moveFrom maps a wh_moves row with its warehouses' codes; Lines is empty.
func moveFrom(r dbsqlc.WarehouseMoveGetByIDRow) WarehouseMove {
	return WarehouseMove{
		ID: r.ID, Number: r.Number, Kind: r.Kind, FromWarehouse: r.FromWarehouse, ToWarehouse: r.ToWarehouse,
		PurchaseOrderID: r.PurchaseOrderID, ProductionOrderID: r.ProdOrderID, SourceEventID: r.SourceEventID,
		Status: r.Status, CreatedAt: r.CreatedAt, Version: r.Version, Lines: []DocLine{},
		SalesOrderID: r.SalesOrderID, ReversalOfID: r.ReversalOfID,
	}
}

// addMoveLines reads the lines of moves in one statement and appends them
// to each move in line order.
func addMoveLines(ctx context.Context, q Querier, moves []WarehouseMove) error {
	if len(moves) == 0 {
		return nil
	}
	at := make(map[int64]int, len(moves))
	ids := make([]int64, len(moves))
	for i, m := range moves {
		ids[i], at[m.ID] = m.ID, i
	}
	lines, err := queries.WarehouseMoveLineListByMoves(ctx, q, ids)
	if err != nil {
		return fmt.Errorf("list lines of %d warehouse moves: %w", len(ids), translate(err))
	}
	for _, l := range lines {
		m := &moves[at[l.MoveID]]
		m.Lines = append(m.Lines, DocLine{LineNo: l.LineNo, SKU: l.SKU, ItemName: l.ItemName, Unit: l.Unit, Quantity: l.Quantity, Price: l.Price})
	}
	return nil
}

// lineRow is a document line as the line list queries return it, with
// DocLine's fields.
type lineRow interface {
	dbsqlc.SalesOrderLineListRow | dbsqlc.PurchaseOrderLineListRow | dbsqlc.WarehouseMoveLineListRow
}

func docLines[R lineRow](rows []R) []DocLine {
	lines := make([]DocLine, len(rows))
	for i, r := range rows {
		lines[i] = DocLine(r)
	}
	return lines
}

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
	found, err := queries.ItemListIDsBySKU(ctx, q, skus)
	if err != nil {
		return nil, fmt.Errorf("resolve %d items: %w", len(skus), translate(err))
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

// lineValues splits lines into the quantity and price arrays the line
// inserts unnest; a line without a price has "" (the inserts' NULL).
func lineValues(lines []LineInput) ([]decimal.Decimal, []string) {
	qty := make([]decimal.Decimal, len(lines))
	price := make([]string, len(lines))
	for i, l := range lines {
		qty[i] = l.Quantity
		if l.Price != nil {
			price[i] = l.Price.String()
		}
	}
	return qty, price
}

func warehouseIDByCode(ctx context.Context, q Querier, field string, code *string) (*int64, error) {
	if code == nil {
		return nil, nil
	}
	id, err := queries.WarehouseGetIDByCode(ctx, q, strings.TrimSpace(*code))
	if err = translate(err); err != nil {
		if errors.Is(err, ErrNotFound) {
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

// sameOrder checks that an order sent again under a (source, external id)
// received before is the same order: the customer and every line's item,
// quantity and price. A difference is a conflicting *InputError naming
// the first field that differs, since taking it as a duplicate would drop
// the change silently. It names the field only, never the stored value:
// a sender learns nothing of an order it does not already know.
func sameOrder(existing SalesOrder, source, externalID, customer string, skus []string, lines []LineInput) error {
	differs := func(field, what string) error {
		return conflictOn(field, "%s differs from %s order %s as first received (%s)", what, source, externalID, existing.Number)
	}
	if existing.Customer != customer {
		return differs("customer", "the customer")
	}
	if len(existing.Lines) != len(lines) {
		return differs("lines", "the number of lines")
	}
	for i, l := range existing.Lines {
		in := lines[i]
		switch {
		case l.SKU != skus[i]:
			return differs(linePath("lines", i, "sku"), fmt.Sprintf("the item of line %d", i+1))
		case !l.Quantity.Equal(in.Quantity):
			return differs(linePath("lines", i, "quantity"), fmt.Sprintf("the quantity of line %d", i+1))
		case (l.Price == nil) != (in.Price == nil) || (l.Price != nil && !l.Price.Equal(*in.Price)):
			return differs(linePath("lines", i, "price"), fmt.Sprintf("the price of line %d", i+1))
		}
	}
	return nil
}
