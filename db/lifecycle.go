package db

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"erp/db/internal/dbsqlc"
)

// EventStatusChanged is journaled by every document transition, with the
// payload {"id", "no", "entity", "from", "to"} and "reason" when one was
// given; entity is the doc.created payload's name (sales_order, …).
const EventStatusChanged = "doc.status_changed"

// Document statuses, as stored in the status column of each table.
const (
	SalesOrderNew          = "new"
	SalesOrderAccepted     = "accepted"
	SalesOrderInProduction = "in_production"
	SalesOrderShipped      = "shipped"
	SalesOrderCancelled    = "cancelled"

	ProductionPlanned   = "planned"
	ProductionReleased  = "released"
	ProductionCompleted = "completed"
	ProductionCancelled = "cancelled"

	PurchaseOpen              = "open"
	PurchasePartiallyReceived = "partially_received"
	PurchaseReceived          = "received"
	PurchaseClosed            = "closed"
	PurchaseCancelled         = "cancelled"

	MoveDraft    = "draft"
	MovePosted   = "posted"
	MoveReversed = "reversed"
	// MoveCancelled is a draft discarded before it was posted.
	MoveCancelled = "cancelled"
)

// DocKind is one kind of document that has a lifecycle: its table, its
// name in payloads, and the transitions its statuses allow. The four
// values are SalesOrders, ProductionOrders, PurchaseOrders and
// WarehouseMoves.
type DocKind struct {
	// Entity is the table (events.entity).
	Entity string
	// PayloadEntity is the name payloads give it ("sales_order").
	PayloadEntity string
	// Noun names it in error messages ("sales order").
	Noun string
	// next maps a status to the statuses it may go to.
	next map[string][]string
	// back holds the transitions a reversal makes, undoing what a posted
	// move did to the order (MoveBack); no client asks for them.
	back     map[string][]string
	lock     func(ctx context.Context, db dbsqlc.DBTX, id int64) (docState, error)
	byNumber func(ctx context.Context, db dbsqlc.DBTX, number string) (int64, error)
	set      func(ctx context.Context, db dbsqlc.DBTX, status string, id int64) (int32, error)
}

// The document kinds. A status not in a map is final.
var (
	SalesOrders = &DocKind{
		Entity: EntitySalesOrders, PayloadEntity: payloadSalesOrder, Noun: "sales order",
		next: map[string][]string{
			SalesOrderNew:          {SalesOrderAccepted, SalesOrderInProduction, SalesOrderShipped, SalesOrderCancelled},
			SalesOrderAccepted:     {SalesOrderInProduction, SalesOrderShipped, SalesOrderCancelled},
			SalesOrderInProduction: {SalesOrderShipped, SalesOrderCancelled},
		},
		back: map[string][]string{
			SalesOrderShipped: {SalesOrderNew, SalesOrderAccepted, SalesOrderInProduction},
		},
		lock:     lockWith(queries.SalesOrderLockStatus),
		set:      queries.SalesOrderSetStatus,
		byNumber: queries.SalesOrderGetIDByNumber,
	}
	ProductionOrders = &DocKind{
		Entity: EntityProdOrders, PayloadEntity: payloadProdOrder, Noun: "production order",
		next: map[string][]string{
			ProductionPlanned:  {ProductionReleased, ProductionCancelled},
			ProductionReleased: {ProductionCompleted, ProductionCancelled},
		},
		lock:     lockWith(queries.ProductionOrderLockStatus),
		set:      queries.ProductionOrderSetStatus,
		byNumber: queries.ProductionOrderGetIDByNumber,
	}
	PurchaseOrders = &DocKind{
		Entity: EntityPurchaseOrders, PayloadEntity: payloadPurchaseOrder, Noun: "purchase order",
		next: map[string][]string{
			PurchaseOpen:              {PurchasePartiallyReceived, PurchaseReceived, PurchaseClosed, PurchaseCancelled},
			PurchasePartiallyReceived: {PurchaseReceived, PurchaseClosed},
			PurchaseReceived:          {PurchaseClosed},
		},
		back: map[string][]string{
			PurchaseReceived:          {PurchasePartiallyReceived, PurchaseOpen},
			PurchasePartiallyReceived: {PurchaseOpen},
		},
		lock:     lockWith(queries.PurchaseOrderLockStatus),
		set:      queries.PurchaseOrderSetStatus,
		byNumber: queries.PurchaseOrderGetIDByNumber,
	}
	WarehouseMoves = &DocKind{
		Entity: EntityWarehouseMoves, PayloadEntity: payloadWarehouseMove, Noun: "warehouse move",
		next: map[string][]string{
			MoveDraft:  {MovePosted, MoveCancelled},
			MovePosted: {MoveReversed},
		},
		lock:     lockWith(queries.WarehouseMoveLockStatus),
		set:      queries.WarehouseMoveSetStatus,
		byNumber: queries.WarehouseMoveGetIDByNumber,
	}
)

// Allows reports whether a document of kind k in status from may go to
// status to.
func (k *DocKind) Allows(from, to string) bool { return slices.Contains(k.next[from], to) }

// docState is a locked document's number, status and version.
type docState struct {
	Number  string
	Status  string
	Version int32
}

type lockRow interface {
	dbsqlc.SalesOrderLockStatusRow | dbsqlc.ProductionOrderLockStatusRow |
		dbsqlc.PurchaseOrderLockStatusRow | dbsqlc.WarehouseMoveLockStatusRow
}

func lockWith[R lockRow](lock func(context.Context, dbsqlc.DBTX, int64) (R, error)) func(context.Context, dbsqlc.DBTX, int64) (docState, error) {
	return func(ctx context.Context, q dbsqlc.DBTX, id int64) (docState, error) {
		r, err := lock(ctx, q, id)
		return docState(r), err
	}
}

// StatusConflictError is a transition refused because the document is no
// longer at the version the client saw, or its status does not allow the
// transition (or a rule about another document, named in Msg, forbids it).
// Status and Version are the document's current ones, for the client to
// reload and decide again. errors.Is(err, ErrConflict) holds.
type StatusConflictError struct {
	Kind    *DocKind
	ID      int64
	Number  string
	Status  string
	Version int32
	Msg     string
}

func (e *StatusConflictError) Error() string { return e.Msg }

// Is makes a StatusConflictError match ErrConflict.
func (e *StatusConflictError) Is(target error) bool { return target == ErrConflict }

// StatusChange is a transition written: the document's number, the
// statuses before and after and its new version.
type StatusChange struct {
	ID      int64
	Number  string
	From    string
	To      string
	Version int32
}

type statusChangedPayload struct {
	ID     int64   `json:"id"`
	No     string  `json:"no"`
	Entity string  `json:"entity"`
	From   string  `json:"from"`
	To     string  `json:"to"`
	Reason *string `json:"reason,omitempty"`
	// ReversedMove is the number of the posted move whose reversal made
	// this change (MoveBack); Reason is then the reversal's.
	ReversedMove *string `json:"reversedMove,omitempty"`
}

// Transition moves document id of kind k to status to, for a client that
// saw it at version: it locks the row until tx ends, and unless it is still
// at that version and its status allows to, returns a *StatusConflictError
// with the current status and version and writes nothing. Otherwise it
// sets the status, bumps the version and journals doc.status_changed with
// actorID (nil: the system) and reason (omitted when nil), returning the
// event for the caller to enqueue in tx. An unknown id is ErrNotFound.
func Transition(ctx context.Context, tx pgx.Tx, actorID *int64, k *DocKind, id int64, version int32, to string, reason *string) (StatusChange, Event, error) {
	d, err := LockDocumentAt(ctx, tx, k, id, version)
	if err != nil {
		return StatusChange{}, Event{}, err
	}
	return d.MoveTo(ctx, tx, actorID, to, reason)
}

// LockDocumentAt is LockDocument for a client that saw the document at
// version: another version is a *StatusConflictError with the current
// status and version.
func LockDocumentAt(ctx context.Context, tx pgx.Tx, k *DocKind, id int64, version int32) (LockedDocument, error) {
	d, err := LockDocument(ctx, tx, k, id)
	if err != nil {
		return LockedDocument{}, err
	}
	if d.Version != version {
		return LockedDocument{}, d.conflict("%s %s was changed: it is at version %d (status %s), not %d",
			k.Noun, d.Number, d.Version, d.Status, version)
	}
	return d, nil
}

// LockedDocument is a document LockDocument locked in a transaction, with
// the number, status and version it has there.
type LockedDocument struct {
	Kind    *DocKind
	ID      int64
	Number  string
	Status  string
	Version int32
}

// Lock order. A transaction that locks more than one row of the tables
// below locks them in this order, so that two transactions never wait for
// each other in a circle (a deadlock, which PostgreSQL breaks by failing
// one of them):
//
//  1. the warehouse move being posted, reversed or cancelled, and the
//     draft material issues a production order's cancellation takes along;
//  2. sales orders;
//  3. production orders;
//  4. purchase orders;
//  5. users (after the API token a revocation writes);
//  6. subscribers, then a webhook's lease slots (subscriber_leases);
//  7. stock balances, in (item, warehouse) order (postMove);
//  8. number series, at commit (pendingNumber).
//
// Rows of one table are locked in id order. A document's own lock thus
// comes before that of the order it serves when the order is later in the
// list (a shipment before its sales order), and after it when the order is
// earlier: a production order after its sales order, both when the sales
// order's cancellation takes its planned production along and when a
// release moves the sales order in production. A row the transaction
// inserted is its own and has no place in the order. The journal's rows a
// dispatch, a redelivery or a webhook attempt's take or record locks
// (events, deliveries) come before all of these: a built-in subscriber
// then locks the documents it moves, a redelivery those it journals about
// (lockEntities), a record its subscriber and lease slot.

// LockDocument locks document id of kind k until tx ends (FOR NO KEY
// UPDATE: rows that reference it may still be written) and returns its
// state, for a transition that checks more than Transition does. A
// document tx wrote itself takes its number here (NumberNow) rather than
// at commit, so that what tx journals of it carries the number. An
// unknown id is ErrNotFound.
func LockDocument(ctx context.Context, tx pgx.Tx, k *DocKind, id int64) (LockedDocument, error) {
	st, err := k.lock(ctx, tx, id)
	if err == nil && isPending(st.Number) {
		// Written by tx itself, numbered only at commit: a transition
		// journals the number, so take it now.
		if err := NumberNow(ctx, tx); err != nil {
			return LockedDocument{}, err
		}
		st, err = k.lock(ctx, tx, id)
	}
	if err != nil {
		err = translate(err)
		if errors.Is(err, ErrNotFound) {
			// The client's message: the document's noun, not our step.
			return LockedDocument{}, fmt.Errorf("there is no %s %d: %w", k.Noun, id, err)
		}
		return LockedDocument{}, fmt.Errorf("lock %s %d: %w", k.Noun, id, err)
	}
	return LockedDocument{Kind: k, ID: id, Number: st.Number, Status: st.Status, Version: st.Version}, nil
}

// entityRef names a row events are about: events.entity and entity_id.
type entityRef struct {
	entity string
	id     int64
}

// entityLock locks the row of id in one table events are about.
type entityLock struct {
	entity string
	lock   func(ctx context.Context, tx pgx.Tx, id int64) error
}

// entityLocks holds a lock for every table events are about, in the lock
// order.
var entityLocks = []entityLock{
	{EntityWarehouseMoves, lockKind(WarehouseMoves)},
	{EntitySalesOrders, lockKind(SalesOrders)},
	{EntityProdOrders, lockKind(ProductionOrders)},
	{EntityPurchaseOrders, lockKind(PurchaseOrders)},
	{EntityUsers, lockID(queries.UserLock)},
	{EntitySubscribers, lockID(queries.SubscriberLock)},
}

func lockKind(k *DocKind) func(context.Context, pgx.Tx, int64) error {
	return func(ctx context.Context, tx pgx.Tx, id int64) error {
		_, err := k.lock(ctx, tx, id)
		return err
	}
}

func lockID(lock func(context.Context, dbsqlc.DBTX, int64) (int64, error)) func(context.Context, pgx.Tx, int64) error {
	return func(ctx context.Context, tx pgx.Tx, id int64) error {
		_, err := lock(ctx, tx, id)
		return err
	}
}

// lockEntities locks the rows refs name until tx ends, in the lock order,
// for a writer that journals events about them without writing them
// otherwise. Whoever journals about a document holds its lock until
// commit, so that one document's event ids follow commit order, which the
// dispatcher's per-document order rests on. A row that is gone (a deleted
// subscriber) takes no lock: nothing writes about it any more.
func lockEntities(ctx context.Context, tx pgx.Tx, refs []entityRef) error {
	rank := func(entity string) int {
		return slices.IndexFunc(entityLocks, func(l entityLock) bool { return l.entity == entity })
	}
	sorted := slices.Clone(refs)
	slices.SortFunc(sorted, func(a, b entityRef) int {
		return cmp.Or(cmp.Compare(rank(a.entity), rank(b.entity)), cmp.Compare(a.id, b.id))
	})
	for _, r := range slices.Compact(sorted) {
		n := rank(r.entity)
		if n < 0 {
			return fmt.Errorf("lock %s %d: events are about no such table", r.entity, r.id)
		}
		if err := translate(entityLocks[n].lock(ctx, tx, r.id)); err != nil && !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("lock %s %d: %w", r.entity, r.id, err)
		}
	}
	return nil
}

// Conflict is a *StatusConflictError about d with its current state and
// the message format gives.
func (d LockedDocument) Conflict(format string, args ...any) error {
	return d.conflict(format, args...)
}

func (d LockedDocument) conflict(format string, args ...any) *StatusConflictError {
	return &StatusConflictError{Kind: d.Kind, ID: d.ID, Number: d.Number, Status: d.Status, Version: d.Version,
		Msg: fmt.Sprintf(format, args...)}
}

// MoveTo writes the transition of locked document d to status to, as
// Transition does after its version check: a status that does not allow
// it is a *StatusConflictError, otherwise the status and version change
// and doc.status_changed is journaled.
func (d LockedDocument) MoveTo(ctx context.Context, tx pgx.Tx, actorID *int64, to string, reason *string) (StatusChange, Event, error) {
	if !d.Kind.Allows(d.Status, to) {
		allowed := "none: it is final"
		if next := d.Kind.next[d.Status]; len(next) > 0 {
			allowed = strings.Join(next, ", ")
		}
		return StatusChange{}, Event{}, d.conflict("%s %s is %s and cannot become %s (allowed: %s)",
			d.Kind.Noun, d.Number, d.Status, to, allowed)
	}
	return d.write(ctx, tx, actorID, statusChangedPayload{To: to, Reason: reason})
}

// MoveBack is MoveTo for the transitions a reversal makes (shipped back to
// the status before it, received back to partially received or open),
// which no client may ask for; any other is a *StatusConflictError. The
// event names the reversed move (reversedMove) and carries the reversal's
// reason.
func (d LockedDocument) MoveBack(ctx context.Context, tx pgx.Tx, actorID *int64, to, reversedMove, reason string) (StatusChange, Event, error) {
	if !slices.Contains(d.Kind.back[d.Status], to) {
		return StatusChange{}, Event{}, d.conflict("%s %s is %s and cannot go back to %s", d.Kind.Noun, d.Number, d.Status, to)
	}
	return d.write(ctx, tx, actorID, statusChangedPayload{To: to, Reason: &reason, ReversedMove: &reversedMove})
}

// write sets d's status to change.To and journals doc.status_changed with
// change's reason and reversed move.
func (d LockedDocument) write(ctx context.Context, tx pgx.Tx, actorID *int64, change statusChangedPayload) (StatusChange, Event, error) {
	to := change.To
	v, err := d.Kind.set(ctx, tx, to, d.ID)
	if err != nil {
		return StatusChange{}, Event{}, fmt.Errorf("set status of %s %s to %s: %w", d.Kind.Noun, d.Number, to, translate(err))
	}
	ev, err := appendEvent(ctx, tx, actorID, EventStatusChanged, d.Kind.Entity, d.ID, statusChangedPayload{
		ID: d.ID, No: d.Number, Entity: d.Kind.PayloadEntity, From: d.Status, To: to,
		Reason: change.Reason, ReversedMove: change.ReversedMove,
	})
	if err != nil {
		return StatusChange{}, Event{}, err
	}
	return StatusChange{ID: d.ID, Number: d.Number, From: d.Status, To: to, Version: v}, ev, nil
}

// TransitionIf is a system transition: it moves document id of kind k
// from status from to status to, journaling doc.status_changed with
// actorID (nil for the system), when it is in status from, and otherwise
// does nothing (ok false, no event). A built-in subscriber calls it, so a
// redelivered event finds the document moved already and changes nothing.
func TransitionIf(ctx context.Context, tx pgx.Tx, actorID *int64, k *DocKind, id int64, from, to string) (StatusChange, *Event, error) {
	d, err := LockDocument(ctx, tx, k, id)
	if err != nil || d.Status != from {
		return StatusChange{}, nil, err
	}
	ch, ev, err := d.MoveTo(ctx, tx, actorID, to, nil)
	if err != nil {
		return StatusChange{}, nil, err
	}
	return ch, &ev, nil
}

// CancelSalesOrder cancels sales order id, seen at version, for reason
// (required, at most 200 characters): new, accepted and in_production
// orders may be cancelled, unless a production order of theirs is
// released (a *StatusConflictError naming them: cancel or complete them
// first). Its planned production orders are cancelled with it, the reason
// naming the order, and so are the draft material issues of its
// production orders (draftIssues). It journals doc.status_changed for
// each and returns the order as stored.
func CancelSalesOrder(ctx context.Context, tx pgx.Tx, actorID *int64, id int64, version int32, reason string) (SalesOrder, []Event, error) {
	why, err := requireText("reason", reason)
	if err != nil {
		return SalesOrder{}, nil, err
	}
	issues := draftIssues{salesOrderID: &id}
	if err := issues.lock(ctx, tx); err != nil {
		return SalesOrder{}, nil, err
	}
	d, err := LockDocumentAt(ctx, tx, SalesOrders, id, version)
	if err != nil {
		return SalesOrder{}, nil, err
	}
	if d.Kind.Allows(d.Status, SalesOrderCancelled) {
		released, err := queries.ProductionOrderListReleasedNumbers(ctx, tx, &id)
		if err != nil {
			return SalesOrder{}, nil, fmt.Errorf("list released production orders of sales order %s: %w", d.Number, translate(err))
		}
		if len(released) > 0 {
			return SalesOrder{}, nil, d.conflict("sales order %s has released production orders %s: cancel or complete them first",
				d.Number, strings.Join(released, ", "))
		}
	}
	_, ev, err := d.MoveTo(ctx, tx, actorID, SalesOrderCancelled, &why)
	if err != nil {
		return SalesOrder{}, nil, err
	}
	events := []Event{ev}
	// Its planned production goes with it: nothing is made for a
	// cancelled order. They are locked after the sales order, in id order (the lock order),
	// as a release locks them: none can be released unseen meanwhile.
	planned, err := queries.ProductionOrderListPlannedIDs(ctx, tx, &id)
	if err != nil {
		return SalesOrder{}, nil, fmt.Errorf("list planned production orders of sales order %s: %w", d.Number, translate(err))
	}
	poReason := truncateText(fmt.Sprintf("sales order %s cancelled: %s", d.Number, why))
	for _, poID := range planned {
		po, err := LockDocument(ctx, tx, ProductionOrders, poID)
		if err != nil {
			return SalesOrder{}, nil, err
		}
		if po.Status != ProductionPlanned { // released meanwhile: refused above
			continue
		}
		_, ev, err := po.MoveTo(ctx, tx, actorID, ProductionCancelled, &poReason)
		if err != nil {
			return SalesOrder{}, nil, err
		}
		events = append(events, ev)
	}
	more, err := issues.cancel(ctx, tx, actorID, poReason)
	if err != nil {
		return SalesOrder{}, nil, err
	}
	so, err := SalesOrderByID(ctx, tx, id)
	return so, append(events, more...), err
}

// draftIssues are the draft material issues (wh_moves) of one production
// order, or of every production order of one sales order: a cancellation
// of the order cancels them, since materials must not go to production
// that will not happen.
type draftIssues struct {
	prodOrderID, salesOrderID *int64
	locked                    []LockedDocument
}

// lock locks the draft issues not locked yet, in id order. Called before
// the orders are locked (the lock order: moves first) and again after,
// for an issue material_issue wrote in between; no more can be written
// once the production orders are locked.
func (di *draftIssues) lock(ctx context.Context, tx pgx.Tx) error {
	ids, err := queries.WarehouseMoveListDraftIssueIDs(ctx, tx, di.prodOrderID, di.salesOrderID)
	if err != nil {
		return fmt.Errorf("list draft material issues: %w", translate(err))
	}
	for _, id := range ids {
		if slices.ContainsFunc(di.locked, func(d LockedDocument) bool { return d.ID == id }) {
			continue
		}
		d, err := LockDocument(ctx, tx, WarehouseMoves, id)
		if err != nil {
			return err
		}
		di.locked = append(di.locked, d)
	}
	return nil
}

// cancel locks the issues written since lock and cancels every locked one
// still draft for reason, returning their doc.status_changed events.
func (di *draftIssues) cancel(ctx context.Context, tx pgx.Tx, actorID *int64, reason string) ([]Event, error) {
	if err := di.lock(ctx, tx); err != nil {
		return nil, err
	}
	var events []Event
	for _, d := range di.locked {
		if d.Status != MoveDraft { // posted before we locked it
			continue
		}
		_, ev, err := d.MoveTo(ctx, tx, actorID, MoveCancelled, &reason)
		if err != nil {
			return nil, err
		}
		events = append(events, ev)
	}
	return events, nil
}

// AcceptSalesOrder moves a sales order from new to accepted as the
// system, journaling doc.status_changed with no actor; an order no longer
// new (accepted already, cancelled meanwhile) is left as it is and nothing
// is journaled. It returns the events written.
func AcceptSalesOrder(ctx context.Context, tx pgx.Tx, id int64) ([]Event, error) {
	_, ev, err := TransitionIf(ctx, tx, nil, SalesOrders, id, SalesOrderNew, SalesOrderAccepted)
	if err != nil || ev == nil {
		return nil, err
	}
	return []Event{*ev}, nil
}

// AcceptSalesOrders is AcceptSalesOrder for the orders ids (distinct) at
// once, in two statements whatever their number: it locks them in id
// order (the lock order), moves the new ones to accepted and journals
// their doc.status_changed in the order of ids. events[i] holds what was
// journaled for ids[i] (none when the order was no longer new). An id
// listed twice is an error and an unknown one ErrNotFound; either way
// nothing is written.
func AcceptSalesOrders(ctx context.Context, tx pgx.Tx, ids []int64) ([][]Event, error) {
	if _, err := lockSalesOrders(ctx, tx, ids); err != nil {
		return nil, err
	}
	rows, err := queries.SalesOrderAcceptMany(ctx, tx, ids, traceParent(ctx))
	if err != nil {
		return nil, fmt.Errorf("accept %d sales orders: %w", len(ids), translate(err))
	}
	at := make(map[int64]int, len(ids))
	for i, id := range ids {
		at[id] = i
	}
	events := make([][]Event, len(ids))
	for _, r := range rows {
		ev := eventFrom(dbsqlc.EventRow(r))
		if r.DispatchJobID != nil {
			ev.NewDispatchJobID = *r.DispatchJobID
		}
		events[at[ev.EntityID]] = []Event{ev}
	}
	return events, nil
}

// lockSalesOrders locks the sales orders ids (distinct) until tx ends, in
// id order, as LockDocument locks one (an order tx wrote itself takes its
// number now), and returns their states by id. An id listed twice is an
// error, an unknown one ErrNotFound.
func lockSalesOrders(ctx context.Context, tx pgx.Tx, ids []int64) (map[int64]docState, error) {
	states := make(map[int64]docState, len(ids))
	for _, id := range ids {
		if _, ok := states[id]; ok {
			return nil, fmt.Errorf("lock sales orders: %d is listed twice", id)
		}
		states[id] = docState{}
	}
	rows, err := queries.SalesOrderLockMany(ctx, tx, ids)
	if err == nil && slices.ContainsFunc(rows, func(r dbsqlc.SalesOrderLockManyRow) bool { return isPending(r.Number) }) {
		if err := NumberNow(ctx, tx); err != nil {
			return nil, err
		}
		rows, err = queries.SalesOrderLockMany(ctx, tx, ids)
	}
	if err != nil {
		return nil, fmt.Errorf("lock %d sales orders: %w", len(ids), translate(err))
	}
	for _, r := range rows {
		states[r.ID] = docState{Number: r.Number, Status: r.Status, Version: r.Version}
	}
	if len(rows) < len(ids) {
		for _, id := range ids {
			if states[id].Number == "" {
				return nil, fmt.Errorf("there is no sales order %d: %w", id, ErrNotFound)
			}
		}
	}
	return states, nil
}

// ReleaseProductionOrder releases production order id, seen at version,
// to the shop floor (planned → released). When it was planned for a sales
// order, that order is locked too (before the production order: the lock
// order) and must not be cancelled or shipped (a *StatusConflictError
// about the production order); a new or accepted sales order goes
// in_production in the same transaction, journaled with the same actor,
// since the release is what moves it. It returns the production order as
// stored and the events.
func ReleaseProductionOrder(ctx context.Context, tx pgx.Tx, actorID *int64, id int64, version int32) (ProductionOrder, []Event, error) {
	// The sales order a production order is for never changes: read it
	// unlocked, to lock the sales order first. An unknown id is left to
	// LockDocumentAt, which says so in its words.
	planned, err := ProductionOrderByID(ctx, tx, id)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return ProductionOrder{}, nil, err
	}
	var so *LockedDocument
	if planned.SalesOrderID != nil {
		d, err := LockDocument(ctx, tx, SalesOrders, *planned.SalesOrderID)
		if err != nil {
			return ProductionOrder{}, nil, err
		}
		so = &d
	}
	d, err := LockDocumentAt(ctx, tx, ProductionOrders, id, version)
	if err != nil {
		return ProductionOrder{}, nil, err
	}
	_, ev, err := d.MoveTo(ctx, tx, actorID, ProductionReleased, nil)
	if err != nil {
		return ProductionOrder{}, nil, err
	}
	events := []Event{ev}
	if so != nil {
		switch so.Status {
		case SalesOrderCancelled, SalesOrderShipped:
			return ProductionOrder{}, nil, d.conflict("production order %s is for sales order %s, which is %s: it cannot be released",
				d.Number, so.Number, so.Status)
		case SalesOrderNew, SalesOrderAccepted:
			_, soEv, err := so.MoveTo(ctx, tx, actorID, SalesOrderInProduction, nil)
			if err != nil {
				return ProductionOrder{}, nil, err
			}
			events = append(events, soEv)
		}
	}
	po, err := ProductionOrderByID(ctx, tx, id)
	return po, events, err
}

// CancelProductionOrder cancels production order id (planned or
// released), seen at version, for reason (required, at most 200
// characters), journaling doc.status_changed; its draft material issues
// are cancelled with it, the reason naming the order.
func CancelProductionOrder(ctx context.Context, tx pgx.Tx, actorID *int64, id int64, version int32, reason string) (ProductionOrder, []Event, error) {
	why, err := requireText("reason", reason)
	if err != nil {
		return ProductionOrder{}, nil, err
	}
	issues := draftIssues{prodOrderID: &id}
	if err := issues.lock(ctx, tx); err != nil {
		return ProductionOrder{}, nil, err
	}
	change, ev, err := Transition(ctx, tx, actorID, ProductionOrders, id, version, ProductionCancelled, &why)
	if err != nil {
		return ProductionOrder{}, nil, err
	}
	more, err := issues.cancel(ctx, tx, actorID, truncateText(fmt.Sprintf("production order %s cancelled: %s", change.Number, why)))
	if err != nil {
		return ProductionOrder{}, nil, err
	}
	po, err := ProductionOrderByID(ctx, tx, id)
	return po, append([]Event{ev}, more...), err
}

// ClosePurchaseOrder closes purchase order id (open, partially received
// or received: nothing more is expected from the supplier), seen at
// version, journaling doc.status_changed.
func ClosePurchaseOrder(ctx context.Context, tx pgx.Tx, actorID *int64, id int64, version int32) (PurchaseOrder, []Event, error) {
	_, ev, err := Transition(ctx, tx, actorID, PurchaseOrders, id, version, PurchaseClosed, nil)
	if err != nil {
		return PurchaseOrder{}, nil, err
	}
	po, err := PurchaseOrderByID(ctx, tx, id)
	return po, []Event{ev}, err
}

// CancelPurchaseOrder cancels purchase order id while nothing of it was
// received (open), seen at version, for reason (required, at most 200
// characters), journaling doc.status_changed.
func CancelPurchaseOrder(ctx context.Context, tx pgx.Tx, actorID *int64, id int64, version int32, reason string) (PurchaseOrder, []Event, error) {
	why, err := requireText("reason", reason)
	if err != nil {
		return PurchaseOrder{}, nil, err
	}
	_, ev, err := Transition(ctx, tx, actorID, PurchaseOrders, id, version, PurchaseCancelled, &why)
	if err != nil {
		return PurchaseOrder{}, nil, err
	}
	po, err := PurchaseOrderByID(ctx, tx, id)
	return po, []Event{ev}, err
}

// IDByNumber returns the id of the document of kind k numbered number
// ("ЗК-2026-000422"), or ErrNotFound.
func (k *DocKind) IDByNumber(ctx context.Context, q Querier, number string) (int64, error) {
	id, err := k.byNumber(ctx, q, strings.TrimSpace(number))
	if err != nil {
		return 0, fmt.Errorf("find %s %s: %w", k.Noun, number, translate(err))
	}
	return id, nil
}

// truncateText cuts s to maxTextLen characters, the last one an ellipsis
// when it was longer: a reason that quotes another one may be too long.
func truncateText(s string) string {
	r := []rune(s)
	if len(r) <= maxTextLen {
		return s
	}
	return string(append(r[:maxTextLen-1], '…'))
}
