package db

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"erp/db/internal/dbsqlc"
)

const (
	maxStockPage          = 500
	stockBalanceCursorTag = "b1"
	stockLedgerCursorTag  = "l1"
)

// movePrefixes is the number series of each move kind; a reversal takes
// its number from its original's series.
var movePrefixes = map[string]string{
	MoveReceipt:           PrefixReceipt,
	MoveIssueToProduction: PrefixIssueToProduction,
	MoveShipment:          PrefixShipment,
}

// stockKey is one balance row: an item at a warehouse.
type stockKey struct{ item, warehouse int64 }

func compareStockKeys(a, b stockKey) int {
	return cmp.Or(cmp.Compare(a.item, b.item), cmp.Compare(a.warehouse, b.warehouse))
}

// ledgerEntry is one stock_ledger row a posting writes.
type ledgerEntry struct {
	line      dbsqlc.WarehouseMoveLineListToPostRow
	key       stockKey
	warehouse string
	quantity  decimal.Decimal // signed
	after     decimal.Decimal
}

// postMove writes the stock ledger rows of move mv, whose status is posted
// in tx already, and updates stock_balances: every line takes its quantity
// out of the from warehouse and puts it into the to warehouse, negated for
// a reversal. Balance rows are locked in (item, warehouse) order, so two
// postings over the same items never deadlock. A line that would take on
// hand below zero is an *InputError on lines.N.quantity naming what is on
// hand; the caller's rollback then undoes the whole move.
//
// A shipment (not a reversal) is checked against its sales order first:
// an item not ordered or more than the order's open quantity is an
// *InputError; when the shipment covers the order it goes shipped. A
// receipt of a purchase order moves it to partially_received or received.
// Both transitions are journaled (doc.status_changed by actorID) and
// their events returned.
func postMove(ctx context.Context, tx pgx.Tx, actorID *int64, mv WarehouseMove) ([]Event, error) {
	lines, err := queries.WarehouseMoveLineListToPost(ctx, tx, mv.ID)
	if err != nil {
		return nil, fmt.Errorf("lines to post of warehouse move %s: %w", mv.Number, translate(err))
	}
	reversal := mv.ReversalOfID != nil
	var followUp func() ([]Event, error)
	switch {
	case reversal:
	case mv.Kind == MoveShipment && mv.SalesOrderID != nil:
		if followUp, err = checkShipment(ctx, tx, actorID, mv, lines); err != nil {
			return nil, err
		}
	case mv.Kind == MoveReceipt && mv.PurchaseOrderID != nil:
		if followUp, err = checkReceipt(ctx, tx, actorID, mv, lines); err != nil {
			return nil, err
		}
	case mv.Kind == MoveIssueToProduction && mv.ProductionOrderID != nil:
		// No materials go to an order that was cancelled or is done.
		if _, err := lockOrderToPost(ctx, tx, ProductionOrders, *mv.ProductionOrderID); err != nil {
			return nil, err
		}
	}

	var entries []ledgerEntry
	for _, l := range lines {
		q := l.Quantity
		if reversal {
			q = q.Neg()
		}
		if l.FromWarehouseID != nil {
			entries = append(entries, ledgerEntry{line: l, key: stockKey{l.ItemID, *l.FromWarehouseID},
				warehouse: *l.FromWarehouse, quantity: q.Neg()})
		}
		if l.ToWarehouseID != nil {
			entries = append(entries, ledgerEntry{line: l, key: stockKey{l.ItemID, *l.ToWarehouseID},
				warehouse: *l.ToWarehouse, quantity: q})
		}
	}
	keys := make([]stockKey, 0, len(entries))
	for _, e := range entries {
		keys = append(keys, e.key)
	}
	slices.SortFunc(keys, compareStockKeys)
	keys = slices.Compact(keys)
	itemIDs, warehouseIDs := make([]int64, len(keys)), make([]int64, len(keys))
	for i, k := range keys {
		itemIDs[i], warehouseIDs[i] = k.item, k.warehouse
	}
	if err := queries.StockBalanceEnsure(ctx, tx, itemIDs, warehouseIDs); err != nil {
		return nil, fmt.Errorf("create stock balances for warehouse move %s: %w", mv.Number, translate(err))
	}
	locked, err := queries.StockBalanceLock(ctx, tx, itemIDs, warehouseIDs)
	if err != nil {
		return nil, fmt.Errorf("lock stock balances for warehouse move %s: %w", mv.Number, translate(err))
	}
	if len(locked) != len(keys) {
		return nil, fmt.Errorf("lock stock balances for warehouse move %s: %d rows locked, want %d", mv.Number, len(locked), len(keys))
	}
	onHand := make(map[stockKey]decimal.Decimal, len(locked))
	for _, b := range locked {
		onHand[stockKey{b.ItemID, b.WarehouseID}] = b.OnHand
	}
	for i := range entries {
		e := &entries[i]
		before := onHand[e.key]
		e.after = before.Add(e.quantity)
		if e.after.IsNegative() {
			return nil, inputErr(fmt.Sprintf("lines.%d.quantity", e.line.LineNo-1),
				"only %s %s of %s on hand at warehouse %s, the line takes %s", before.StringFixed(quantityDecimals),
				e.line.Unit, e.line.SKU, e.warehouse, e.quantity.Neg().StringFixed(quantityDecimals))
		}
		onHand[e.key] = e.after
	}

	p := dbsqlc.StockLedgerInsertManyParams{MoveID: mv.ID}
	for _, e := range entries {
		p.LineNos = append(p.LineNos, e.line.LineNo)
		p.ItemIds = append(p.ItemIds, e.key.item)
		p.WarehouseIds = append(p.WarehouseIds, e.key.warehouse)
		p.Quantities = append(p.Quantities, e.quantity)
		p.BalancesAfter = append(p.BalancesAfter, e.after)
	}
	if err := queries.StockLedgerInsertMany(ctx, tx, p); err != nil {
		return nil, fmt.Errorf("write stock ledger of warehouse move %s: %w", mv.Number, translate(err))
	}
	balances := make([]decimal.Decimal, len(keys))
	for i, k := range keys {
		balances[i] = onHand[k]
	}
	if err := queries.StockBalanceSetMany(ctx, tx, itemIDs, warehouseIDs, balances); err != nil {
		return nil, fmt.Errorf("update stock balances for warehouse move %s: %w", mv.Number, translate(err))
	}
	if followUp == nil {
		return nil, nil
	}
	return followUp()
}

// lockOrderToPost locks order id of kind k that a move is about to be
// posted against; an order that takes no more moves is a
// *StatusConflictError with that order's status and version.
func lockOrderToPost(ctx context.Context, tx pgx.Tx, k *DocKind, id int64) (LockedDocument, error) {
	d, err := LockDocument(ctx, tx, k, id)
	if err != nil {
		return LockedDocument{}, err
	}
	if finished(d.Status) {
		// The order's state is what refuses the move: report it.
		return LockedDocument{}, d.Conflict("%s %s is %s: it takes no more warehouse moves", k.Noun, d.Number, d.Status)
	}
	return d, nil
}

// checkShipment locks the sales order of shipment mv and checks every
// line against what is open of the order: an item it does not order is an
// *InputError on lines.N.sku, more than is open on lines.N.quantity. The
// returned function ships the order when the shipment covers it.
func checkShipment(ctx context.Context, tx pgx.Tx, actorID *int64, mv WarehouseMove, lines []dbsqlc.WarehouseMoveLineListToPostRow) (func() ([]Event, error), error) {
	so, err := lockOrderToPost(ctx, tx, SalesOrders, *mv.SalesOrderID)
	if err != nil {
		return nil, err
	}
	ordered, err := sumByItem(queries.SalesOrderLineSumByItem(ctx, tx, so.ID))
	if err != nil {
		return nil, fmt.Errorf("lines of sales order %s: %w", so.Number, err)
	}
	shipped, err := sumByItem(queries.WarehouseMoveShippedBySalesOrder(ctx, tx, &so.ID, mv.ID))
	if err != nil {
		return nil, fmt.Errorf("shipments of sales order %s: %w", so.Number, err)
	}
	if err := takeOpen(so, lines, ordered, shipped, "open to ship, the line takes"); err != nil {
		return nil, err
	}
	return func() ([]Event, error) {
		if !covers(ordered, shipped) || !so.Kind.Allows(so.Status, SalesOrderShipped) {
			return nil, nil
		}
		_, ev, err := so.MoveTo(ctx, tx, actorID, SalesOrderShipped, nil)
		if err != nil {
			return nil, err
		}
		return []Event{ev}, nil
	}, nil
}

// checkReceipt locks the purchase order of receipt mv and checks every
// line against what is open of the order: an item it does not order is an
// *InputError on lines.N.sku, more than is still to come on
// lines.N.quantity. The returned function moves the order to received when
// its posted receipts cover every line, else to partially_received.
func checkReceipt(ctx context.Context, tx pgx.Tx, actorID *int64, mv WarehouseMove, lines []dbsqlc.WarehouseMoveLineListToPostRow) (func() ([]Event, error), error) {
	po, err := lockOrderToPost(ctx, tx, PurchaseOrders, *mv.PurchaseOrderID)
	if err != nil {
		return nil, err
	}
	ordered, err := sumByItem(queries.PurchaseOrderLineSumByItem(ctx, tx, po.ID))
	if err != nil {
		return nil, fmt.Errorf("lines of purchase order %s: %w", po.Number, err)
	}
	received, err := sumByItem(queries.WarehouseMoveReceivedByPurchaseOrder(ctx, tx, &po.ID, mv.ID))
	if err != nil {
		return nil, fmt.Errorf("receipts of purchase order %s: %w", po.Number, err)
	}
	if err := takeOpen(po, lines, ordered, received, "still to receive, the line brings"); err != nil {
		return nil, err
	}
	return func() ([]Event, error) {
		to := receiptStatus(ordered, received)
		if po.Status == to || !po.Kind.Allows(po.Status, to) {
			return nil, nil
		}
		_, ev, err := po.MoveTo(ctx, tx, actorID, to, nil)
		if err != nil {
			return nil, err
		}
		return []Event{ev}, nil
	}, nil
}

// takeOpen checks the lines of a move against order d: an item the order
// does not order is an *InputError on lines.N.sku, a quantity above what
// is open of it (ordered less done) one on lines.N.quantity, worded
// "<open> <unit> of <sku> " + openText + " <quantity>". Each line taken is
// added to done.
func takeOpen(d LockedDocument, lines []dbsqlc.WarehouseMoveLineListToPostRow, ordered, done map[int64]decimal.Decimal, openText string) error {
	for _, l := range lines {
		want, ok := ordered[l.ItemID]
		if !ok {
			return inputErr(fmt.Sprintf("lines.%d.sku", l.LineNo-1), "%s %s orders no %s", d.Kind.Noun, d.Number, l.SKU)
		}
		open := want.Sub(done[l.ItemID])
		if l.Quantity.GreaterThan(open) {
			return inputErr(fmt.Sprintf("lines.%d.quantity", l.LineNo-1), "%s %s has %s %s of %s %s %s", d.Kind.Noun, d.Number,
				open.StringFixed(quantityDecimals), l.Unit, l.SKU, openText, l.Quantity.StringFixed(quantityDecimals))
		}
		done[l.ItemID] = done[l.ItemID].Add(l.Quantity)
	}
	return nil
}

// covers reports whether done reaches ordered for every item.
func covers(ordered, done map[int64]decimal.Decimal) bool {
	for item, want := range ordered {
		if done[item].LessThan(want) {
			return false
		}
	}
	return true
}

// receiptStatus is the status a purchase order's posted receipts (received)
// give it: received when they cover every line, open when there are none,
// else partially_received.
func receiptStatus(ordered, received map[int64]decimal.Decimal) string {
	switch {
	case covers(ordered, received):
		return PurchaseReceived
	case len(received) == 0:
		return PurchaseOpen
	}
	return PurchasePartiallyReceived
}

type itemSum interface {
	dbsqlc.SalesOrderLineSumByItemRow | dbsqlc.PurchaseOrderLineSumByItemRow |
		dbsqlc.WarehouseMoveShippedBySalesOrderRow | dbsqlc.WarehouseMoveReceivedByPurchaseOrderRow
}

// sumByItem maps the rows of a per-item sum query to item id → quantity.
func sumByItem[R itemSum](rows []R, err error) (map[int64]decimal.Decimal, error) {
	if err != nil {
		return nil, translate(err)
	}
	out := make(map[int64]decimal.Decimal, len(rows))
	for _, r := range rows {
		s := dbsqlc.SalesOrderLineSumByItemRow(r)
		out[s.ItemID] = s.Quantity
	}
	return out, nil
}

// CancelWarehouseMove discards draft move id, seen at version, for reason
// (required, at most 200 characters): draft → cancelled, journaling
// doc.status_changed; it never touched stock, so nothing else changes. A
// posted move is reversed instead (*StatusConflictError). It returns the
// move as stored.
func CancelWarehouseMove(ctx context.Context, tx pgx.Tx, actorID *int64, id int64, version int32, reason string) (WarehouseMove, []Event, error) {
	why, err := requireText("reason", reason)
	if err != nil {
		return WarehouseMove{}, nil, err
	}
	_, ev, err := Transition(ctx, tx, actorID, WarehouseMoves, id, version, MoveCancelled, &why)
	if err != nil {
		return WarehouseMove{}, nil, err
	}
	mv, err := WarehouseMoveByID(ctx, tx, id)
	return mv, []Event{ev}, err
}

// PostWarehouseMove posts draft move id, seen at version: draft → posted,
// journaling doc.status_changed, then the stock ledger and balances as
// CreateWarehouseMove writes them for a move created posted (with the same
// errors). Of two clients posting one draft, the second waits for the
// first and gets a *StatusConflictError. It returns the move as stored.
func PostWarehouseMove(ctx context.Context, tx pgx.Tx, actorID *int64, id int64, version int32) (WarehouseMove, []Event, error) {
	_, ev, err := Transition(ctx, tx, actorID, WarehouseMoves, id, version, MovePosted, nil)
	if err != nil {
		return WarehouseMove{}, nil, err
	}
	mv, err := WarehouseMoveByID(ctx, tx, id)
	if err != nil {
		return WarehouseMove{}, nil, err
	}
	more, err := postMove(ctx, tx, actorID, mv)
	if err != nil {
		return WarehouseMove{}, nil, err
	}
	return mv, append([]Event{ev}, more...), nil
}

// ReverseWarehouseMove reverses posted move id, seen at version, for
// reason (1…200 characters): the move goes reversed (doc.status_changed
// with the reason) and a reversal move is written and posted, with its own
// number in the same series, its doc.created, the original's lines and
// warehouses and reversal_of_id pointing at it, so that its ledger rows
// negate the original's. Taking back a receipt can fail on stock like any
// posting (*InputError on lines.N.quantity). A reversal, a reversed move or
// a draft is a *StatusConflictError. The order the move served goes back
// as far as the move had taken it: a shipped sales order to the status it
// had before, a purchase order to what its remaining receipts cover (each
// journaled with the reason). It returns the reversal move.
func ReverseWarehouseMove(ctx context.Context, tx pgx.Tx, actorID *int64, id int64, version int32, reason string) (WarehouseMove, []Event, error) {
	why, err := requireText("reason", reason)
	if err != nil {
		return WarehouseMove{}, nil, err
	}
	d, err := LockDocumentAt(ctx, tx, WarehouseMoves, id, version)
	if err != nil {
		return WarehouseMove{}, nil, err
	}
	orig, err := WarehouseMoveByID(ctx, tx, id)
	if err != nil {
		return WarehouseMove{}, nil, err
	}
	if orig.ReversalOfID != nil {
		return WarehouseMove{}, nil, d.Conflict("warehouse move %s is a reversal: it cannot be reversed, post a new move instead", d.Number)
	}
	// The order the move served is locked before the reversal is posted
	// (stock balances): the lock order of every posting (order, then
	// balances), so that a reversal and a new move of one order never wait
	// on each other in a circle.
	var reopen func() ([]Event, error)
	switch {
	case orig.Kind == MoveShipment && orig.SalesOrderID != nil:
		if reopen, err = reopenSalesOrder(ctx, tx, actorID, *orig.SalesOrderID, orig.Number, why); err != nil {
			return WarehouseMove{}, nil, err
		}
	case orig.Kind == MoveReceipt && orig.PurchaseOrderID != nil:
		if reopen, err = reopenPurchaseOrder(ctx, tx, actorID, *orig.PurchaseOrderID, orig.Number, why); err != nil {
			return WarehouseMove{}, nil, err
		}
	}
	_, ev, err := d.MoveTo(ctx, tx, actorID, MoveReversed, &why)
	if err != nil {
		return WarehouseMove{}, nil, err
	}
	lines, err := queries.WarehouseMoveLineListToPost(ctx, tx, id)
	if err != nil {
		return WarehouseMove{}, nil, fmt.Errorf("lines of warehouse move %s: %w", d.Number, translate(err))
	}
	itemIDs := make([]int64, len(lines))
	in := make([]LineInput, len(lines))
	for i, l := range lines {
		itemIDs[i], in[i] = l.ItemID, LineInput{SKU: l.SKU, Quantity: l.Quantity, Price: l.Price}
	}
	rev, events, err := insertWarehouseMove(ctx, tx, actorID, moveRow{
		kind: orig.Kind, prefix: movePrefixes[orig.Kind], status: MovePosted,
		fromID: lines[0].FromWarehouseID, toID: lines[0].ToWarehouseID,
		purchaseOrderID: orig.PurchaseOrderID, prodOrderID: orig.ProductionOrderID, salesOrderID: orig.SalesOrderID,
		reversalOfID: &id,
	}, itemIDs, in)
	if err != nil {
		return WarehouseMove{}, nil, err
	}
	events = append([]Event{ev}, events...)
	if reopen != nil {
		more, err := reopen()
		if err != nil {
			return WarehouseMove{}, nil, err
		}
		events = append(events, more...)
	}
	return rev, events, nil
}

// reopenSalesOrder locks sales order id, whose shipment no is being
// reversed; the returned function, run once the reversal is posted, moves
// a shipped order back to the status it had before it was shipped (from
// its journal), journaled by actorID with the reversal's reason.
func reopenSalesOrder(ctx context.Context, tx pgx.Tx, actorID *int64, id int64, no, why string) (func() ([]Event, error), error) {
	so, err := LockDocument(ctx, tx, SalesOrders, id)
	if err != nil {
		return nil, err
	}
	return func() ([]Event, error) {
		if so.Status != SalesOrderShipped {
			return nil, nil
		}
		before, err := queries.SalesOrderGetStatusBeforeShipped(ctx, tx, id)
		if err != nil {
			return nil, fmt.Errorf("status of sales order %s before it shipped: %w", so.Number, translate(err))
		}
		_, ev, err := so.MoveBack(ctx, tx, actorID, before, no, why)
		if err != nil {
			return nil, err
		}
		return []Event{ev}, nil
	}, nil
}

// reopenPurchaseOrder locks purchase order id, whose receipt no is being
// reversed; the returned function, run once the reversal is posted, moves
// a received or partially received order to what its remaining posted
// receipts cover (partially_received, or open with none), journaled by
// actorID with the reversal's reason. A closed or cancelled order keeps
// its status.
func reopenPurchaseOrder(ctx context.Context, tx pgx.Tx, actorID *int64, id int64, no, why string) (func() ([]Event, error), error) {
	po, err := LockDocument(ctx, tx, PurchaseOrders, id)
	if err != nil {
		return nil, err
	}
	return func() ([]Event, error) {
		if po.Status != PurchaseReceived && po.Status != PurchasePartiallyReceived {
			return nil, nil
		}
		received, err := sumByItem(queries.WarehouseMoveReceivedByPurchaseOrder(ctx, tx, &po.ID, 0))
		if err != nil {
			return nil, fmt.Errorf("receipts of purchase order %s: %w", po.Number, err)
		}
		ordered, err := sumByItem(queries.PurchaseOrderLineSumByItem(ctx, tx, po.ID))
		if err != nil {
			return nil, fmt.Errorf("lines of purchase order %s: %w", po.Number, err)
		}
		to := receiptStatus(ordered, received)
		if to == po.Status {
			return nil, nil
		}
		_, ev, err := po.MoveBack(ctx, tx, actorID, to, no, why)
		if err != nil {
			return nil, err
		}
		return []Event{ev}, nil
	}, nil
}

// CompleteProductionOrder completes released production order id, seen at
// version: released → completed (doc.status_changed), and a receipt ПР of
// quantity (nil: the ordered quantity; > 0, at most 3 decimals) of the
// finished item into warehouse toWarehouse, posted, referencing the
// order, with its doc.created and stock ledger rows, all in tx. An unknown
// warehouse or a bad quantity is an *InputError. It returns the order at
// its new version.
func CompleteProductionOrder(ctx context.Context, tx pgx.Tx, actorID *int64, id int64, version int32, toWarehouse string, quantity *decimal.Decimal) (ProductionOrder, []Event, error) {
	toID, err := warehouseIDByCode(ctx, tx, "toWarehouse", &toWarehouse)
	if err != nil {
		return ProductionOrder{}, nil, err
	}
	_, ev, err := Transition(ctx, tx, actorID, ProductionOrders, id, version, ProductionCompleted, nil)
	if err != nil {
		return ProductionOrder{}, nil, err
	}
	po, err := ProductionOrderByID(ctx, tx, id)
	if err != nil {
		return ProductionOrder{}, nil, err
	}
	line := LineInput{SKU: po.SKU, Quantity: po.Quantity}
	if quantity != nil {
		line.Quantity = *quantity
	}
	itemIDs, err := resolveLines(ctx, tx, "", []LineInput{line})
	if err != nil {
		return ProductionOrder{}, nil, err
	}
	_, events, err := insertWarehouseMove(ctx, tx, actorID, moveRow{
		kind: MoveReceipt, prefix: PrefixReceipt, status: MovePosted, toID: toID, prodOrderID: &id,
	}, itemIDs, []LineInput{line})
	if err != nil {
		return ProductionOrder{}, nil, err
	}
	return po, append([]Event{ev}, events...), nil
}

// StockFilter selects stock balances; nil fields match everything.
type StockFilter struct {
	// SKU is an item's SKU, exactly.
	SKU *string
	// Warehouse is a warehouse code, exactly.
	Warehouse *string
}

// StockBalance is a row of stock_balances: on hand of an item at a
// warehouse, in the item's unit.
type StockBalance struct {
	SKU       string
	ItemName  string
	Unit      string
	Warehouse string
	OnHand    decimal.Decimal
}

// Cursor is the balance's opaque position in ListStockBalances order.
func (b StockBalance) Cursor() string {
	enc := base64.RawURLEncoding
	raw := stockBalanceCursorTag + ":" + enc.EncodeToString([]byte(b.SKU)) + ":" + enc.EncodeToString([]byte(b.Warehouse))
	return enc.EncodeToString([]byte(raw))
}

// parseStockBalanceCursor decodes StockBalance.Cursor into the SKU and
// warehouse it holds; a malformed value is an *InputError on after.
func parseStockBalanceCursor(s string) (StockBalance, error) {
	parts, ok := cursorParts(s, stockBalanceCursorTag)
	var sku, wh []byte
	var err1, err2 error
	if ok {
		sku, err1 = base64.RawURLEncoding.DecodeString(parts[1])
		wh, err2 = base64.RawURLEncoding.DecodeString(parts[2])
	}
	b := StockBalance{SKU: string(sku), Warehouse: string(wh)}
	if !ok || err1 != nil || err2 != nil || b.Cursor() != s {
		return StockBalance{}, inputErr("after", "not a stock balance cursor returned by this server")
	}
	return b, nil
}

// StockBalancePage is one page of ListStockBalances.
type StockBalancePage struct {
	Balances    []StockBalance
	HasNextPage bool
}

// ListStockBalances returns up to first (1…500) balances matching f, by
// SKU then warehouse code, after the cursor after ("" for the first
// page). Bad arguments are an *InputError.
func ListStockBalances(ctx context.Context, q Querier, f StockFilter, first int, after string) (StockBalancePage, error) {
	if err := checkFirst(first, maxStockPage); err != nil {
		return StockBalancePage{}, err
	}
	var afterSKU, afterWarehouse string
	if after != "" {
		b, err := parseStockBalanceCursor(after)
		if err != nil {
			return StockBalancePage{}, err
		}
		afterSKU, afterWarehouse = b.SKU, b.Warehouse
	}
	// A filter naming no item or warehouse is a mistake, not an empty page.
	if f.SKU != nil {
		if _, err := itemIDsBySKU(ctx, q, "", []string{*f.SKU}); err != nil {
			var in *InputError
			if errors.As(err, &in) {
				return StockBalancePage{}, inputErr("filter.sku", "unknown item %q", *f.SKU)
			}
			return StockBalancePage{}, err
		}
	}
	if _, err := warehouseIDByCode(ctx, q, "filter.warehouse", f.Warehouse); err != nil {
		return StockBalancePage{}, err
	}
	rows, err := queries.StockBalanceListPage(ctx, q, dbsqlc.StockBalanceListPageParams{
		AfterSku: afterSKU, AfterWarehouse: afterWarehouse, SKU: f.SKU, Warehouse: f.Warehouse, MaxRows: int32(first + 1),
	})
	if err != nil {
		return StockBalancePage{}, fmt.Errorf("list stock balances: %w", translate(err))
	}
	bs, more := pageOf(mapRows(rows, func(r dbsqlc.StockBalanceListPageRow) StockBalance { return StockBalance(r) }), first)
	return StockBalancePage{Balances: bs, HasNextPage: more}, nil
}

// StockEntry is a row of stock_ledger: what one line of a posted move did
// to the on hand of one warehouse.
type StockEntry struct {
	ID     int64
	itemID int64
	MoveID int64
	LineNo int32
	// Warehouse is the warehouse's code.
	Warehouse string
	// Quantity is signed: + into the warehouse, - out of it.
	Quantity decimal.Decimal
	// BalanceAfter is on hand of the item at the warehouse after the line.
	BalanceAfter decimal.Decimal
	At           time.Time
}

// Cursor is the entry's opaque position in ListStockLedger order.
func (e StockEntry) Cursor() string {
	raw := stockLedgerCursorTag + ":" + strconv.FormatInt(e.ID, 10) + ":" + strconv.FormatInt(e.itemID, 10)
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// parseStockLedgerCursor returns the ledger row id StockEntry.Cursor
// holds; a malformed value, or a cursor of another item's ledger than
// itemID's, is an *InputError on after.
func parseStockLedgerCursor(s string, itemID int64) (int64, error) {
	parts, ok := cursorParts(s, stockLedgerCursorTag)
	var id, item int64
	var err1, err2 error
	if ok {
		id, err1 = strconv.ParseInt(parts[1], 10, 64)
		item, err2 = strconv.ParseInt(parts[2], 10, 64)
	}
	if !ok || err1 != nil || err2 != nil || item != itemID || id < 1 || (StockEntry{ID: id, itemID: item}).Cursor() != s {
		return 0, inputErr("after", "not a cursor of this item's stock ledger returned by this server")
	}
	return id, nil
}

// StockEntryPage is one page of ListStockLedger.
type StockEntryPage struct {
	Entries     []StockEntry
	HasNextPage bool
}

// ListStockLedger returns up to first (1…500) stock ledger rows of the
// item sku, of warehouse (a code; nil: every warehouse), in posting order,
// after the cursor after. An unknown SKU or warehouse, or a cursor of
// another item's ledger, is an *InputError.
func ListStockLedger(ctx context.Context, q Querier, sku string, warehouse *string, first int, after string) (StockEntryPage, error) {
	if err := checkFirst(first, maxStockPage); err != nil {
		return StockEntryPage{}, err
	}
	ids, err := itemIDsBySKU(ctx, q, "", []string{sku})
	var in *InputError
	if errors.As(err, &in) {
		return StockEntryPage{}, inputErr("sku", "unknown item %q", sku)
	}
	if err != nil {
		return StockEntryPage{}, err
	}
	itemID := ids[0]
	whID, err := warehouseIDByCode(ctx, q, "warehouse", warehouse)
	if err != nil {
		return StockEntryPage{}, err
	}
	var afterID int64
	if after != "" {
		if afterID, err = parseStockLedgerCursor(after, itemID); err != nil {
			return StockEntryPage{}, err
		}
	}
	rows, err := queries.StockLedgerListPage(ctx, q, itemID, afterID, whID, int32(first+1))
	if err != nil {
		return StockEntryPage{}, fmt.Errorf("list stock ledger of %s: %w", sku, translate(err))
	}
	es, more := pageOf(mapRows(rows, func(r dbsqlc.StockLedgerListPageRow) StockEntry {
		return StockEntry{ID: r.ID, itemID: itemID, MoveID: r.MoveID, LineNo: r.LineNo, Warehouse: r.Warehouse,
			Quantity: r.Quantity, BalanceAfter: r.BalanceAfter, At: r.At}
	}), first)
	return StockEntryPage{Entries: es, HasNextPage: more}, nil
}
