package db

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

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
	EntitySalesOrders     = "sales_orders"
	EntityProdOrders      = "plan_prod_orders"
	EntityWarehouseMoves  = "wh_moves"
	EntityPurchaseOrders  = "wh_purchase_orders"
	EntityUsers           = "users"
	notifyEventProcessed  = "event_processed"
	maxEventPageSize      = 500
	cursorVersion         = "e1"
	cursorNoFeedSeq       = "-"
	eventColumnsFromJoin  = `e.id, e.type, e.entity, e.entity_id, e.payload, e.created_at, e.dispatched_at, e.processed_at, e.feed_seq, e.actor_id, u.login AS actor_login, u.display_name AS actor_name, u.role AS actor_role`
	eventFromJoinedActors = `events e LEFT JOIN users u ON u.id = e.actor_id`
)

// Event is one row of the journal (table events) with its actor's names
// joined in. Payload is a JSON object in the shapes DESIGN.md gives.
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
}

// Object names the event's row as the old screen did: "sales_orders #22".
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

// ParseCursor decodes Event.Cursor; a malformed value is an *InputError on
// field.
func ParseCursor(field, s string) (Cursor, error) {
	bad := inputErr(field, "not a cursor returned by this server")
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return Cursor{}, bad
	}
	parts := strings.Split(string(raw), ":")
	if len(parts) != 3 || parts[0] != cursorVersion {
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
	return c, nil
}

// EventFilter selects journal rows; zero fields match everything.
type EventFilter struct {
	Types     []string
	Entity    *string
	EntityID  *int64
	ActorID   *int64
	Processed *bool
}

// Matches tells whether ev passes f, the same test the SQL of ListEvents
// applies; the live feed uses it.
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
	return true
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

const eventFilterSQL = `
	($1::text[] IS NULL OR e.type = ANY($1))
	AND ($2::text IS NULL OR e.entity = $2)
	AND ($3::bigint IS NULL OR e.entity_id = $3)
	AND ($4::bigint IS NULL OR e.actor_id = $4)
	AND ($5::boolean IS NULL OR (e.processed_at IS NOT NULL) = $5)`

func (f EventFilter) args() []any {
	var types []string
	if len(f.Types) > 0 {
		types = f.Types
	}
	return []any{types, f.Entity, f.EntityID, f.ActorID, f.Processed}
}

// EventPage is one page of ListEvents, newest first.
type EventPage struct {
	Events      []Event
	HasNextPage bool
}

// ListEvents returns up to first (1…500) journal events
// matching f, newest first, starting after the cursor after (empty = from
// the newest). A bad first or cursor is an *InputError.
func ListEvents(ctx context.Context, q Querier, f EventFilter, first int, after string) (EventPage, error) {
	if first < 1 || first > maxEventPageSize {
		return EventPage{}, inputErr("first", "must be between 1 and %d", maxEventPageSize)
	}
	var before *int64
	if after != "" {
		c, err := ParseCursor("after", after)
		if err != nil {
			return EventPage{}, err
		}
		before = &c.ID
	}
	args := append(f.args(), before, first+1)
	rows, err := q.Query(ctx, `SELECT `+eventColumnsFromJoin+` FROM `+eventFromJoinedActors+`
		WHERE `+eventFilterSQL+` AND ($6::bigint IS NULL OR e.id < $6)
		ORDER BY e.id DESC LIMIT $7`, args...)
	if err != nil {
		return EventPage{}, fmt.Errorf("list events: %w", err)
	}
	events, err := pgx.CollectRows(rows, pgx.RowToStructByName[Event])
	if err != nil {
		return EventPage{}, fmt.Errorf("list events: %w", err)
	}
	page := EventPage{Events: events}
	if len(events) > first {
		page.Events, page.HasNextPage = events[:first], true
	}
	return page, nil
}

// EventsProcessedAfter returns up to limit processed events matching f whose
// feed sequence is greater than seq, in feed order: the back-fill of a
// resumed live feed.
func EventsProcessedAfter(ctx context.Context, q Querier, f EventFilter, seq int64, limit int) ([]Event, error) {
	args := append(f.args(), seq, limit)
	rows, err := q.Query(ctx, `SELECT `+eventColumnsFromJoin+` FROM `+eventFromJoinedActors+`
		WHERE `+eventFilterSQL+` AND e.feed_seq > $6
		ORDER BY e.feed_seq LIMIT $7`, args...)
	if err != nil {
		return nil, fmt.Errorf("events after feed seq %d: %w", seq, err)
	}
	events, err := pgx.CollectRows(rows, pgx.RowToStructByName[Event])
	if err != nil {
		return nil, fmt.Errorf("events after feed seq %d: %w", seq, err)
	}
	return events, nil
}

// EventByID returns one journal event, or ErrNotFound.
func EventByID(ctx context.Context, q Querier, id int64) (Event, error) {
	rows, err := q.Query(ctx, `SELECT `+eventColumnsFromJoin+` FROM `+eventFromJoinedActors+` WHERE e.id = $1`, id)
	if err != nil {
		return Event{}, fmt.Errorf("get event %d: %w", id, err)
	}
	ev, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Event])
	if err != nil {
		return Event{}, fmt.Errorf("get event %d: %w", id, translate(err))
	}
	return ev, nil
}

// EventsByIDs returns the journal events with the given ids, in id order;
// ids that do not exist are skipped.
func EventsByIDs(ctx context.Context, q Querier, ids []int64) ([]Event, error) {
	rows, err := q.Query(ctx, `SELECT `+eventColumnsFromJoin+` FROM `+eventFromJoinedActors+` WHERE e.id = ANY($1) ORDER BY e.id`, ids)
	if err != nil {
		return nil, fmt.Errorf("get %d events: %w", len(ids), err)
	}
	events, err := pgx.CollectRows(rows, pgx.RowToStructByName[Event])
	if err != nil {
		return nil, fmt.Errorf("get %d events: %w", len(ids), err)
	}
	return events, nil
}

// appendEvent writes one journal row in tx, the document's transaction; the
// payload must marshal to a JSON object. created_at is the database clock.
func appendEvent(ctx context.Context, tx pgx.Tx, actorID *int64, typ, entity string, entityID int64, payload any) (Event, error) {
	body, err := json.Marshal(payload)
	if err != nil {
		return Event{}, fmt.Errorf("marshal %s payload: %w", typ, err)
	}
	rows, err := tx.Query(ctx, `
		WITH e AS (
			INSERT INTO events (type, entity, entity_id, payload, actor_id)
			VALUES ($1, $2, $3, $4, $5) RETURNING *
		)
		SELECT `+eventColumnsFromJoin+` FROM e LEFT JOIN users u ON u.id = e.actor_id`,
		typ, entity, entityID, body, actorID)
	if err != nil {
		return Event{}, fmt.Errorf("append %s for %s #%d: %w", typ, entity, entityID, err)
	}
	ev, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Event])
	if err != nil {
		return Event{}, fmt.Errorf("append %s for %s #%d: %w", typ, entity, entityID, err)
	}
	return ev, nil
}

// LockUndispatchedEvent locks event id in tx for dispatch, waiting while
// another transaction holds it. It returns ErrNotFound when the event does
// not exist or is dispatched (or processed) already, without waiting when
// that is committed; after a wait READ COMMITTED re-checks the row, so every
// event is dispatched by exactly one committed transaction.
func LockUndispatchedEvent(ctx context.Context, tx pgx.Tx, id int64) (Event, error) {
	return lockUndispatchedEvent(ctx, tx, id, "")
}

// TryLockUndispatchedEvent is LockUndispatchedEvent that does not wait:
// ErrLocked when another transaction holds the event.
func TryLockUndispatchedEvent(ctx context.Context, tx pgx.Tx, id int64) (Event, error) {
	return lockUndispatchedEvent(ctx, tx, id, "NOWAIT")
}

func lockUndispatchedEvent(ctx context.Context, tx pgx.Tx, id int64, nowait string) (Event, error) {
	rows, err := tx.Query(ctx, `
		WITH e AS (
			SELECT * FROM events WHERE id = $1 AND dispatched_at IS NULL AND processed_at IS NULL FOR UPDATE `+nowait+`
		)
		SELECT `+eventColumnsFromJoin+` FROM e LEFT JOIN users u ON u.id = e.actor_id`, id)
	if err != nil {
		return Event{}, fmt.Errorf("lock event %d: %w", id, translate(err))
	}
	ev, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Event])
	if err != nil {
		return Event{}, fmt.Errorf("lock event %d: %w", id, translate(err))
	}
	return ev, nil
}

// MarkEventProcessed marks event id processed (MarkEventsProcessed); an
// event already processed or missing is ErrNotFound.
func MarkEventProcessed(ctx context.Context, tx pgx.Tx, id int64) error {
	marked, err := MarkEventsProcessed(ctx, tx, []int64{id})
	if err == nil && len(marked) != 1 {
		err = fmt.Errorf("mark event %d processed: %w", id, ErrNotFound)
	}
	return err
}

// ProcessedEvent is an event MarkEventsProcessed marked, with its dispatch
// latency: processed_at − created_at, both database times.
type ProcessedEvent struct {
	ID      int64
	Latency time.Duration
}

// MarkEventsProcessed sets processed_at (database clock) on those of the
// events ids not processed yet and gives them the next feed sequences, in
// id order, and queues one NOTIFY on channel event_processed whose payload
// is the highest sequence, delivered when tx commits. Taking the sequences
// locks the single feed_counter row until commit, so sequences commit, and
// notifications arrive, in increasing order: call it last in a
// transaction. It returns the events it marked, in id order.
func MarkEventsProcessed(ctx context.Context, tx pgx.Tx, ids []int64) ([]ProcessedEvent, error) {
	return markProcessed(ctx, tx, ids, false)
}

// FinishEvents is MarkEventsProcessed for those of the events ids none of
// whose deliveries is open (pending or failed) any more. The caller holds
// the events' locks (FinishEventsIfDone takes them).
func FinishEvents(ctx context.Context, tx pgx.Tx, ids []int64) ([]ProcessedEvent, error) {
	return markProcessed(ctx, tx, ids, true)
}

func markProcessed(ctx context.Context, tx pgx.Tx, ids []int64, onlyDone bool) ([]ProcessedEvent, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, `
		WITH todo AS (
			SELECT id, row_number() OVER (ORDER BY id) AS n, count(*) OVER () AS total
			FROM events e WHERE id = ANY($1) AND processed_at IS NULL
			  AND NOT ($3 AND EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = e.id AND d.status IN ('pending', 'failed')))
		), s AS (
			UPDATE feed_counter SET last_seq = last_seq + (SELECT count(*) FROM todo)
			WHERE EXISTS (SELECT 1 FROM todo)
			RETURNING last_seq
		), e AS (
			UPDATE events SET processed_at = clock_timestamp(), feed_seq = s.last_seq - todo.total + todo.n
			FROM todo, s WHERE events.id = todo.id AND events.processed_at IS NULL
			RETURNING events.id, events.feed_seq, events.processed_at - events.created_at AS latency
		)
		SELECT id, extract(epoch FROM latency)::float8, pg_notify($2, (max(feed_seq) OVER ())::text)
		FROM e ORDER BY id`, ids, notifyEventProcessed, onlyDone)
	if err != nil {
		return nil, fmt.Errorf("mark %d events processed: %w", len(ids), err)
	}
	marked, err := collectProcessed(rows)
	if err != nil {
		return nil, fmt.Errorf("mark %d events processed: %w", len(ids), err)
	}
	return marked, nil
}

// collectProcessed reads what the marking statements return, one row per
// event marked: its id, its latency in seconds and the NOTIFY's result.
func collectProcessed(rows pgx.Rows) ([]ProcessedEvent, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ProcessedEvent, error) {
		var p ProcessedEvent
		var latency float64
		var notified any
		err := row.Scan(&p.ID, &latency, &notified)
		p.Latency = time.Duration(latency * float64(time.Second))
		return p, err
	})
}
