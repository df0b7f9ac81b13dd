package db

import (
	"context"
	"encoding/base64"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"erp/db/internal/dbsqlc"
)

// Subscriber kinds and delivery statuses, as stored.
const (
	SubscriberBuiltin = "builtin"
	SubscriberWebhook = "webhook"
	SubscriberNats    = "nats"

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
)

// Delivery is one (event, subscriber) delivery record.
type Delivery struct {
	EventID        int64
	SubscriberID   int64
	SubscriberName string
	Status         string
	Attempts       int32
	LastError      *string
	ResponseStatus *int32
	ResponseBody   *string
	NextAttemptAt  time.Time
	DeliveredAt    *time.Time
	DurationMs     *int32
	CreatedAt      time.Time
	UpdatedAt      time.Time
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
	EventID      int64
	SubscriberID int64
}

// LockOpenDelivery locks delivery k for an attempt if it is open (pending or
// failed) and due (next_attempt_at passed), waiting for a transaction that
// holds it. ErrNotFound means there is nothing to do now: it is delivered
// or dead, its retry is not due (its own job comes then), or it is leased
// for a request in flight.
func LockOpenDelivery(ctx context.Context, tx pgx.Tx, k DeliveryKey) (Delivery, error) {
	row, err := queries.DeliveryLockOpen(ctx, tx, k.EventID, k.SubscriberID)
	if err != nil {
		return Delivery{}, fmt.Errorf("lock delivery %d/%d: %w", k.EventID, k.SubscriberID, translate(err))
	}
	return deliveryFrom(dbsqlc.DeliveryRow(row)), nil
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
	p := dbsqlc.DeliveryRecordAttemptParams{EventID: k.EventID, SubscriberID: k.SubscriberID, Status: a.Status,
		DurationMs: ptr(int32(a.Duration / time.Millisecond)), RetryInS: a.RetryIn.Seconds()}
	if a.Error != "" {
		p.LastError = ptr(truncate(a.Error, maxLastErrorLen))
	}
	if a.ResponseStatus != 0 {
		p.ResponseStatus, p.ResponseBody = ptr(int32(a.ResponseStatus)), &a.ResponseBody
	}
	row, err := queries.DeliveryRecordAttempt(ctx, tx, p)
	if err != nil {
		return Delivery{}, fmt.Errorf("record attempt of delivery %d/%d: %w", k.EventID, k.SubscriberID, translate(err))
	}
	return deliveryFrom(dbsqlc.DeliveryRow(row)), nil
}

func ptr[T any](v T) *T { return &v }

func deliveryFrom(r dbsqlc.DeliveryRow) Delivery {
	return Delivery{EventID: r.EventID, SubscriberID: r.SubscriberID, SubscriberName: r.SubscriberName, Status: r.Status,
		Attempts: r.Attempts, LastError: r.LastError, ResponseStatus: r.ResponseStatus, ResponseBody: r.ResponseBody,
		NextAttemptAt: r.NextAttemptAt, DeliveredAt: r.DeliveredAt, DurationMs: r.DurationMs, CreatedAt: r.CreatedAt,
		UpdatedAt: r.UpdatedAt}
}

// keysFrom converts rows of delivery keys, whichever query returned them.
func keysFrom[R ~struct {
	EventID      int64
	SubscriberID int64
}](rows []R) []DeliveryKey {
	return mapRows(rows, func(r R) DeliveryKey { return DeliveryKey(r) })
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

// LaterOpenDeliveries returns the open, due deliveries of events after ev
// of the same document, to subscriber subID or, when nil, to any
// subscriber: the ones that waiting for ev may have held back. "Due" is
// by the clock at the query, not at our transaction's start: a held-back
// delivery created by a transaction that began after ours is due too.
func LaterOpenDeliveries(ctx context.Context, q Querier, ev Event, subID *int64) ([]DeliveryKey, error) {
	rows, err := queries.DeliveryListLaterOpen(ctx, q, ev.Entity, ev.EntityID, ev.ID, subID)
	if err != nil {
		return nil, fmt.Errorf("later deliveries after %d: %w", ev.ID, translate(err))
	}
	return keysFrom(rows), nil
}

// NextDueDeliveries returns up to limit deliveries to webhook subID that
// are open, due and held back by no earlier event of their document,
// soonest due first: what a lease slot given back takes next.
func NextDueDeliveries(ctx context.Context, q Querier, subID int64, limit int) ([]DeliveryKey, error) {
	rows, err := queries.DeliveryListNextDueOfSubscriber(ctx, q, subID, int32(limit))
	if err != nil {
		return nil, fmt.Errorf("next due deliveries of subscriber %d: %w", subID, translate(err))
	}
	return keysFrom(rows), nil
}

// DueDeliveries returns up to limit open deliveries whose next attempt is
// due, of subscribers not paused (a webhook's only while one of its lease
// slots is free), in event order after the key after. Failed deliveries
// wait for their backoff, so a poison event is not retried on every sweep.
func DueDeliveries(ctx context.Context, q Querier, after DeliveryKey, limit int) ([]DeliveryKey, error) {
	rows, err := queries.DeliveryListDue(ctx, q, after.EventID, after.SubscriberID, int32(limit))
	if err != nil {
		return nil, fmt.Errorf("list due deliveries: %w", translate(err))
	}
	return keysFrom(rows), nil
}

// DeliveriesOfEvent returns the delivery records of one event by subscriber.
func DeliveriesOfEvent(ctx context.Context, q Querier, eventID int64) ([]Delivery, error) {
	byEvent, err := DeliveriesOfEvents(ctx, q, []int64{eventID})
	return byEvent[eventID], err
}

// DeliveriesOfEvents returns the delivery records of several events in one
// query, by event id (each list by subscriber name); events without
// deliveries map to nothing.
func DeliveriesOfEvents(ctx context.Context, q Querier, eventIDs []int64) (map[int64][]Delivery, error) {
	rows, err := queries.DeliveryListByEvents(ctx, q, eventIDs)
	if err != nil {
		return nil, fmt.Errorf("deliveries of %d events: %w", len(eventIDs), translate(err))
	}
	out := make(map[int64][]Delivery, len(eventIDs))
	for _, r := range rows {
		out[r.EventID] = append(out[r.EventID], deliveryFrom(r))
	}
	return out, nil
}

// DeliveryFilter selects delivery records; zero fields match everything.
type DeliveryFilter struct {
	Status     *string
	Subscriber *string
	EventID    *int64
	// HiddenEntities leaves out, in ListDeliveries, the deliveries of
	// events of these tables (events.entity), as EventFilter's does.
	HiddenEntities []string
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
	if err := checkFirst(first, maxDeliveryPage); err != nil {
		return DeliveryPage{}, err
	}
	before := DeliveryKey{EventID: math.MaxInt64, SubscriberID: math.MaxInt64}
	if after != "" {
		k, err := parseDeliveryCursor(after)
		if err != nil {
			return DeliveryPage{}, err
		}
		before = k
	}
	rows, err := queries.DeliveryListPage(ctx, q, dbsqlc.DeliveryListPageParams{BeforeEventID: before.EventID,
		BeforeSubscriberID: before.SubscriberID, Status: f.Status, Subscriber: f.Subscriber, EventID: f.EventID,
		HiddenEntities: f.HiddenEntities, MaxRows: int32(first + 1)})
	if err != nil {
		return DeliveryPage{}, fmt.Errorf("list deliveries: %w", translate(err))
	}
	ds, more := pageOf(mapRows(rows, deliveryFrom), first)
	return DeliveryPage{Deliveries: ds, HasNextPage: more}, nil
}

func parseDeliveryCursor(s string) (DeliveryKey, error) {
	bad := inputErr("after", "not a delivery cursor returned by this server")
	parts, ok := cursorParts(s, deliveryCursorTag)
	if !ok {
		return DeliveryKey{}, bad
	}
	ev, err1 := strconv.ParseInt(parts[1], 10, 64)
	sub, err2 := strconv.ParseInt(parts[2], 10, 64)
	k := DeliveryKey{EventID: ev, SubscriberID: sub}
	if err1 != nil || err2 != nil || ev < 1 || sub < 1 || (Delivery{EventID: ev, SubscriberID: sub}).Cursor() != s {
		return DeliveryKey{}, bad
	}
	return k, nil
}

// Redeliver reopens the deliveries matching f (all statuses; at most limit)
// for a fresh round of attempts and journals one delivery.redelivered event
// per delivery, by actorID, about the redelivered event's document, whose
// row it locks first, as every writer of events about a document does
// (lockEntities; after the deliveries, in the lock order). It returns the
// reopened keys and the new events.
func Redeliver(ctx context.Context, tx pgx.Tx, actorID *int64, f DeliveryFilter, limit int) ([]DeliveryKey, []Event, error) {
	rows, err := queries.DeliveryReopen(ctx, tx, f.Status, f.Subscriber, f.EventID, int32(limit))
	if err != nil {
		return nil, nil, fmt.Errorf("reopen deliveries: %w", translate(err))
	}
	keys := keysFrom(rows)
	ids := make([]int64, len(keys))
	for i, k := range keys {
		ids[i] = k.EventID
	}
	origs, err := EventsByIDs(ctx, tx, ids)
	if err != nil {
		return nil, nil, err
	}
	byID := make(map[int64]Event, len(origs))
	docs := make([]entityRef, len(origs))
	for i, ev := range origs {
		byID[ev.ID] = ev
		docs[i] = entityRef{ev.Entity, ev.EntityID}
	}
	if err := lockEntities(ctx, tx, docs); err != nil {
		return nil, nil, err
	}
	events := make([]Event, 0, len(keys))
	for _, k := range keys {
		orig, ok := byID[k.EventID]
		if !ok {
			return nil, nil, fmt.Errorf("get event %d: %w", k.EventID, ErrNotFound)
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
	n, err := queries.DeliveryDeleteDelivered(ctx, q, &before, int32(limit))
	if err != nil {
		return 0, fmt.Errorf("prune deliveries delivered before %s: %w", before.Format(time.RFC3339), translate(err))
	}
	return n, nil
}

// PurgeDeadDeliveries deletes the dead delivery records last attempted
// before before, of the subscriber named subscriber (nil: of every
// subscriber), and returns how many it deleted. Their events stay
// processed; the journal keeps the events themselves.
func PurgeDeadDeliveries(ctx context.Context, q Querier, before time.Time, subscriber *string) (int64, error) {
	n, err := queries.DeliveryDeleteDead(ctx, q, before, subscriber)
	if err != nil {
		return 0, fmt.Errorf("purge dead deliveries before %s: %w", before.Format(time.RFC3339), translate(err))
	}
	return n, nil
}
