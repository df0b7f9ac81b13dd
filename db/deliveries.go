package db

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Subscriber kinds and delivery statuses, as stored.
const (
	SubscriberBuiltin = "builtin"
	SubscriberWebhook = "webhook"

	DeliveryPending   = "pending"
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed"
	DeliveryDead      = "dead"

	// EventRedelivered is journaled when an operator asks for a delivery to
	// be made again; it is about the same document as the redelivered event.
	EventRedelivered = "delivery.redelivered"

	maxDeliveryPage    = 500
	maxSubscriberTypes = 100
	maxWebhookURL      = 2048
	maxWebhookSecret   = 256
	maxLastErrorLen    = 2000
	deliveryCursorTag  = "d1"
	subscriberColumns  = `s.id, s.name, s.kind, s.event_types, s.url, s.secret IS NOT NULL AND s.secret <> '' AS has_secret, s.max_attempts, s.timeout_ms, s.paused, s.created_at, s.updated_at`
	deliveryColumns    = `d.event_id, d.subscriber_id, s.name AS subscriber_name, d.status, d.attempts, d.last_error, d.response_status, d.response_body, d.next_attempt_at, d.delivered_at, d.duration_ms, d.created_at, d.updated_at`
	deliveriesJoinSubs = `deliveries d JOIN subscribers s ON s.id = d.subscriber_id`
)

// Subscriber is a row of subscribers: a built-in handler or a webhook.
// The webhook secret is never read back out; HasSecret tells whether one is
// set.
type Subscriber struct {
	ID          int64     `db:"id"`
	Name        string    `db:"name"`
	Kind        string    `db:"kind"`
	EventTypes  []string  `db:"event_types"`
	URL         *string   `db:"url"`
	HasSecret   bool      `db:"has_secret"`
	MaxAttempts int32     `db:"max_attempts"`
	TimeoutMs   int32     `db:"timeout_ms"`
	Paused      bool      `db:"paused"`
	CreatedAt   time.Time `db:"created_at"`
	UpdatedAt   time.Time `db:"updated_at"`
}

// Delivery is one (event, subscriber) delivery record.
type Delivery struct {
	EventID        int64      `db:"event_id"`
	SubscriberID   int64      `db:"subscriber_id"`
	SubscriberName string     `db:"subscriber_name"`
	Status         string     `db:"status"`
	Attempts       int32      `db:"attempts"`
	LastError      *string    `db:"last_error"`
	ResponseStatus *int32     `db:"response_status"`
	ResponseBody   *string    `db:"response_body"`
	NextAttemptAt  time.Time  `db:"next_attempt_at"`
	DeliveredAt    *time.Time `db:"delivered_at"`
	DurationMs     *int32     `db:"duration_ms"`
	CreatedAt      time.Time  `db:"created_at"`
	UpdatedAt      time.Time  `db:"updated_at"`
}

// Key identifies a delivery.
func (d Delivery) Key() DeliveryKey {
	return DeliveryKey{EventID: d.EventID, SubscriberID: d.SubscriberID}
}

// Cursor is the delivery's opaque position in ListDeliveries order.
func (d Delivery) Cursor() string {
	raw := deliveryCursorTag + ":" + strconv.FormatInt(d.EventID, 10) + ":" + strconv.FormatInt(d.SubscriberID, 10)
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// DeliveryKey identifies a delivery: one event to one subscriber.
type DeliveryKey struct {
	EventID      int64 `db:"event_id"`
	SubscriberID int64 `db:"subscriber_id"`
}

// UpsertBuiltinSubscriber records a built-in subscriber and the event types
// it takes, so deliveries to it are recorded like any other. Run at start.
func UpsertBuiltinSubscriber(ctx context.Context, q Querier, name string, eventTypes []string) (Subscriber, error) {
	if eventTypes == nil {
		eventTypes = []string{}
	}
	s, err := getOne[Subscriber](ctx, q, `
		WITH s AS (
			INSERT INTO subscribers (name, kind, event_types) VALUES ($1, $2, $3)
			ON CONFLICT (name) DO UPDATE SET event_types = EXCLUDED.event_types, updated_at = now()
			WHERE subscribers.kind = EXCLUDED.kind
			RETURNING *
		) SELECT `+subscriberColumns+` FROM s`, name, SubscriberBuiltin, eventTypes)
	if err != nil {
		return Subscriber{}, fmt.Errorf("register built-in subscriber %s: %w", name, err)
	}
	return s, nil
}

// WebhookSubscriberInput creates or (fields set) updates a webhook
// subscriber. The URL must already be validated by the caller (package jobs
// knows what it can send to).
type WebhookSubscriberInput struct {
	Name        *string
	URL         *string
	EventTypes  []string
	Secret      *string
	MaxAttempts *int32
	TimeoutMs   *int32
}

func (in WebhookSubscriberInput) validate(creating bool) error {
	if creating && (in.Name == nil || in.URL == nil) {
		return inputErr("name", "a webhook subscriber needs a name and a url")
	}
	if in.Name != nil && !validSubscriberName(*in.Name) {
		return inputErr("name", "1 to 64 lowercase letters, digits, '_', '.', '-', starting with a letter or digit")
	}
	if len(in.EventTypes) > maxSubscriberTypes {
		return inputErr("eventTypes", "at most %d event types", maxSubscriberTypes)
	}
	for i, t := range in.EventTypes {
		if strings.TrimSpace(t) == "" || len(t) > 100 {
			return inputErr(fmt.Sprintf("eventTypes.%d", i), "1 to 100 characters")
		}
	}
	if in.URL != nil && len(*in.URL) > maxWebhookURL {
		return inputErr("url", "at most %d characters", maxWebhookURL)
	}
	if in.Secret != nil && len(*in.Secret) > maxWebhookSecret {
		return inputErr("secret", "at most %d characters", maxWebhookSecret)
	}
	if in.MaxAttempts != nil && (*in.MaxAttempts < 1 || *in.MaxAttempts > 100) {
		return inputErr("maxAttempts", "must be between 1 and 100")
	}
	if in.TimeoutMs != nil && (*in.TimeoutMs < 100 || *in.TimeoutMs > 120000) {
		return inputErr("timeoutMs", "must be between 100 and 120000 ms")
	}
	return nil
}

func validSubscriberName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i, r := range s {
		ok := (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || (i > 0 && (r == '_' || r == '.' || r == '-'))
		if !ok {
			return false
		}
	}
	return true
}

// CreateWebhookSubscriber inserts a webhook subscriber. A taken name is an
// *InputError on "name" matching ErrConflict.
func CreateWebhookSubscriber(ctx context.Context, q Querier, in WebhookSubscriberInput) (Subscriber, error) {
	if err := in.validate(true); err != nil {
		return Subscriber{}, err
	}
	types := in.EventTypes
	if types == nil {
		types = []string{}
	}
	s, err := getOne[Subscriber](ctx, q, `
		WITH s AS (
			INSERT INTO subscribers (name, kind, url, event_types, secret, max_attempts, timeout_ms)
			VALUES ($1, $2, $3, $4, $5, coalesce($6, 10), coalesce($7, 10000))
			RETURNING *
		) SELECT `+subscriberColumns+` FROM s`,
		*in.Name, SubscriberWebhook, *in.URL, types, in.Secret, in.MaxAttempts, in.TimeoutMs)
	if err != nil {
		if errors.Is(err, ErrConflict) {
			return Subscriber{}, conflictOn("name", "a subscriber named %q exists", *in.Name)
		}
		return Subscriber{}, fmt.Errorf("insert webhook subscriber %s: %w", *in.Name, err)
	}
	return s, nil
}

// UpdateWebhookSubscriber changes the given fields of webhook subscriber id
// (EventTypes nil keeps them; empty means every type). ErrNotFound if there
// is no such webhook subscriber.
func UpdateWebhookSubscriber(ctx context.Context, q Querier, id int64, in WebhookSubscriberInput) (Subscriber, error) {
	if err := in.validate(false); err != nil {
		return Subscriber{}, err
	}
	s, err := getOne[Subscriber](ctx, q, `
		WITH s AS (
			UPDATE subscribers SET
				name = coalesce($2, name), url = coalesce($3, url),
				event_types = coalesce($4, event_types), secret = coalesce($5, secret),
				max_attempts = coalesce($6, max_attempts), timeout_ms = coalesce($7, timeout_ms),
				updated_at = now()
			WHERE id = $1 AND kind = 'webhook'
			RETURNING *
		) SELECT `+subscriberColumns+` FROM s`,
		id, in.Name, in.URL, in.EventTypes, in.Secret, in.MaxAttempts, in.TimeoutMs)
	if err != nil {
		if errors.Is(err, ErrConflict) {
			return Subscriber{}, conflictOn("name", "a subscriber named %q exists", *in.Name)
		}
		return Subscriber{}, fmt.Errorf("update webhook subscriber %d: %w", id, err)
	}
	return s, nil
}

// SetSubscriberPaused pauses or resumes subscriber id. A paused
// subscriber's deliveries are recorded but held (their events stay
// unprocessed) until it is resumed. It returns the subscriber and the keys
// of its open deliveries (to schedule on resume).
func SetSubscriberPaused(ctx context.Context, tx pgx.Tx, id int64, paused bool) (Subscriber, []DeliveryKey, error) {
	s, err := getOne[Subscriber](ctx, tx, `
		WITH s AS (UPDATE subscribers SET paused = $2, updated_at = now() WHERE id = $1 RETURNING *)
		SELECT `+subscriberColumns+` FROM s`, id, paused)
	if err != nil {
		return Subscriber{}, nil, fmt.Errorf("set subscriber %d paused=%t: %w", id, paused, err)
	}
	if paused {
		return s, nil, nil
	}
	rows, err := tx.Query(ctx, `SELECT event_id, subscriber_id FROM deliveries
		WHERE subscriber_id = $1 AND status IN ('pending', 'failed') ORDER BY event_id`, id)
	if err != nil {
		return Subscriber{}, nil, fmt.Errorf("open deliveries of subscriber %d: %w", id, err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowToStructByName[DeliveryKey])
	if err != nil {
		return Subscriber{}, nil, fmt.Errorf("open deliveries of subscriber %d: %w", id, err)
	}
	return s, keys, nil
}

// SubscriberByID returns subscriber id, or ErrNotFound.
func SubscriberByID(ctx context.Context, q Querier, id int64) (Subscriber, error) {
	s, err := getOne[Subscriber](ctx, q, `SELECT `+subscriberColumns+` FROM subscribers s WHERE s.id = $1`, id)
	if err != nil {
		return Subscriber{}, fmt.Errorf("get subscriber %d: %w", id, err)
	}
	return s, nil
}

// SubscribersByIDs returns the subscribers with the given ids (table
// subscribers), in id order; ids that do not exist are skipped.
func SubscribersByIDs(ctx context.Context, q Querier, ids []int64) ([]Subscriber, error) {
	rows, err := q.Query(ctx, `SELECT `+subscriberColumns+` FROM subscribers s WHERE s.id = ANY($1) ORDER BY s.id`, ids)
	if err != nil {
		return nil, fmt.Errorf("get %d subscribers: %w", len(ids), err)
	}
	subs, err := pgx.CollectRows(rows, pgx.RowToStructByName[Subscriber])
	if err != nil {
		return nil, fmt.Errorf("get %d subscribers: %w", len(ids), err)
	}
	return subs, nil
}

// Subscribers lists every subscriber by name.
func Subscribers(ctx context.Context, q Querier) ([]Subscriber, error) {
	rows, err := q.Query(ctx, `SELECT `+subscriberColumns+` FROM subscribers s ORDER BY s.name`)
	if err != nil {
		return nil, fmt.Errorf("list subscribers: %w", err)
	}
	subs, err := pgx.CollectRows(rows, pgx.RowToStructByName[Subscriber])
	if err != nil {
		return nil, fmt.Errorf("list subscribers: %w", err)
	}
	return subs, nil
}

// WebhookTarget is what sending needs of a webhook subscriber, secret
// included; it never leaves package jobs.
type WebhookTarget struct {
	URL       string `db:"url"`
	Secret    string `db:"secret"`
	TimeoutMs int32  `db:"timeout_ms"`
}

// WebhookTargetOf returns the endpoint of webhook subscriber id.
func WebhookTargetOf(ctx context.Context, q Querier, id int64) (WebhookTarget, error) {
	t, err := getOne[WebhookTarget](ctx, q, `
		SELECT url, coalesce(secret, '') AS secret, timeout_ms FROM subscribers WHERE id = $1 AND kind = 'webhook'`, id)
	if err != nil {
		return WebhookTarget{}, fmt.Errorf("webhook target %d: %w", id, err)
	}
	return t, nil
}

// DispatchStart is what StartDispatch created and saw.
type DispatchStart struct {
	// Due are the subscribers of the new deliveries, by id, except paused
	// ones (their deliveries are held).
	Due []Subscriber
	// Any reports whether the event had any delivery at all.
	Any bool
	// Earlier and Later report whether the event's document (entity and
	// id) has events before and after it. Only then can the document's
	// order hold a delivery of this event back, or this event hold one of
	// a later event. Unknown (true) when the event had no delivery.
	Earlier, Later bool
	// Waited is how long the event waited for its dispatch (dispatched_at
	// − created_at, both database times); unknown (an hour) when it had no
	// delivery.
	Waited time.Duration
}

// StartDispatch creates the delivery records of event ev, one per
// subscriber whose types match, and stamps the event dispatched.
func StartDispatch(ctx context.Context, tx pgx.Tx, ev Event) (DispatchStart, error) {
	rows, err := tx.Query(ctx, `
		WITH ins AS (
			INSERT INTO deliveries (event_id, subscriber_id)
			SELECT $1, s.id FROM subscribers s
			WHERE cardinality(s.event_types) = 0 OR $2 = ANY (s.event_types)
			ON CONFLICT DO NOTHING
			RETURNING subscriber_id
		), stamp AS (
			UPDATE events SET dispatched_at = clock_timestamp() WHERE id = $1
			RETURNING extract(epoch FROM dispatched_at - created_at)::float8 AS waited
		), doc AS (
			SELECT EXISTS (SELECT 1 FROM events WHERE entity = $3 AND entity_id = $4 AND id < $1) AS earlier,
			       EXISTS (SELECT 1 FROM events WHERE entity = $3 AND entity_id = $4 AND id > $1) AS later
		)
		SELECT `+subscriberColumns+`, doc.earlier, doc.later, stamp.waited
		FROM ins JOIN subscribers s ON s.id = ins.subscriber_id CROSS JOIN doc CROSS JOIN stamp
		ORDER BY s.id`, ev.ID, ev.Type, ev.Entity, ev.EntityID)
	if err != nil {
		return DispatchStart{}, fmt.Errorf("create deliveries of event %d: %w", ev.ID, err)
	}
	type created struct {
		Subscriber
		Earlier bool    `db:"earlier"`
		Later   bool    `db:"later"`
		Waited  float64 `db:"waited"`
	}
	all, err := pgx.CollectRows(rows, pgx.RowToStructByName[created])
	if err != nil {
		return DispatchStart{}, fmt.Errorf("create deliveries of event %d: %w", ev.ID, err)
	}
	if len(all) == 0 {
		return DispatchStart{Earlier: true, Later: true, Waited: time.Hour}, nil
	}
	st := DispatchStart{Any: true, Earlier: all[0].Earlier, Later: all[0].Later,
		Waited: time.Duration(all[0].Waited * float64(time.Second))}
	for _, c := range all {
		if !c.Paused {
			st.Due = append(st.Due, c.Subscriber)
		}
	}
	return st, nil
}

// LockOpenDelivery locks delivery k for an attempt if it is open (pending or
// failed). ErrNotFound means there is nothing to do: it is delivered or
// dead, or another worker holds it right now (SKIP LOCKED).
func LockOpenDelivery(ctx context.Context, tx pgx.Tx, k DeliveryKey) (Delivery, error) {
	d, err := getOne[Delivery](ctx, tx, `
		WITH d AS (
			SELECT * FROM deliveries WHERE event_id = $1 AND subscriber_id = $2
			AND status IN ('pending', 'failed') FOR UPDATE SKIP LOCKED
		)
		SELECT `+deliveryColumns+` FROM d JOIN subscribers s ON s.id = d.subscriber_id`, k.EventID, k.SubscriberID)
	if err != nil {
		return Delivery{}, fmt.Errorf("lock delivery %d/%d: %w", k.EventID, k.SubscriberID, err)
	}
	return d, nil
}

// DeliveryBlocked reports whether subscriber subID must not receive ev yet
// because an earlier event of the same document (entity and id) has not
// reached it; see BlockedSubscribers.
func DeliveryBlocked(ctx context.Context, tx pgx.Tx, ev Event, subID int64) (bool, error) {
	blocked, err := BlockedSubscribers(ctx, tx, ev, []int64{subID})
	return blocked[subID], err
}

// BlockedSubscribers returns which of the subscribers subIDs must not
// receive ev yet because an earlier event of the same document (entity and
// id) has not reached them: that event is not dispatched yet, or its
// delivery to the subscriber is pending or failed. A dead earlier delivery
// does not block (it would hold the document forever); redelivering it
// blocks again until it is done.
//
// It first share-locks the document's earlier unprocessed events, waiting
// for a dispatch or a finishing delivery of them in flight, and then checks
// in a fresh statement, which sees what those committed: a concurrent
// predecessor is never missed.
func BlockedSubscribers(ctx context.Context, tx pgx.Tx, ev Event, subIDs []int64) (map[int64]bool, error) {
	return blockedSubscribers(ctx, tx, ev, subIDs, "")
}

// TryBlockedSubscribers is BlockedSubscribers that does not wait for an
// earlier event another transaction holds: ErrLocked.
func TryBlockedSubscribers(ctx context.Context, tx pgx.Tx, ev Event, subIDs []int64) (map[int64]bool, error) {
	return blockedSubscribers(ctx, tx, ev, subIDs, "NOWAIT")
}

// earlierHoldsBack is the document-order rule in SQL: an earlier event p
// of the same document holds back a later event's delivery to a subscriber
// while p's delivery pd to that subscriber (LEFT JOINed: pd.event_id NULL
// when there is none) is open, or while p has not been dispatched yet (its
// deliveries are not known).
const earlierHoldsBack = `(pd.status IN ('pending', 'failed')
	OR (pd.event_id IS NULL AND p.processed_at IS NULL AND p.dispatched_at IS NULL))`

func blockedSubscribers(ctx context.Context, tx pgx.Tx, ev Event, subIDs []int64, nowait string) (map[int64]bool, error) {
	// Usually nothing came before ev, or all of it is done: the locking
	// statement finds nothing to lock and no open delivery (it checks
	// that too), and the second statement is saved. Anything found may
	// be stale, though (a lock wait ends on a commit the statement's
	// snapshot predates): then the second statement decides.
	var earlier int
	var ids []int64
	err := tx.QueryRow(ctx, `
		WITH earlier AS (
			SELECT id FROM events WHERE entity = $1 AND entity_id = $2 AND id < $3 AND processed_at IS NULL
			FOR SHARE `+nowait+`
		)
		SELECT (SELECT count(*) FROM earlier), ARRAY(
			SELECT sub.id FROM unnest($4::bigint[]) sub (id)
			WHERE EXISTS (
				SELECT 1 FROM events p JOIN deliveries pd ON pd.event_id = p.id AND pd.subscriber_id = sub.id
				WHERE p.entity = $1 AND p.entity_id = $2 AND p.id < $3 AND pd.status IN ('pending', 'failed')))`,
		ev.Entity, ev.EntityID, ev.ID, subIDs).Scan(&earlier, &ids)
	if err != nil {
		return nil, fmt.Errorf("lock events before %d: %w", ev.ID, translate(err))
	}
	if earlier > 0 || len(ids) > 0 {
		rows, err := tx.Query(ctx, `
			SELECT sub.id FROM unnest($4::bigint[]) sub (id)
			WHERE EXISTS (
				SELECT 1 FROM events p
				LEFT JOIN deliveries pd ON pd.event_id = p.id AND pd.subscriber_id = sub.id
				WHERE p.entity = $1 AND p.entity_id = $2 AND p.id < $3 AND `+earlierHoldsBack+`
			)`, ev.Entity, ev.EntityID, ev.ID, subIDs)
		if err != nil {
			return nil, fmt.Errorf("check order of event %d: %w", ev.ID, err)
		}
		if ids, err = collectIDs(rows); err != nil {
			return nil, fmt.Errorf("check order of event %d: %w", ev.ID, err)
		}
	}
	return setOf(ids), nil
}

// setOf returns the set of xs, as the order checks report blocked
// subscribers or deliveries.
func setOf[T comparable](xs []T) map[T]bool {
	set := make(map[T]bool, len(xs))
	for _, x := range xs {
		set[x] = true
	}
	return set
}

// Attempt is the outcome of one delivery attempt, as RecordAttempt stores it.
type Attempt struct {
	// Status is DeliveryDelivered, DeliveryFailed (retry after RetryIn) or
	// DeliveryDead.
	Status         string
	Error          string
	ResponseStatus int
	ResponseBody   string
	Duration       time.Duration
	RetryIn        time.Duration
}

// RecordAttempt stores an attempt on the locked delivery k: one more
// attempt, its result, and for a failure the next attempt time (database
// clock + RetryIn).
func RecordAttempt(ctx context.Context, tx pgx.Tx, k DeliveryKey, a Attempt) (Delivery, error) {
	var lastErr, body *string
	var status *int32
	if a.Error != "" {
		e := truncate(a.Error, maxLastErrorLen)
		lastErr = &e
	}
	if a.ResponseStatus != 0 {
		s := int32(a.ResponseStatus)
		status = &s
		body = &a.ResponseBody
	}
	d, err := getOne[Delivery](ctx, tx, `
		WITH d AS (
			UPDATE deliveries SET
				status = $3, attempts = attempts + 1, last_error = $4,
				response_status = $5, response_body = $6, duration_ms = $7,
				delivered_at = CASE WHEN $3 = 'delivered' THEN clock_timestamp() END,
				next_attempt_at = clock_timestamp() + make_interval(secs => $8),
				updated_at = clock_timestamp()
			WHERE event_id = $1 AND subscriber_id = $2
			RETURNING *
		) SELECT `+deliveryColumns+` FROM d JOIN subscribers s ON s.id = d.subscriber_id`,
		k.EventID, k.SubscriberID, a.Status, lastErr, status, body,
		int32(a.Duration/time.Millisecond), a.RetryIn.Seconds())
	if err != nil {
		return Delivery{}, fmt.Errorf("record attempt of delivery %d/%d: %w", k.EventID, k.SubscriberID, err)
	}
	return d, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// FinishEventsIfDone locks the events ids and marks processed those none
// of whose deliveries is open any more (FinishEvents). Locking first means
// two deliveries finishing at once cannot both miss the moment: each
// re-reads the others' committed state after the lock. It returns the
// events it marked, in id order, with their dispatch latency.
func FinishEventsIfDone(ctx context.Context, tx pgx.Tx, ids []int64) ([]ProcessedEvent, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM events WHERE id = ANY($1) AND processed_at IS NULL ORDER BY id FOR UPDATE`, ids); err != nil {
		return nil, fmt.Errorf("lock %d events: %w", len(ids), err)
	}
	return FinishEvents(ctx, tx, ids)
}

// ClaimUndispatchedEvents locks and returns up to limit undispatched,
// unprocessed events after afterID, oldest first, skipping those another
// transaction holds: the backlog a dispatch transaction takes on besides
// its own event (afterID). Starting after it skips the index entries of
// the events dispatched just before, not vacuumed yet; an older event still
// waiting has its own job.
func ClaimUndispatchedEvents(ctx context.Context, tx pgx.Tx, afterID int64, limit int) ([]Event, error) {
	rows, err := tx.Query(ctx, `
		WITH e AS (
			SELECT * FROM events WHERE dispatched_at IS NULL AND processed_at IS NULL AND id > $1
			ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED
		)
		SELECT `+eventColumnsFromJoin+` FROM e LEFT JOIN users u ON u.id = e.actor_id ORDER BY e.id`, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("claim undispatched events: %w", err)
	}
	events, err := pgx.CollectRows(rows, pgx.RowToStructByName[Event])
	if err != nil {
		return nil, fmt.Errorf("claim undispatched events: %w", err)
	}
	return events, nil
}

// LaterOpenDeliveries returns the open, due deliveries of events after ev
// of the same document, to subscriber subID or, when nil, to any
// subscriber: the ones that waiting for ev may have held back. "Due" is
// by the clock at the query, not at our transaction's start: a held-back
// delivery created by a transaction that began after ours is due too.
func LaterOpenDeliveries(ctx context.Context, q Querier, ev Event, subID *int64) ([]DeliveryKey, error) {
	rows, err := q.Query(ctx, `
		SELECT d.event_id, d.subscriber_id FROM deliveries d JOIN events e ON e.id = d.event_id
		JOIN subscribers s ON s.id = d.subscriber_id
		WHERE e.entity = $1 AND e.entity_id = $2 AND e.id > $3 AND ($4::bigint IS NULL OR d.subscriber_id = $4)
		  AND d.status IN ('pending', 'failed') AND d.next_attempt_at <= clock_timestamp() AND NOT s.paused
		ORDER BY d.event_id LIMIT 100`, ev.Entity, ev.EntityID, ev.ID, subID)
	if err != nil {
		return nil, fmt.Errorf("later deliveries after %d: %w", ev.ID, err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowToStructByName[DeliveryKey])
	if err != nil {
		return nil, fmt.Errorf("later deliveries after %d: %w", ev.ID, err)
	}
	return keys, nil
}

// UndispatchedEventIDs returns up to limit ids (> afterID, ascending) of
// unprocessed events whose deliveries were never created: their dispatch
// job was lost or has not run yet.
func UndispatchedEventIDs(ctx context.Context, q Querier, afterID int64, limit int) ([]int64, error) {
	rows, err := q.Query(ctx, `SELECT id FROM events
		WHERE processed_at IS NULL AND dispatched_at IS NULL AND id > $1 ORDER BY id LIMIT $2`, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("list undispatched events: %w", err)
	}
	return collectIDs(rows)
}

// UnfinishedEventIDs returns up to limit ids (> afterID) of dispatched,
// unprocessed events with no open delivery left: a crash came between the
// last delivery and marking the event.
func UnfinishedEventIDs(ctx context.Context, q Querier, afterID int64, limit int) ([]int64, error) {
	rows, err := q.Query(ctx, `SELECT e.id FROM events e
		WHERE e.processed_at IS NULL AND e.dispatched_at IS NOT NULL AND e.id > $1
		  AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = e.id AND d.status IN ('pending', 'failed'))
		ORDER BY e.id LIMIT $2`, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("list unfinished events: %w", err)
	}
	return collectIDs(rows)
}

func collectIDs(rows pgx.Rows) ([]int64, error) {
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("collect ids: %w", err)
	}
	return ids, nil
}

// DueDeliveries returns up to limit open deliveries whose next attempt is
// due, of subscribers not paused, in event order after the key after. Failed
// deliveries wait for their backoff, so a poison event is not retried on
// every sweep.
func DueDeliveries(ctx context.Context, q Querier, after DeliveryKey, limit int) ([]DeliveryKey, error) {
	rows, err := q.Query(ctx, `
		SELECT d.event_id, d.subscriber_id FROM deliveries d JOIN subscribers s ON s.id = d.subscriber_id
		WHERE d.status IN ('pending', 'failed') AND d.next_attempt_at <= now() AND NOT s.paused
		  AND (d.event_id, d.subscriber_id) > ($1, $2)
		ORDER BY d.event_id, d.subscriber_id LIMIT $3`, after.EventID, after.SubscriberID, limit)
	if err != nil {
		return nil, fmt.Errorf("list due deliveries: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowToStructByName[DeliveryKey])
	if err != nil {
		return nil, fmt.Errorf("list due deliveries: %w", err)
	}
	return keys, nil
}

// DeliveriesOfEvent returns the delivery records of one event by subscriber.
func DeliveriesOfEvent(ctx context.Context, q Querier, eventID int64) ([]Delivery, error) {
	rows, err := q.Query(ctx, `SELECT `+deliveryColumns+` FROM `+deliveriesJoinSubs+`
		WHERE d.event_id = $1 ORDER BY s.name`, eventID)
	if err != nil {
		return nil, fmt.Errorf("deliveries of event %d: %w", eventID, err)
	}
	ds, err := pgx.CollectRows(rows, pgx.RowToStructByName[Delivery])
	if err != nil {
		return nil, fmt.Errorf("deliveries of event %d: %w", eventID, err)
	}
	return ds, nil
}

// DeliveryFilter selects delivery records; zero fields match everything.
type DeliveryFilter struct {
	Status     *string
	Subscriber *string
	EventID    *int64
}

// DeliveryPage is one page of ListDeliveries, newest event first.
type DeliveryPage struct {
	Deliveries  []Delivery
	HasNextPage bool
}

// ListDeliveries returns up to first (1…500) deliveries matching f,
// newest event first, after the cursor after. Bad arguments are an
// *InputError.
func ListDeliveries(ctx context.Context, q Querier, f DeliveryFilter, first int, after string) (DeliveryPage, error) {
	if first < 1 || first > maxDeliveryPage {
		return DeliveryPage{}, inputErr("first", "must be between 1 and %d", maxDeliveryPage)
	}
	var afterEvent, afterSub *int64
	if after != "" {
		k, err := parseDeliveryCursor(after)
		if err != nil {
			return DeliveryPage{}, err
		}
		afterEvent, afterSub = &k.EventID, &k.SubscriberID
	}
	rows, err := q.Query(ctx, `SELECT `+deliveryColumns+` FROM `+deliveriesJoinSubs+`
		WHERE ($1::text IS NULL OR d.status = $1) AND ($2::text IS NULL OR s.name = $2)
		  AND ($3::bigint IS NULL OR d.event_id = $3)
		  AND ($4::bigint IS NULL OR (d.event_id, d.subscriber_id) < ($4, $5))
		ORDER BY d.event_id DESC, d.subscriber_id DESC LIMIT $6`,
		f.Status, f.Subscriber, f.EventID, afterEvent, afterSub, first+1)
	if err != nil {
		return DeliveryPage{}, fmt.Errorf("list deliveries: %w", err)
	}
	ds, err := pgx.CollectRows(rows, pgx.RowToStructByName[Delivery])
	if err != nil {
		return DeliveryPage{}, fmt.Errorf("list deliveries: %w", err)
	}
	page := DeliveryPage{Deliveries: ds}
	if len(ds) > first {
		page.Deliveries, page.HasNextPage = ds[:first], true
	}
	return page, nil
}

func parseDeliveryCursor(s string) (DeliveryKey, error) {
	bad := inputErr("after", "not a delivery cursor returned by this server")
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return DeliveryKey{}, bad
	}
	parts := strings.Split(string(raw), ":")
	if len(parts) != 3 || parts[0] != deliveryCursorTag {
		return DeliveryKey{}, bad
	}
	ev, err1 := strconv.ParseInt(parts[1], 10, 64)
	sub, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil {
		return DeliveryKey{}, bad
	}
	return DeliveryKey{EventID: ev, SubscriberID: sub}, nil
}

// Redeliver reopens the deliveries matching f (all statuses; at most limit)
// for a fresh round of attempts and journals one delivery.redelivered event
// per delivery, by actorID, about the redelivered event's document. It
// returns the reopened keys and the new events.
func Redeliver(ctx context.Context, tx pgx.Tx, actorID *int64, f DeliveryFilter, limit int) ([]DeliveryKey, []Event, error) {
	rows, err := tx.Query(ctx, `
		WITH picked AS (
			SELECT d.event_id, d.subscriber_id FROM `+deliveriesJoinSubs+`
			WHERE ($1::text IS NULL OR d.status = $1) AND ($2::text IS NULL OR s.name = $2)
			  AND ($3::bigint IS NULL OR d.event_id = $3)
			ORDER BY d.event_id LIMIT $4
			FOR UPDATE OF d
		)
		UPDATE deliveries d SET status = 'pending', attempts = 0, delivered_at = NULL,
			next_attempt_at = now(), updated_at = now()
		FROM picked WHERE d.event_id = picked.event_id AND d.subscriber_id = picked.subscriber_id
		RETURNING d.event_id, d.subscriber_id`, f.Status, f.Subscriber, f.EventID, limit)
	if err != nil {
		return nil, nil, fmt.Errorf("reopen deliveries: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowToStructByName[DeliveryKey])
	if err != nil {
		return nil, nil, fmt.Errorf("reopen deliveries: %w", err)
	}
	events := make([]Event, 0, len(keys))
	for _, k := range keys {
		orig, err := EventByID(ctx, tx, k.EventID)
		if err != nil {
			return nil, nil, err
		}
		sub, err := SubscriberByID(ctx, tx, k.SubscriberID)
		if err != nil {
			return nil, nil, err
		}
		ev, err := appendEvent(ctx, tx, actorID, EventRedelivered, orig.Entity, orig.EntityID,
			map[string]any{"event_id": k.EventID, "subscriber": sub.Name})
		if err != nil {
			return nil, nil, err
		}
		events = append(events, ev)
	}
	return keys, events, nil
}

// PruneDeliveredDeliveries deletes up to limit delivery records that were
// delivered before before, and returns how many it deleted. Failed and dead
// records are never pruned: they wait for a redelivery or
// PurgeDeadDeliveries.
func PruneDeliveredDeliveries(ctx context.Context, q Querier, before time.Time, limit int) (int64, error) {
	tag, err := q.Exec(ctx, `
		DELETE FROM deliveries WHERE (event_id, subscriber_id) IN (
			SELECT event_id, subscriber_id FROM deliveries
			WHERE status = 'delivered' AND delivered_at < $1
			LIMIT $2)`, before, limit)
	if err != nil {
		return 0, fmt.Errorf("prune deliveries delivered before %s: %w", before.Format(time.RFC3339), err)
	}
	return tag.RowsAffected(), nil
}

// PurgeDeadDeliveries deletes the dead delivery records last attempted
// before before, of the subscriber named subscriber (nil: of every
// subscriber), and returns how many it deleted. Their events stay
// processed; the journal keeps the events themselves.
func PurgeDeadDeliveries(ctx context.Context, q Querier, before time.Time, subscriber *string) (int64, error) {
	tag, err := q.Exec(ctx, `
		DELETE FROM deliveries d USING subscribers s
		WHERE s.id = d.subscriber_id AND d.status = 'dead' AND d.updated_at < $1
		  AND ($2::text IS NULL OR s.name = $2)`, before, subscriber)
	if err != nil {
		return 0, fmt.Errorf("purge dead deliveries before %s: %w", before.Format(time.RFC3339), err)
	}
	return tag.RowsAffected(), nil
}

// DeliveriesOfEvents returns the delivery records of several events in one
// query, by event id (each list by subscriber name); events without
// deliveries map to nothing.
func DeliveriesOfEvents(ctx context.Context, q Querier, eventIDs []int64) (map[int64][]Delivery, error) {
	rows, err := q.Query(ctx, `SELECT `+deliveryColumns+` FROM `+deliveriesJoinSubs+`
		WHERE d.event_id = ANY($1) ORDER BY d.event_id, s.name`, eventIDs)
	if err != nil {
		return nil, fmt.Errorf("deliveries of %d events: %w", len(eventIDs), err)
	}
	ds, err := pgx.CollectRows(rows, pgx.RowToStructByName[Delivery])
	if err != nil {
		return nil, fmt.Errorf("deliveries of %d events: %w", len(eventIDs), err)
	}
	out := make(map[int64][]Delivery, len(eventIDs))
	for _, d := range ds {
		out[d.EventID] = append(out[d.EventID], d)
	}
	return out, nil
}
