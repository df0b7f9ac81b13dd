package db

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"erp/db/internal/dbsqlc"
)

// queries runs this package's sqlc-generated statements (db/queries/*.sql)
// on the Querier each call is given.
var queries = dbsqlc.New()

// Querier is what read queries need: a pool, a connection or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Event types written to the journal.
const (
	EventDocCreated    = "doc.created"
	EventOrderReceived = "order.received"
)

// Entities (tables) an event can be about.
const (
	EntitySalesOrders    = "sales_orders"
	EntityProdOrders     = "plan_prod_orders"
	EntityWarehouseMoves = "wh_moves"
	EntityPurchaseOrders = "wh_purchase_orders"
	EntityUsers          = "users"
	// notifyEventProcessed is the channel of the live feed; its name is
	// also written in db/queries/event.sql (FeedListen).
	notifyEventProcessed = "event_processed"
	maxEventPageSize     = 500
	cursorVersion        = "e1"
	cursorNoFeedSeq      = "-"
)

// Event is one row of the journal (table events) with its actor's names
// joined in. Payload is a JSON object in the shapes docs/api.md gives.
type Event struct {
	ID        int64           `db:"id"`
	Type      string          `db:"type"`
	Entity    string          `db:"entity"`
	EntityID  int64           `db:"entity_id"`
	Payload   json.RawMessage `db:"payload"`
	CreatedAt time.Time       `db:"created_at"`
	// DispatchedAt is when the event's delivery records were created.
	DispatchedAt *time.Time `db:"dispatched_at"`
	ProcessedAt  *time.Time `db:"processed_at"`
	// FeedSeq is the event's place in processing commit order; nil while
	// unprocessed.
	FeedSeq    *int64  `db:"feed_seq"`
	ActorID    *int64  `db:"actor_id"`
	ActorLogin *string `db:"actor_login"`
	ActorName  *string `db:"actor_name"`
	ActorRole  *string `db:"actor_role"`
	// TraceParent is the W3C traceparent of the span that wrote the event
	// (events.trace_parent); nil when it was written untraced. See
	// SpanContext.
	TraceParent *string `db:"trace_parent"`
	// NewDispatchJobID is set only on an event this transaction just
	// inserted: the River job id its dispatch job is to be inserted with
	// (events.dispatch_job_id, which the insert took from River's job
	// sequence). It is 0 on an event read back, whose job may exist
	// already.
	NewDispatchJobID int64 `db:"-"`
}

// Object names the event's row as people read it: "sales_orders #22".
func (e Event) Object() string { return fmt.Sprintf("%s #%d", e.Entity, e.EntityID) }

// Actor is the user who caused the event, nil for the system itself.
func (e Event) Actor() *User {
	if e.ActorID == nil {
		return nil
	}
	u := User{ID: *e.ActorID}
	if e.ActorLogin != nil {
		u.Login = *e.ActorLogin
	}
	if e.ActorName != nil {
		u.DisplayName = *e.ActorName
	}
	if e.ActorRole != nil {
		u.Role = *e.ActorRole
	}
	return &u
}

// Cursor is the event's opaque position. It carries the journal id (the
// order of the events query, newest first) and the feed sequence (the order
// of the live feed, processing commit order), so one value serves both.
func (e Event) Cursor() string {
	seq := cursorNoFeedSeq
	if e.FeedSeq != nil {
		seq = strconv.FormatInt(*e.FeedSeq, 10)
	}
	raw := cursorVersion + ":" + strconv.FormatInt(e.ID, 10) + ":" + seq
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// Cursor is a decoded Event.Cursor. FeedSeq is nil for an event that was
// unprocessed when its cursor was taken.
type Cursor struct {
	ID      int64
	FeedSeq *int64
}

// ParseCursor decodes Event.Cursor; a malformed value, or one that
// Event.Cursor would not write so, is an *InputError on field.
func ParseCursor(field, s string) (Cursor, error) {
	bad := inputErr(field, "not a cursor returned by this server")
	parts, ok := cursorParts(s, cursorVersion)
	if !ok {
		return Cursor{}, bad
	}
	id, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || id < 1 {
		return Cursor{}, bad
	}
	c := Cursor{ID: id}
	if parts[2] != cursorNoFeedSeq {
		seq, err := strconv.ParseInt(parts[2], 10, 64)
		if err != nil || seq < 1 {
			return Cursor{}, bad
		}
		c.FeedSeq = &seq
	}
	if (Event{ID: c.ID, FeedSeq: c.FeedSeq}).Cursor() != s {
		return Cursor{}, bad
	}
	return c, nil
}

// cursorParts decodes an opaque cursor: three fields, the first tag. A
// parser then checks that its encoder writes what it read as s exactly:
// base64 and strconv also read other spellings ("+5", "05", a line break,
// other padding bits), and a cursor has one.
func cursorParts(s, tag string) ([]string, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, false
	}
	parts := strings.Split(string(raw), ":")
	return parts, len(parts) == 3 && parts[0] == tag
}

// EventFilter selects journal rows; zero fields match everything.
type EventFilter struct {
	Types     []string
	Entity    *string
	EntityID  *int64
	ActorID   *int64
	Processed *bool
	// HiddenEntities are tables (events.entity) whose events the reader
	// may not see: they are left out, of the live feed too.
	HiddenEntities []string
}

// EntityNames maps every name a filter may give an entity by to the table
// events.entity holds: the tables themselves and the "entity" names of
// doc.created payloads (sales_order, prod_order, wh_move, purchase_order).
func EntityNames() map[string]string {
	return map[string]string{
		EntitySalesOrders: EntitySalesOrders, payloadSalesOrder: EntitySalesOrders,
		EntityProdOrders: EntityProdOrders, payloadProdOrder: EntityProdOrders,
		EntityWarehouseMoves: EntityWarehouseMoves, payloadWarehouseMove: EntityWarehouseMoves,
		EntityPurchaseOrders: EntityPurchaseOrders, payloadPurchaseOrder: EntityPurchaseOrders,
		EntityUsers: EntityUsers, EntitySubscribers: EntitySubscribers,
	}
}

// Normalize returns f with Entity as its table, given either the table
// or the payload's name; an unknown one is an *InputError on field
// (the filter's path) + ".entity" listing the known names. EntityID
// without Entity is an *InputError on field + ".entityId": ids are per
// table, and no query of ListEvents reads entity_id without entity.
func (f EventFilter) Normalize(field string) (EventFilter, error) {
	if f.Entity == nil {
		if f.EntityID != nil {
			return f, inputErr(field+".entityId", "needs entity: an id names a row of one table")
		}
		return f, nil
	}
	names := EntityNames()
	table, ok := names[strings.TrimSpace(*f.Entity)]
	if !ok {
		known := make([]string, 0, len(names))
		for n := range names {
			known = append(known, n)
		}
		slices.Sort(known)
		return f, inputErr(field+".entity", "unknown entity %q; known: %s", *f.Entity, strings.Join(known, ", "))
	}
	f.Entity = &table
	return f, nil
}

// Matches tells whether ev passes f, the same test the SQL of ListEvents
// and EventsProcessedAfter applies; the live feed uses it.
func (f EventFilter) Matches(ev Event) bool {
	if len(f.Types) > 0 && !containsString(f.Types, ev.Type) {
		return false
	}
	if f.Entity != nil && *f.Entity != ev.Entity {
		return false
	}
	if f.EntityID != nil && *f.EntityID != ev.EntityID {
		return false
	}
	if f.ActorID != nil && (ev.ActorID == nil || *f.ActorID != *ev.ActorID) {
		return false
	}
	if f.Processed != nil && *f.Processed != (ev.ProcessedAt != nil) {
		return false
	}
	return !containsString(f.HiddenEntities, ev.Entity)
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// ListEvents returns up to first (1…500) journal events
// matching f, newest first, starting after the cursor after (empty = from
// the newest). A bad first or cursor is an *InputError. Each filter shape
// that decides the index has its own query (EXPLAIN in
// docs/query-plans.md): the entity and id, the entity, the types, the
// unprocessed events, or none.
func ListEvents(ctx context.Context, q Querier, f EventFilter, first int, after string) (EventPage, error) {
	if err := checkFirst(first, maxEventPageSize); err != nil {
		return EventPage{}, err
	}
	before := int64(math.MaxInt64)
	if after != "" {
		c, err := ParseCursor("after", after)
		if err != nil {
			return EventPage{}, err
		}
		before = c.ID
	}
	types, limit := f.types(), int32(first+1)
	var rows []dbsqlc.EventRow
	var err error
	switch {
	case f.Entity != nil && f.EntityID != nil:
		rows, err = queries.EventListPageByEntityID(ctx, q, dbsqlc.EventListPageByEntityIDParams{Entity: *f.Entity,
			EntityID: *f.EntityID, BeforeID: before, Types: types, ActorID: f.ActorID, Processed: f.Processed,
			HiddenEntities: f.HiddenEntities, MaxRows: limit})
	case f.Entity != nil:
		rows, err = queries.EventListPageByEntity(ctx, q, dbsqlc.EventListPageByEntityParams{Entity: *f.Entity,
			BeforeID: before, Types: types, ActorID: f.ActorID, Processed: f.Processed, HiddenEntities: f.HiddenEntities, MaxRows: limit})
	case types != nil:
		rows, err = queries.EventListPageByType(ctx, q, dbsqlc.EventListPageByTypeParams{Types: types,
			BeforeID: before, ActorID: f.ActorID, Processed: f.Processed, HiddenEntities: f.HiddenEntities, MaxRows: limit})
	case f.Processed != nil && !*f.Processed:
		rows, err = queries.EventListPageUnprocessed(ctx, q, before, f.ActorID, f.HiddenEntities, limit)
	default:
		rows, err = queries.EventListPage(ctx, q, dbsqlc.EventListPageParams{BeforeID: before, ActorID: f.ActorID,
			Processed: f.Processed, HiddenEntities: f.HiddenEntities, MaxRows: limit})
	}
	if err != nil {
		return EventPage{}, fmt.Errorf("list events: %w", translate(err))
	}
	events, more := pageOf(mapRows(rows, eventFrom), first)
	return EventPage{Events: events, HasNextPage: more}, nil
}

// one converts the row a generated query returned, or wraps its error
// (no row: ErrNotFound) with the action and the key.
func one[R, T any](convert func(R) T, action string, key int64) func(R, error) (T, error) {
	return func(r R, err error) (T, error) {
		if err != nil {
			var zero T
			return zero, fmt.Errorf("%s %d: %w", action, key, translate(err))
		}
		return convert(r), nil
	}
}

// checkFirst checks a page size: 1 to most.
func checkFirst(first, most int) error {
	if first < 1 || first > most {
		return inputErr("first", "must be between 1 and %d", most)
	}
	return nil
}

// pageOf cuts a page of first rows from rows, read with one more than
// first, and tells whether there are more.
func pageOf[T any](rows []T, first int) ([]T, bool) {
	if len(rows) > first {
		return rows[:first], true
	}
	return rows, false
}

// mapRows converts generated rows to this package's types.
func mapRows[R, T any](rows []R, convert func(R) T) []T {
	out := make([]T, len(rows))
	for i, r := range rows {
		out[i] = convert(r)
	}
	return out
}

// EventPage is one page of ListEvents, newest first.
type EventPage struct {
	Events      []Event
	HasNextPage bool
}

// types is the type filter as the queries take it: nil matches every type.
func (f EventFilter) types() []string {
	if len(f.Types) == 0 {
		return nil
	}
	return f.Types
}

// EventsProcessedAfter returns up to limit processed events matching f whose
// feed sequence is greater than seq, in feed order: the back-fill of a
// resumed live feed.
func EventsProcessedAfter(ctx context.Context, q Querier, f EventFilter, seq int64, limit int) ([]Event, error) {
	rows, err := queries.EventListProcessedAfter(ctx, q, dbsqlc.EventListProcessedAfterParams{AfterSeq: seq,
		Types: f.types(), Entity: f.Entity, EntityID: f.EntityID, ActorID: f.ActorID, Processed: f.Processed,
		HiddenEntities: f.HiddenEntities, MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("events after feed seq %d: %w", seq, translate(err))
	}
	return mapRows(rows, eventFrom), nil
}

// EventByID returns one journal event, or ErrNotFound.
func EventByID(ctx context.Context, q Querier, id int64) (Event, error) {
	return one(eventFrom, "get event", id)(queries.EventGetByID(ctx, q, id))
}

// EventsByIDs returns the journal events with the given ids, in id order;
// ids that do not exist are skipped.
func EventsByIDs(ctx context.Context, q Querier, ids []int64) ([]Event, error) {
	rows, err := queries.EventListByIDs(ctx, q, ids)
	if err != nil {
		return nil, fmt.Errorf("get %d events: %w", len(ids), translate(err))
	}
	return mapRows(rows, eventFrom), nil
}

// appendEvent writes one journal row in tx, the document's transaction; the
// payload must marshal to a JSON object. created_at is the database clock;
// trace_parent is the span in ctx, if any.
func appendEvent(ctx context.Context, tx pgx.Tx, actorID *int64, typ, entity string, entityID int64, payload any) (Event, error) {
	body, err := json.Marshal(payload)
	if err != nil {
		return Event{}, fmt.Errorf("marshal %s payload: %w", typ, err)
	}
	row, err := queries.EventInsert(ctx, tx, dbsqlc.EventInsertParams{Type: typ, Entity: entity, EntityID: entityID,
		Payload: body, ActorID: actorID, TraceParent: traceParent(ctx)})
	if err != nil {
		return Event{}, fmt.Errorf("append %s for %s #%d: %w", typ, entity, entityID, translate(err))
	}
	ev := eventFrom(dbsqlc.EventRow(row))
	if row.DispatchJobID != nil {
		ev.NewDispatchJobID = *row.DispatchJobID
	}
	return ev, nil
}

// eventFrom is the journal row as this package hands it out.
func eventFrom(r dbsqlc.EventRow) Event {
	return Event{ID: r.ID, Type: r.Type, Entity: r.Entity, EntityID: r.EntityID, Payload: r.Payload,
		CreatedAt: r.CreatedAt, DispatchedAt: r.DispatchedAt, ProcessedAt: r.ProcessedAt, FeedSeq: r.FeedSeq,
		ActorID: r.ActorID, ActorLogin: r.ActorLogin, ActorName: r.ActorName, ActorRole: r.ActorRole,
		TraceParent: r.TraceParent}
}
