package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"erp/db/internal/dbsqlc"
)

// Replay statuses, as stored, and the events a replay journals.
const (
	ReplayRunning   = "running"
	ReplayDone      = "done"
	ReplayCancelled = "cancelled"
	ReplayFailed    = "failed"

	// EventReplayStarted is journaled when a replay starts, about the
	// subscriber (table subscribers): {"replay_id", "subscriber", "total"}
	// and the range given ("after_seq", "from", "to").
	EventReplayStarted = "subscriber.replay_started"
	// EventReplayFinished is journaled when a replay ends, done, failed or
	// cancelled: {"replay_id", "subscriber", "status", "total", "done",
	// "dead"}.
	EventReplayFinished = "subscriber.replay_finished"
	// EventSubscriberDisabled is journaled when the server disables a
	// webhook (DisableWebhook): {"subscriber", "reason", "since"}.
	EventSubscriberDisabled = "subscriber.disabled"
	// EventSubscriberEnabled is journaled when a paused subscriber is
	// resumed: {"subscriber", "was_disabled"} (the reason, or null).
	EventSubscriberEnabled = "subscriber.enabled"
	// EventSubscriberSecretRotated is journaled when a webhook's secret is
	// rotated (RotateWebhookSecret): {"subscriber", "previous_valid_until"}
	// (RFC 3339, or null when the old secret ended at once); never a secret.
	EventSubscriberSecretRotated = "subscriber.secret_rotated"

	// EntitySubscribers is the table the subscriber.* events are about.
	EntitySubscribers = "subscribers"
)

// Replay is one replay of a subscriber (table replays): the processed
// events of a range, fixed at start, delivered again in batches.
type Replay struct {
	ID           int64
	SubscriberID int64
	Status       string
	// AfterSeq, LastSeq: the feed sequences the range lies between
	// (after, last]; CreatedFrom, CreatedTo: its created_at bounds [from, to).
	AfterSeq    int64
	LastSeq     int64
	CreatedFrom *time.Time
	CreatedTo   *time.Time
	// The subscriber's filter when the replay started.
	EventTypes []string
	Entities   []string
	Condition  string
	// CursorID is the last event the batches went through; Written: all
	// batches are written.
	CursorID int64
	Written  bool
	// Total events of the range the types and tables take (counted at
	// start); Done of them finished (delivered, dead or not taken by the
	// condition); Dead of them gave up.
	Total      int64
	Done       int64
	Dead       int64
	ActorID    *int64
	StartedAt  time.Time
	FinishedAt *time.Time
}

func replayFrom(r dbsqlc.Replay) Replay {
	return Replay{ID: r.ID, SubscriberID: r.SubscriberID, Status: r.Status, AfterSeq: r.AfterSeq, LastSeq: r.LastSeq,
		CreatedFrom: r.CreatedFrom, CreatedTo: r.CreatedTo, EventTypes: r.EventTypes, Entities: r.Entities,
		Condition: deref(r.Condition), CursorID: r.CursorID, Written: r.Written, Total: r.Total, Done: r.Done,
		Dead: r.Dead, ActorID: r.ActorID, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt}
}

// ReplayRange is the range a replay is asked for; every bound optional.
// AfterSeq is the feed sequence of an events cursor (ParseCursor); From
// and To bound created_at, From inclusive, To exclusive.
type ReplayRange struct {
	AfterSeq int64
	From     *time.Time
	To       *time.Time
}

// SubscriberByName returns the subscriber named name, or ErrNotFound.
func SubscriberByName(ctx context.Context, q Querier, name string) (Subscriber, error) {
	r, err := queries.SubscriberGetByName(ctx, q, name)
	if err != nil {
		return Subscriber{}, fmt.Errorf("no subscriber named %q: %w", name, translate(err))
	}
	return subscriberFrom(r), nil
}

// StartReplay starts, in tx, a replay of subscriber sub over rng by
// actorID and journals subscriber.replay_started. A replay of sub already
// running is an *InputError on "subscriber" matching ErrConflict, naming
// it: the unique index replays_one_running decides, so of two concurrent
// starts one wins.
func StartReplay(ctx context.Context, tx pgx.Tx, actorID *int64, sub Subscriber, rng ReplayRange) (Replay, Event, error) {
	row, err := queries.ReplayInsert(ctx, tx, dbsqlc.ReplayInsertParams{AfterSeq: rng.AfterSeq, CreatedFrom: rng.From,
		CreatedTo: rng.To, SubscriberID: sub.ID, ActorID: actorID})
	if errors.Is(translate(err), ErrNotFound) {
		// The insert met a running replay; read it (committed, as the
		// insert waited for it).
		running, rerr := queries.ReplayGetRunningOf(ctx, tx, sub.ID)
		if rerr != nil {
			return Replay{}, Event{}, conflictOn("subscriber", "a replay of %s is running", sub.Name)
		}
		return Replay{}, Event{}, conflictOn("subscriber", "replay %d of %s is running: cancel it (cancelReplay) or wait until it ends", running.ID, sub.Name)
	}
	if err != nil {
		return Replay{}, Event{}, fmt.Errorf("start replay of %s: %w", sub.Name, translate(err))
	}
	r := replayFrom(row)
	payload := map[string]any{"replay_id": r.ID, "subscriber": sub.Name, "total": r.Total}
	if rng.AfterSeq > 0 {
		payload["after_seq"] = rng.AfterSeq
	}
	if rng.From != nil {
		payload["from"] = rng.From.UTC().Format(time.RFC3339Nano)
	}
	if rng.To != nil {
		payload["to"] = rng.To.UTC().Format(time.RFC3339Nano)
	}
	ev, err := appendEvent(ctx, tx, actorID, EventReplayStarted, EntitySubscribers, sub.ID, payload)
	return r, ev, err
}

// ReplayByID returns replay id, or ErrNotFound.
func ReplayByID(ctx context.Context, q Querier, id int64) (Replay, error) {
	return one(replayFrom, "get replay", id)(queries.ReplayGetByID(ctx, q, id))
}

// LockReplay locks replay id in tx (until commit) and returns it, or
// ErrNotFound. A batch, a finishing delivery and a cancellation take the
// lock, so they see each other's commits.
func LockReplay(ctx context.Context, tx pgx.Tx, id int64) (Replay, error) {
	return one(replayFrom, "lock replay", id)(queries.ReplayLock(ctx, tx, id))
}

// RunningReplays lists the running replays, oldest first.
func RunningReplays(ctx context.Context, q Querier) ([]Replay, error) {
	rows, err := queries.ReplayListRunning(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("list running replays: %w", translate(err))
	}
	return mapRows(rows, replayFrom), nil
}

// ReplayCandidates returns up to limit events of replay id's range, types
// and tables after its cursor, in id order.
func ReplayCandidates(ctx context.Context, tx pgx.Tx, id int64, limit int) ([]Event, error) {
	rows, err := queries.ReplayListCandidates(ctx, freshPlans{tx}, id, int32(limit))
	if err != nil {
		return nil, fmt.Errorf("next events of replay %d: %w", id, translate(err))
	}
	return mapRows(rows, eventFrom), nil
}

// WriteReplayBatch records, in tx, the replayed deliveries of the events
// taken (pending) and moves replay r's cursor to cursorID, counting the
// skipped events (not taken by the condition) done; written: the batch
// was the last one.
func WriteReplayBatch(ctx context.Context, tx pgx.Tx, r Replay, taken []int64, cursorID int64, written bool, skipped int) (Replay, error) {
	if len(taken) > 0 {
		if err := queries.ReplayDeliveryInsert(ctx, tx, r.ID, taken, r.SubscriberID); err != nil {
			return Replay{}, fmt.Errorf("record %d deliveries of replay %d: %w", len(taken), r.ID, translate(err))
		}
	}
	row, err := queries.ReplayAdvance(ctx, tx, cursorID, written, int64(skipped), r.ID)
	if err != nil {
		return Replay{}, fmt.Errorf("advance replay %d: %w", r.ID, translate(err))
	}
	return replayFrom(row), nil
}

// OpenReplayDeliveries counts replay id's records still pending or failed.
func OpenReplayDeliveries(ctx context.Context, q Querier, id int64) (int64, error) {
	n, err := queries.ReplayCountOpen(ctx, q, id)
	if err != nil {
		return 0, fmt.Errorf("count open deliveries of replay %d: %w", id, translate(err))
	}
	return n, nil
}

// CountReplayDelivery counts one more replayed delivery of locked replay
// id finished (dead: it gave up) and returns the replay.
func CountReplayDelivery(ctx context.Context, tx pgx.Tx, id int64, dead bool) (Replay, error) {
	row, err := queries.ReplayCountDone(ctx, tx, dead, id)
	if err != nil {
		return Replay{}, fmt.Errorf("count delivery of replay %d: %w", id, translate(err))
	}
	return replayFrom(row), nil
}

// FinishReplay ends running replay id with status (done, failed or
// cancelled) and journals subscriber.replay_finished by actorID (nil: the
// system) about subscriber sub. A replay not running is an *InputError on
// "id" matching ErrConflict.
func FinishReplay(ctx context.Context, tx pgx.Tx, actorID *int64, id int64, sub Subscriber, status string) (Replay, Event, error) {
	row, err := queries.ReplayFinish(ctx, tx, status, id)
	if errors.Is(translate(err), ErrNotFound) {
		cur, gerr := ReplayByID(ctx, tx, id)
		if gerr != nil {
			return Replay{}, Event{}, gerr
		}
		return Replay{}, Event{}, conflictOn("id", "replay %d is %s already", id, cur.Status)
	}
	if err != nil {
		return Replay{}, Event{}, fmt.Errorf("finish replay %d: %w", id, translate(err))
	}
	r := replayFrom(row)
	ev, err := appendEvent(ctx, tx, actorID, EventReplayFinished, EntitySubscribers, sub.ID, map[string]any{
		"replay_id": r.ID, "subscriber": sub.Name, "status": r.Status, "total": r.Total, "done": r.Done, "dead": r.Dead})
	return r, ev, err
}

// ReplayKey identifies a replayed delivery: one event of one replay.
type ReplayKey struct {
	ReplayID int64
	EventID  int64
}

// ReplayDelivery is one replayed delivery record (table replay_deliveries).
type ReplayDelivery struct {
	ReplayID     int64
	EventID      int64
	SubscriberID int64
	Status       string
	Attempts     int32
}

// LockOpenReplayDelivery locks replayed delivery k for an attempt if it is
// open and due; ErrNotFound when it is not (leased for a request in
// flight, or a retry not due yet).
func LockOpenReplayDelivery(ctx context.Context, tx pgx.Tx, k ReplayKey) (ReplayDelivery, error) {
	r, err := queries.ReplayDeliveryLockOpen(ctx, tx, k.ReplayID, k.EventID)
	if err != nil {
		return ReplayDelivery{}, fmt.Errorf("lock delivery %d of replay %d: %w", k.EventID, k.ReplayID, translate(err))
	}
	return ReplayDelivery{ReplayID: r.ReplayID, EventID: r.EventID, SubscriberID: r.SubscriberID, Status: r.Status, Attempts: r.Attempts}, nil
}

// RecordReplayAttempt stores attempt a on the locked replayed delivery k,
// as RecordAttempt does for a live one; it returns the new status and the
// next attempt time.
func RecordReplayAttempt(ctx context.Context, tx pgx.Tx, k ReplayKey, a Attempt) (string, time.Time, error) {
	p := dbsqlc.ReplayDeliveryRecordAttemptParams{ReplayID: k.ReplayID, EventID: k.EventID, Status: a.Status,
		DurationMs: ptr(int32(a.Duration / time.Millisecond)), RetryInS: a.RetryIn.Seconds()}
	if a.Error != "" {
		p.LastError = ptr(truncate(a.Error, maxLastErrorLen))
	}
	if a.ResponseStatus != 0 {
		p.ResponseStatus, p.ResponseBody = ptr(int32(a.ResponseStatus)), &a.ResponseBody
	}
	row, err := queries.ReplayDeliveryRecordAttempt(ctx, tx, p)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("record attempt of delivery %d of replay %d: %w", k.EventID, k.ReplayID, translate(err))
	}
	return row.Status, row.NextAttemptAt, nil
}

// LaterOpenReplayDeliveries returns the first open, due replayed delivery
// to subscriber subID of an event after ev of its document (none or one):
// the one waiting for ev, which releases the next in turn.
func LaterOpenReplayDeliveries(ctx context.Context, q Querier, ev Event, subID int64) ([]ReplayKey, error) {
	rows, err := queries.ReplayDeliveryListLaterOpen(ctx, q, subID, ev.Entity, ev.EntityID, ev.ID)
	if err != nil {
		return nil, fmt.Errorf("replayed deliveries after %d: %w", ev.ID, translate(err))
	}
	return mapRows(rows, func(r dbsqlc.ReplayDeliveryListLaterOpenRow) ReplayKey { return ReplayKey(r) }), nil
}

// OpenReplayDeliveriesOf returns the open records of subscriber subID's
// running replay.
func OpenReplayDeliveriesOf(ctx context.Context, q Querier, subID int64) ([]ReplayKey, error) {
	rows, err := queries.ReplayDeliveryListOpenOfSubscriber(ctx, q, subID)
	if err != nil {
		return nil, fmt.Errorf("open replayed deliveries of subscriber %d: %w", subID, translate(err))
	}
	return mapRows(rows, func(r dbsqlc.ReplayDeliveryListOpenOfSubscriberRow) ReplayKey { return ReplayKey(r) }), nil
}

// NextDueReplayDeliveries returns up to limit open, due records of the
// running replay of webhook subID held back by no earlier record of their
// document: what a lease slot given back takes next.
func NextDueReplayDeliveries(ctx context.Context, q Querier, subID int64, limit int) ([]ReplayKey, error) {
	rows, err := queries.ReplayDeliveryListNextDueOfSubscriber(ctx, q, subID, int32(limit))
	if err != nil {
		return nil, fmt.Errorf("next due replayed deliveries of subscriber %d: %w", subID, translate(err))
	}
	return mapRows(rows, func(r dbsqlc.ReplayDeliveryListNextDueOfSubscriberRow) ReplayKey { return ReplayKey(r) }), nil
}

// DueReplayDeliveries returns up to limit open records of running replays
// due now, of subscribers not paused, after the key after.
func DueReplayDeliveries(ctx context.Context, q Querier, after ReplayKey, limit int) ([]ReplayKey, error) {
	rows, err := queries.ReplayDeliveryListDue(ctx, q, after.ReplayID, after.EventID, int32(limit))
	if err != nil {
		return nil, fmt.Errorf("list due replayed deliveries: %w", translate(err))
	}
	return mapRows(rows, func(r dbsqlc.ReplayDeliveryListDueRow) ReplayKey { return ReplayKey(r) }), nil
}

// LaterOpenDeliveriesOfDocuments returns the open, due live deliveries to
// subscriber subID of events of the documents of events ids after the
// first of them: what a replay's range held back until its cursor passed.
func LaterOpenDeliveriesOfDocuments(ctx context.Context, q Querier, subID int64, ids []int64) ([]DeliveryKey, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := queries.DeliveryListLaterOpenOfDocuments(ctx, q, subID, ids)
	if err != nil {
		return nil, fmt.Errorf("live deliveries of %d events' documents: %w", len(ids), translate(err))
	}
	return keysFrom(rows), nil
}

// DueDeliveriesOf returns the keys of subscriber subID's open live
// deliveries that are due (at most 10,000), in event order.
func DueDeliveriesOf(ctx context.Context, q Querier, subID int64) ([]DeliveryKey, error) {
	rows, err := queries.DeliveryListDueOfSubscriber(ctx, q, subID)
	if err != nil {
		return nil, fmt.Errorf("due deliveries of subscriber %d: %w", subID, translate(err))
	}
	return keysFrom(rows), nil
}

// PruneEndedReplayDeliveries deletes up to limit records of replays that
// ended before before, and returns how many it deleted; the replays stay.
func PruneEndedReplayDeliveries(ctx context.Context, q Querier, before time.Time, limit int) (int64, error) {
	n, err := queries.ReplayDeliveryDeleteEnded(ctx, q, &before, int32(limit))
	if err != nil {
		return 0, fmt.Errorf("prune deliveries of replays ended before %s: %w", before.Format(time.RFC3339), translate(err))
	}
	return n, nil
}
