package db

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"erp/db/internal/dbsqlc"
)

// This file holds the statements of a dispatch transaction (package jobs'
// dispatcher), in the order it runs them: lock the job's event, claim a
// backlog besides it, plan the batch, ask the document order, record the
// deliveries, mark the events processed for the live feed.

// LockEventForDispatch locks undispatched event id in tx for dispatch,
// waiting while another transaction holds it, or with nowait failing with
// ErrLocked. It returns ErrNotFound when the event does not exist or is
// dispatched (or processed) already; after a wait READ COMMITTED re-checks
// the row, so every event is dispatched by exactly one committed
// transaction. waited is how long the event has waited for its dispatch
// (database clock).
func LockEventForDispatch(ctx context.Context, tx pgx.Tx, id int64, nowait bool) (ev Event, waited time.Duration, err error) {
	var row dbsqlc.EventLockForDispatchRow
	if nowait {
		var r dbsqlc.EventLockForDispatchNowaitRow
		r, err = queries.EventLockForDispatchNowait(ctx, tx, id)
		row = dbsqlc.EventLockForDispatchRow(r)
	} else {
		row, err = queries.EventLockForDispatch(ctx, tx, id)
	}
	if err != nil {
		return Event{}, 0, fmt.Errorf("lock event %d: %w", id, translate(err))
	}
	return eventFrom(row.EventRow), seconds(row.WaitedS), nil
}

// LockUndispatchedEvent is LockEventForDispatch that waits.
func LockUndispatchedEvent(ctx context.Context, tx pgx.Tx, id int64) (Event, error) {
	ev, _, err := LockEventForDispatch(ctx, tx, id, false)
	return ev, err
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// ClaimBacklog locks and returns up to limit undispatched, unprocessed
// events after afterID, in id order, skipping those another transaction
// holds and those in skip: the backlog a dispatch transaction takes on
// besides its own event (afterID). It takes the oldest events not in
// waiting first and fills the room left with the oldest of waiting (the
// events of dispatch jobs waiting in the caller's process): a claimed
// event whose job River has not fetched yet costs that job nothing more
// (deleted), a waiting job's event makes the job wait for the claim, so
// a drain's batches go to ranges no job holds yet, while at a steady rate,
// where the waiting jobs' events are the whole backlog, one claim serves
// them. Starting after it skips the index entries of the events
// dispatched just before, not vacuumed yet; an older event still waiting
// has its own job. It also returns the ids of the claimed events'
// dispatch jobs (events.dispatch_job_id), for the caller to delete: they would
// find nothing to do. The jobs of waiting events are not among them:
// they are running, and River would not delete them.
func ClaimBacklog(ctx context.Context, tx pgx.Tx, afterID int64, limit int, skip, waiting []int64) ([]Event, []int64, error) {
	if skip == nil {
		skip = []int64{}
	}
	if waiting == nil {
		waiting = []int64{}
	}
	rows, err := queries.EventClaimBacklog(ctx, tx, afterID, skip, waiting, int32(limit))
	if err != nil {
		return nil, nil, fmt.Errorf("claim backlog after event %d: %w", afterID, translate(err))
	}
	running := make(map[int64]bool, len(waiting))
	for _, id := range waiting {
		running[id] = true
	}
	var jobIDs []int64
	for _, r := range rows {
		if r.DispatchJobID != nil && !running[r.ID] {
			jobIDs = append(jobIDs, *r.DispatchJobID)
		}
	}
	return mapRows(rows, eventFrom), jobIDs, nil
}

// SetDispatchJobs notes on each event of eventIDs the River job jobIDs[i]
// that dispatches it, in tx, the transaction that enqueued the jobs: for
// events enqueued again (a redispatch). An event just written took its
// job's id in its INSERT (EventInsert) and needs no update.
func SetDispatchJobs(ctx context.Context, tx pgx.Tx, eventIDs, jobIDs []int64) error {
	if err := queries.EventSetDispatchJobs(ctx, tx, eventIDs, jobIDs); err != nil {
		return fmt.Errorf("note dispatch jobs of %d events: %w", len(eventIDs), translate(err))
	}
	return nil
}

// DispatchPlan is what PlanDispatch found for one event of a batch.
type DispatchPlan struct {
	EventID int64
	// Subscribers whose types and entities match the event, by id; their
	// conditions are not evaluated yet.
	Subscribers []Subscriber
	// Held: an earlier unprocessed event of the document, outside the
	// batch, is held by another transaction; the event must wait for it.
	Held bool
	// Earlier: the document has an event before this one outside the
	// batch; only then can BlockedDeliveries find one of its deliveries
	// held back.
	Earlier bool
	// Later: the document has an event after this one outside the batch,
	// whose deliveries this one may have held back (LaterOpenDeliveries).
	Later bool
}

// PlanDispatch share-locks, skipping those another transaction holds, the
// unprocessed events outside the batch ids that come before a batch event
// of the same document, and returns per event of ids (in id order) its
// matching subscribers and what its document's other events need. Ask
// BlockedDeliveries in a later statement: it sees what the holders of the
// locked events committed.
func PlanDispatch(ctx context.Context, tx pgx.Tx, ids []int64) ([]DispatchPlan, error) {
	rows, err := queries.EventPlanDispatch(ctx, freshPlans{tx}, ids)
	if err != nil {
		return nil, fmt.Errorf("plan dispatch of %d events: %w", len(ids), translate(err))
	}
	var plans []DispatchPlan
	for _, r := range rows {
		if len(plans) == 0 || plans[len(plans)-1].EventID != r.EventID {
			plans = append(plans, DispatchPlan{EventID: r.EventID, Held: r.Held, Earlier: r.Earlier, Later: r.Later})
		}
		if r.ID == nil {
			continue // no subscriber takes the event
		}
		p := &plans[len(plans)-1]
		p.Subscribers = append(p.Subscribers, Subscriber{ID: *r.ID, Name: *r.Name, Kind: *r.Kind, EventTypes: r.EventTypes,
			Entities: r.Entities, Condition: deref(r.Condition), URL: r.Url, Stream: r.Stream, SubjectPrefix: r.SubjectPrefix, Format: deref(r.Format),
			HasSecret: *r.HasSecret, MaxAttempts: *r.MaxAttempts, TimeoutMs: *r.TimeoutMs, Paused: *r.Paused,
			CreatedAt: *r.CreatedAt, UpdatedAt: *r.UpdatedAt, MaxInFlight: *r.MaxInFlight, RatePerSecond: r.RatePerSecond})
	}
	return plans, nil
}

// BlockedDeliveries returns which of the deliveries keys must wait for an
// earlier event of the same document outside the events batch (which the
// caller orders itself): that event is not dispatched yet, or its delivery
// to the subscriber is open. The rule is DeliveryListBlocked's
// (db/queries/dispatch.sql). The caller has locked the earlier events
// (PlanDispatch, LockEarlierEvents) in an earlier statement.
func BlockedDeliveries(ctx context.Context, tx pgx.Tx, keys []DeliveryKey, batch []int64) (map[DeliveryKey]bool, error) {
	evIDs := make([]int64, len(keys))
	subIDs := make([]int64, len(keys))
	for i, k := range keys {
		evIDs[i], subIDs[i] = k.EventID, k.SubscriberID
	}
	if batch == nil {
		batch = []int64{}
	}
	rows, err := queries.DeliveryListBlocked(ctx, freshPlans{tx}, evIDs, subIDs, batch)
	if err != nil {
		return nil, fmt.Errorf("check order of %d deliveries: %w", len(keys), translate(err))
	}
	blocked := make(map[DeliveryKey]bool, len(rows))
	for _, r := range rows {
		blocked[DeliveryKey(r)] = true
	}
	return blocked, nil
}

// DeliveryBlocked reports whether subscriber subID must not receive ev yet
// because an earlier event of the same document has not reached it
// (BlockedDeliveries). It first share-locks the document's earlier
// unprocessed events, waiting for a dispatch or a finishing delivery of
// them in flight, so that the check sees what those committed.
func DeliveryBlocked(ctx context.Context, tx pgx.Tx, ev Event, subID int64) (bool, error) {
	if err := LockEarlierEvents(ctx, tx, ev); err != nil {
		return false, err
	}
	k := DeliveryKey{EventID: ev.ID, SubscriberID: subID}
	blocked, err := BlockedDeliveries(ctx, tx, []DeliveryKey{k}, nil)
	return blocked[k], err
}

// LockEarlierEvents share-locks the unprocessed events of ev's document
// before it, waiting for their holders.
func LockEarlierEvents(ctx context.Context, tx pgx.Tx, ev Event) error {
	if err := queries.EventLockEarlier(ctx, tx, ev.Entity, ev.EntityID, ev.ID); err != nil {
		return fmt.Errorf("lock events before %d: %w", ev.ID, translate(err))
	}
	return nil
}

// DispatchRecord is a delivery record MarkDispatched writes: Attempt is
// the outcome of its first attempt, nil for one not attempted yet
// (pending).
type DispatchRecord struct {
	Key     DeliveryKey
	Attempt *Attempt
}

// Retry is a failed delivery and when its next attempt is due (database
// clock).
type Retry struct {
	Key DeliveryKey
	At  time.Time
}

// MarkDispatched records the delivery records of a dispatch, each with its
// first attempt's outcome, and stamps the events stamp dispatched (the
// events MarkEventsProcessed marks get the same stamp there). It returns
// the failed records with their next attempt time. A record that exists
// already is ErrConflict.
func MarkDispatched(ctx context.Context, tx pgx.Tx, stamp []int64, records []DispatchRecord) ([]Retry, error) {
	if len(stamp) == 0 && len(records) == 0 {
		return nil, nil
	}
	p := dbsqlc.EventMarkDispatchedParams{StampIds: stamp}
	if p.StampIds == nil {
		p.StampIds = []int64{}
	}
	for _, r := range records {
		a := Attempt{Status: DeliveryPending}
		attempts := int32(0)
		if r.Attempt != nil {
			a, attempts = *r.Attempt, 1
		}
		p.EventIds = append(p.EventIds, r.Key.EventID)
		p.SubscriberIds = append(p.SubscriberIds, r.Key.SubscriberID)
		p.Statuses = append(p.Statuses, a.Status)
		p.Attempts = append(p.Attempts, attempts)
		p.LastErrors = append(p.LastErrors, truncate(a.Error, maxLastErrorLen))
		p.DurationsMs = append(p.DurationsMs, int32(a.Duration/time.Millisecond))
		p.RetryInS = append(p.RetryInS, a.RetryIn.Seconds())
	}
	rows, err := queries.EventMarkDispatched(ctx, tx, p)
	if err != nil {
		return nil, fmt.Errorf("record deliveries of %d events: %w", len(stamp), translate(err))
	}
	retries := make([]Retry, len(rows))
	for i, r := range rows {
		retries[i] = Retry{Key: DeliveryKey{EventID: r.EventID, SubscriberID: r.SubscriberID}, At: r.NextAttemptAt}
	}
	return retries, nil
}

// ProcessedEvent is an event MarkEventsProcessed marked, with its dispatch
// latency: processed_at − created_at, both database times.
type ProcessedEvent struct {
	ID      int64
	Latency time.Duration
}

// MarkEventsProcessed sets processed_at (database clock) on those of the
// events ids not processed yet none of whose deliveries is open (pending
// or failed), gives them the next feed sequences, in id order, and queues
// one NOTIFY on channel event_processed whose payload is the highest
// sequence, delivered when tx commits. Taking the sequences locks the
// single feed_counter row until commit, so sequences commit, and
// notifications arrive, in increasing order: call it last in a
// transaction, holding the events' locks (FinishEventsIfDone takes them).
// It returns the events it marked, in id order.
func MarkEventsProcessed(ctx context.Context, tx pgx.Tx, ids []int64) ([]ProcessedEvent, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := queries.EventMarkProcessed(ctx, tx, notifyEventProcessed, ids)
	if err != nil {
		return nil, fmt.Errorf("mark %d events processed: %w", len(ids), translate(err))
	}
	marked := make([]ProcessedEvent, len(rows))
	for i, r := range rows {
		marked[i] = ProcessedEvent{ID: r.ID, Latency: seconds(r.LatencyS)}
	}
	return marked, nil
}

// MarkEventProcessed marks event id processed (MarkEventsProcessed); an
// event already processed, missing or with an open delivery is
// ErrNotFound.
func MarkEventProcessed(ctx context.Context, tx pgx.Tx, id int64) error {
	marked, err := MarkEventsProcessed(ctx, tx, []int64{id})
	if err == nil && len(marked) != 1 {
		err = fmt.Errorf("mark event %d processed: %w", id, ErrNotFound)
	}
	return err
}

// FinishEventsIfDone locks the events ids and marks processed those none
// of whose deliveries is open any more (MarkEventsProcessed). Locking
// first means two deliveries finishing at once cannot both miss the
// moment: each re-reads the others' committed state after the lock.
func FinishEventsIfDone(ctx context.Context, tx pgx.Tx, ids []int64) ([]ProcessedEvent, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	if err := queries.EventLockUnprocessed(ctx, tx, ids); err != nil {
		return nil, fmt.Errorf("lock %d events: %w", len(ids), translate(err))
	}
	return MarkEventsProcessed(ctx, tx, ids)
}

// Timeouts are a transaction's lock_timeout and statement_timeout, in
// PostgreSQL's syntax for them ("100ms"; "0" is no bound). SetTimeouts
// leaves one that is empty as it is.
type Timeouts struct{ Lock, Statement string }

// SetTimeouts bounds every lock wait and every statement of tx from here
// on to t, and returns both bounds before, to restore them with.
func SetTimeouts(ctx context.Context, tx pgx.Tx, t Timeouts) (previous Timeouts, err error) {
	row, err := queries.TxSetTimeouts(ctx, tx, nonEmpty(t.Lock), nonEmpty(t.Statement))
	if err != nil {
		return Timeouts{}, fmt.Errorf("set lock_timeout %q, statement_timeout %q: %w", t.Lock, t.Statement, translate(err))
	}
	return Timeouts{Lock: row.PreviousLockTimeout, Statement: row.PreviousStatementTimeout}, nil
}

// UndispatchedEventIDs returns up to limit ids (> afterID, ascending) of
// unprocessed events whose deliveries were never created: their dispatch
// job was lost or has not run yet.
func UndispatchedEventIDs(ctx context.Context, q Querier, afterID int64, limit int) ([]int64, error) {
	ids, err := queries.EventListUndispatchedIDs(ctx, q, afterID, int32(limit))
	if err != nil {
		return nil, fmt.Errorf("list undispatched events: %w", translate(err))
	}
	return ids, nil
}

// UnfinishedEventIDs returns up to limit ids (> afterID) of dispatched,
// unprocessed events with no open delivery left: a crash came between the
// last delivery and marking the event.
func UnfinishedEventIDs(ctx context.Context, q Querier, afterID int64, limit int) ([]int64, error) {
	ids, err := queries.EventListUnfinishedIDs(ctx, q, afterID, int32(limit))
	if err != nil {
		return nil, fmt.Errorf("list unfinished events: %w", translate(err))
	}
	return ids, nil
}

// freshPlans runs statements with a plan made for their arguments at
// every call, never a cached generic one: deliveries grows fast while a
// backlog drains, and a plan cached while it was small scans it whole.
type freshPlans struct{ q Querier }

func (f freshPlans) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return f.q.Exec(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
}

func (f freshPlans) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return f.q.Query(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
}

func (f freshPlans) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return f.q.QueryRow(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
}
