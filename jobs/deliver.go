package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/trace"

	"erp/db"
)

// RetryPolicy spaces the attempts of a failing delivery: attempt n waits a
// random time in [½, 1] × Base × 2^(n-1), at most Max ("full jitter" halved,
// so gaps still grow). A webhook's Retry-After wins when it is longer.
type RetryPolicy struct {
	Base time.Duration
	Max  time.Duration
}

// DefaultRetryPolicy: 2 s, 4 s, 8 s, … up to an hour.
var DefaultRetryPolicy = RetryPolicy{Base: 2 * time.Second, Max: time.Hour}

// Delay is the wait after failed attempt number attempt (1-based).
func (p RetryPolicy) Delay(attempt int) time.Duration {
	d := p.Base
	for i := 1; i < attempt && d < p.Max; i++ {
		d *= 2
	}
	d = min(d, p.Max)
	return d/2 + rand.N(d/2+1)
}

// Outcome of one Deliver call.
const (
	OutcomeSkipped   = "skipped"   // nothing to do: not open, in flight elsewhere, or paused
	OutcomeBlocked   = "blocked"   // an earlier event of the document comes first
	OutcomeThrottled = "throttled" // the webhook has no free lease slot or rate token now: try later
	OutcomeDelivered = db.DeliveryDelivered
	OutcomeFailed    = db.DeliveryFailed
	OutcomeDead      = db.DeliveryDead
)

// Deliver makes one attempt of delivery k. A built-in subscriber's runs
// in one transaction with its record (deliverBuiltin); an external one's
// (a webhook's) in three steps with nothing held while the request is out
// (deliverExternal). Either way it schedules the retry of a failure and
// releases the deliveries that were waiting for this one. It returns the
// outcome; an error means the attempt itself could not be made or stored
// (the job is retried). Dispatch makes the first attempt of built-in
// deliveries itself; Deliver makes webhook deliveries, retries and
// redeliveries.
//
// A webhook's request first takes one of its lease slots (MaxInFlight,
// shared by every instance on the database) and, with RatePerSecond, a
// token of its bucket; with none free it makes no attempt and returns
// OutcomeThrottled, so that the caller frees its worker and tries later.
func (d *Dispatcher) Deliver(ctx context.Context, k db.DeliveryKey) (string, error) {
	w, err := d.deliver(ctx, k)
	var th *throttledError
	if errors.As(err, &th) {
		return OutcomeThrottled, nil
	}
	return w.outcome, err
}

// deliver is Deliver returning the work of the transaction that recorded
// the attempt; w.outcome is the outcome. A *throttledError means no
// attempt was made.
func (d *Dispatcher) deliver(ctx context.Context, k db.DeliveryKey) (txWork, error) {
	sub, err := db.SubscriberByID(ctx, d.pool, k.SubscriberID)
	if errors.Is(err, db.ErrNotFound) {
		return txWork{outcome: OutcomeSkipped}, nil
	}
	if err != nil {
		return txWork{}, fmt.Errorf("deliver event %d to subscriber %d: %w", k.EventID, k.SubscriberID, err)
	}
	if sub.Kind == db.SubscriberBuiltin {
		return d.deliverBuiltin(ctx, k)
	}
	return d.deliverExternal(ctx, liveDelivery{k})
}

// readyToAttempt reads, in the attempt's transaction, the subscriber and
// event of delivery k (live or replayed) and says whether to attempt it
// now: not when the subscriber is paused (outcome skipped) or an earlier
// event of the document comes first for it (w.outcome = OutcomeBlocked).
func (d *Dispatcher) readyToAttempt(ctx context.Context, tx pgx.Tx, w *txWork, k db.DeliveryKey) (db.Subscriber, db.Event, bool, error) {
	sub, err := db.SubscriberByID(ctx, tx, k.SubscriberID)
	if err != nil || sub.Paused {
		return sub, db.Event{}, false, err
	}
	ev, err := db.EventByID(ctx, tx, k.EventID)
	if err != nil {
		return sub, ev, false, err
	}
	blocked, err := db.DeliveryBlocked(ctx, tx, ev, sub.ID)
	if err != nil {
		return sub, ev, false, err
	}
	if blocked {
		w.outcome = OutcomeBlocked
		return sub, ev, false, nil
	}
	return sub, ev, true, nil
}

// deliverBuiltin makes one attempt of delivery k to a built-in subscriber
// in one transaction with its record, so that its effect and the record
// commit together (exactly once): lock the delivery (after another
// worker's attempt of it, which then usually leaves nothing to do), wait
// for earlier events of the same document, run the
// subscriber in a savepoint, store the outcome, schedule the retry or
// finish the event, and release the deliveries that were waiting for it.
func (d *Dispatcher) deliverBuiltin(ctx context.Context, k db.DeliveryKey) (txWork, error) {
	var w txWork
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		w = txWork{outcome: OutcomeSkipped}
		del, err := db.LockOpenDelivery(ctx, tx, k)
		if errors.Is(err, db.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		sub, ev, ready, err := d.readyToAttempt(ctx, tx, &w, k)
		if err != nil || !ready {
			return err
		}
		attempt, written, err := d.attemptBuiltin(ctx, tx, sub, ev, del.Attempts+1, true)
		if err != nil {
			return err
		}
		rec, err := db.RecordAttempt(ctx, tx, k, attempt)
		if err != nil {
			return err
		}
		w.outcome = rec.Status
		w.outcomes = append(w.outcomes, outcomeOf(k, ev, sub, rec.Attempts, attempt, rec.NextAttemptAt))
		w.written = append(w.written, written...)
		if rec.Status == db.DeliveryFailed {
			w.retries = append(w.retries, db.Retry{Key: k, At: rec.NextAttemptAt})
			return d.enqueue(ctx, tx, &w)
		}
		// Lock the event before looking for later deliveries: one being
		// dispatched right now share-locks it and sees our commit.
		if w.finished, err = db.FinishEventsIfDone(ctx, tx, []int64{ev.ID}); err != nil {
			return err
		}
		later, err := db.LaterOpenDeliveries(ctx, tx, ev, &sub.ID)
		if err != nil {
			return err
		}
		w.now = append(w.now, later...)
		return d.enqueue(ctx, tx, &w)
	})
	if err != nil {
		return txWork{}, fmt.Errorf("deliver event %d to subscriber %d: %w", k.EventID, k.SubscriberID, err)
	}
	d.record(ctx, &w)
	return w, nil
}

// attemptBuiltin runs built-in subscriber sub once on ev in tx (attempt
// number attemptNo), traced. With savepoint it runs in a savepoint (its
// failure undoes its writes but not the transaction); without, its
// failure is a *rerun carrying the attempt: the transaction must roll
// back. Any other error means the attempt could not be made at all (the
// context ended, a lock wait ran out): nothing is recorded. It returns the
// attempt and the events the subscriber journaled.
func (d *Dispatcher) attemptBuiltin(ctx context.Context, tx pgx.Tx, sub db.Subscriber, ev db.Event, attemptNo int32, savepoint bool) (db.Attempt, []db.Event, error) {
	var written []db.Event
	a, err := d.traced(ctx, sub, ev, attemptNo, func(ctx context.Context) (db.Attempt, error) {
		var a db.Attempt
		s, ok := d.builtins[sub.Name]
		if !ok {
			a.Error = fmt.Sprintf("built-in subscriber %s is not part of this server", sub.Name)
			d.settle(&a, true, 0, attemptNo, sub)
			return a, nil
		}
		hctx, cancel := context.WithTimeout(ctx, time.Duration(sub.TimeoutMs)*time.Millisecond)
		start := time.Now()
		events, err := handle(hctx, tx, s, ev, savepoint)
		cancel()
		a.Duration = time.Since(start)
		if err != nil {
			if ctx.Err() != nil {
				return db.Attempt{}, ctx.Err()
			}
			if db.IsLockWait(err) {
				// Not the subscriber's failure: the attempt could not run.
				return db.Attempt{}, err
			}
			a.Error = err.Error()
			d.settle(&a, isPermanent(err), 0, attemptNo, sub)
			if !savepoint {
				return a, &rerun{failed: &priorAttempt{key: db.DeliveryKey{EventID: ev.ID, SubscriberID: sub.ID}, attempt: a}}
			}
			return a, nil
		}
		written = events
		d.settle(&a, false, 0, attemptNo, sub)
		return a, nil
	})
	return a, written, err
}

// settle sets the status of attempt a (number attemptNo) of a delivery to
// sub from its error: delivered, dead (permanent, or the last attempt) or
// failed with the retry's delay.
func (d *Dispatcher) settle(a *db.Attempt, permanent bool, retryAfter time.Duration, attemptNo int32, sub db.Subscriber) {
	switch {
	case a.Error == "":
		a.Status = db.DeliveryDelivered
	case permanent || attemptNo >= sub.MaxAttempts:
		a.Status = db.DeliveryDead
	default:
		a.Status = db.DeliveryFailed
		a.RetryIn = max(d.retry.Delay(int(attemptNo)), retryAfter)
	}
}

// handle runs a built-in subscriber in tx, in a savepoint with savepoint,
// so that a failure undoes its writes but not the delivery record of the
// failure.
func handle(ctx context.Context, tx pgx.Tx, s Subscriber, ev db.Event, savepoint bool) ([]db.Event, error) {
	if !savepoint {
		return s.Handle(ctx, tx, ev)
	}
	return inSavepoint(ctx, tx, func(sp pgx.Tx) ([]db.Event, error) { return s.Handle(ctx, sp, ev) })
}

// inSavepoint runs fn in a savepoint of tx, rolled back when fn fails.
func inSavepoint[T any](ctx context.Context, tx pgx.Tx, fn func(sp pgx.Tx) (T, error)) (T, error) {
	var zero T
	sp, err := tx.Begin(ctx)
	if err != nil {
		return zero, fmt.Errorf("savepoint: %w", err)
	}
	v, err := fn(sp)
	if err != nil {
		if rbErr := sp.Rollback(context.WithoutCancel(ctx)); rbErr != nil {
			return zero, errors.Join(err, rbErr)
		}
		return zero, err
	}
	if err := sp.Commit(ctx); err != nil {
		return zero, fmt.Errorf("release savepoint: %w", err)
	}
	return v, nil
}

// txWork collects what one dispatch or delivery transaction did: the jobs
// it enqueues before committing and what the metrics count once it
// committed.
type txWork struct {
	now        []db.DeliveryKey // deliver jobs to run at once
	retries    []db.Retry       // deliver jobs of failed attempts
	written    []db.Event       // events built-in subscribers journaled
	redispatch []int64          // events a batch claimed (deleting their dispatch jobs) but left
	dispatched []string         // types of the events dispatched
	// dispatchedIDs are the ids of the events dispatched, in the order of
	// dispatched.
	dispatchedIDs []int64
	outcomes      []deliveryOutcome
	finished      []db.ProcessedEvent
	outcome       string // Deliver's outcome
	// replayed deliveries to attempt at once and retries, replays to step
	replayNow     []db.ReplayKey
	replayRetries []replayRetry
	replayBatches []int64
	// links are to the spans that wrote the events dispatched (tracing
	// on only).
	links []trace.Link
}

// deliveryOutcome is one recorded attempt, for the metrics and the log.
type deliveryOutcome struct {
	key        db.DeliveryKey
	evType     string
	subscriber string
	outcome    string
	attempt    int32
	err        string
	next       time.Time // a failed attempt's retry
}

func outcomeOf(k db.DeliveryKey, ev db.Event, sub db.Subscriber, attemptNo int32, a db.Attempt, next time.Time) deliveryOutcome {
	return deliveryOutcome{key: k, evType: ev.Type, subscriber: sub.Name, outcome: a.Status, attempt: attemptNo, err: a.Error, next: next}
}

// enqueue inserts, in tx and in one statement, the dispatch jobs of the
// events written and of those a batch left, and the deliver jobs of w
// (retries at their next attempt).
func (d *Dispatcher) enqueue(ctx context.Context, tx pgx.Tx, w *txWork) error {
	dispatch := make([]DispatchArgs, 0, len(w.written)+len(w.redispatch))
	for _, ev := range w.written {
		dispatch = append(dispatch, DispatchArgs{EventID: ev.ID, jobID: ev.NewDispatchJobID})
	}
	for _, id := range w.redispatch {
		dispatch = append(dispatch, DispatchArgs{EventID: id})
	}
	deliver := make([]river.InsertManyParams, 0, len(w.now)+len(w.retries))
	for _, k := range w.now {
		deliver = append(deliver, river.InsertManyParams{Args: DeliverArgs{EventID: k.EventID, SubscriberID: k.SubscriberID}})
	}
	for _, r := range w.retries {
		deliver = append(deliver, river.InsertManyParams{
			Args:       DeliverArgs{EventID: r.Key.EventID, SubscriberID: r.Key.SubscriberID},
			InsertOpts: &river.InsertOpts{ScheduledAt: r.At},
		})
	}
	for _, k := range w.replayNow {
		deliver = append(deliver, river.InsertManyParams{Args: ReplayDeliverArgs{ReplayID: k.ReplayID, EventID: k.EventID}})
	}
	for _, r := range w.replayRetries {
		deliver = append(deliver, river.InsertManyParams{
			Args:       ReplayDeliverArgs{ReplayID: r.key.ReplayID, EventID: r.key.EventID},
			InsertOpts: &river.InsertOpts{Priority: replayPriority, ScheduledAt: r.at},
		})
	}
	if err := insertJobs(ctx, d.river, tx, dispatch, deliver); err != nil {
		return err
	}
	for _, id := range w.replayBatches {
		// One at a time: a replay's batch job is unique, and a duplicate
		// is skipped, not an error.
		if _, err := d.river.InsertTx(ctx, tx, ReplayBatchArgs{ReplayID: id}, nil); err != nil {
			return fmt.Errorf("enqueue batch of replay %d: %w", id, err)
		}
	}
	return nil
}

// record counts one committed transaction's work: events dispatched,
// attempts by outcome, the events subscribers wrote, and the latency of
// the events it finished; failures are logged.
func (d *Dispatcher) record(ctx context.Context, w *txWork) {
	for _, t := range w.dispatched {
		d.metrics.EventDispatched(t)
	}
	for _, o := range w.outcomes {
		d.metrics.Delivery(o.evType, o.subscriber, o.outcome)
		switch o.outcome {
		case OutcomeFailed:
			d.logger.WarnContext(ctx, "delivery failed", slog.Int64("event_id", o.key.EventID),
				slog.Int64("subscriber_id", o.key.SubscriberID), slog.String("subscriber", o.subscriber),
				slog.Int("attempt", int(o.attempt)), slog.String("error", o.err), slog.Time("next_attempt_at", o.next))
		case OutcomeDead:
			d.logger.WarnContext(ctx, "delivery dead", slog.Int64("event_id", o.key.EventID),
				slog.Int64("subscriber_id", o.key.SubscriberID), slog.String("subscriber", o.subscriber),
				slog.Int("attempt", int(o.attempt)), slog.String("error", o.err))
		}
	}
	for _, ev := range w.written {
		d.metrics.EventWritten(ev.Type)
	}
	for _, p := range w.finished {
		d.metrics.EventProcessedAfter(p.Latency)
	}
}

// feedEvent is an event as a webhook's body shows it: the GraphQL Event's
// fields, ids as strings. No cursor: a feed position belongs to the feed,
// and a webhook may be sent before its event is processed (a built-in
// subscriber still retrying).
type feedEvent struct {
	ID          string          `json:"id"`
	Type        string          `json:"type"`
	Entity      string          `json:"entity"`
	EntityID    string          `json:"entityId"`
	Object      string          `json:"object"`
	Payload     json.RawMessage `json:"payload"`
	CreatedAt   time.Time       `json:"createdAt"`
	ProcessedAt *time.Time      `json:"processedAt"`
	Actor       *feedActor      `json:"actor"`
}

type feedActor struct {
	ID          string `json:"id"`
	Login       string `json:"login"`
	DisplayName string `json:"displayName"`
}

func feedView(ev db.Event) feedEvent {
	v := feedEvent{
		ID: strconv.FormatInt(ev.ID, 10), Type: ev.Type, Entity: ev.Entity,
		EntityID: strconv.FormatInt(ev.EntityID, 10), Object: ev.Object(), Payload: ev.Payload,
		CreatedAt: ev.CreatedAt, ProcessedAt: ev.ProcessedAt,
	}
	if u := ev.Actor(); u != nil {
		v.Actor = &feedActor{ID: strconv.FormatInt(u.ID, 10), Login: u.Login, DisplayName: u.DisplayName}
	}
	return v
}

// DeliverArgs is the River job that attempts one delivery. Retries of a
// failing delivery are new jobs scheduled at the delivery's next attempt
// time, inserted in the transaction that recorded the failure, so our
// backoff (and a webhook's Retry-After) decides, not River's. River's own
// retries only cover an attempt that could not even be recorded.
type DeliverArgs struct {
	EventID      int64 `json:"event_id"`
	SubscriberID int64 `json:"subscriber_id"`
}

// Kind implements river.JobArgs.
func (DeliverArgs) Kind() string { return "deliver_event" }

// InsertOpts implements river.JobArgsWithInsertOpts: on the deliveries
// queue.
func (DeliverArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: QueueDeliveries} }

// DeliverWorker works DeliverArgs.
type DeliverWorker struct {
	river.WorkerDefaults[DeliverArgs]
	Dispatcher *Dispatcher
}

// Timeout implements river.Worker: longer than the longest subscriber
// timeout (120 s).
func (w *DeliverWorker) Timeout(*river.Job[DeliverArgs]) time.Duration { return 3 * time.Minute }

// Work implements river.Worker. A webhook with no lease slot free ends the
// job: the record of an attempt in flight, which frees a slot, enqueues its
// next due deliveries (wakeNext), and the sweep finds a slot whose holder
// died once its lease ran out; so a backlog behind a receiver that hangs
// costs nothing while it hangs. A webhook out of rate tokens snoozes the
// job until one is due.
func (w *DeliverWorker) Work(ctx context.Context, job *river.Job[DeliverArgs]) error {
	_, err := w.Dispatcher.deliver(ctx, db.DeliveryKey{EventID: job.Args.EventID, SubscriberID: job.Args.SubscriberID})
	return throttled(err)
}

// throttled turns a deliver job's *throttledError into its outcome: done
// when it waited for a lease slot (a slot's release wakes the delivery),
// a snooze until the rate token is due otherwise.
func throttled(err error) error {
	var th *throttledError
	if !errors.As(err, &th) {
		return err
	}
	if th.retryIn == 0 {
		return nil
	}
	return river.JobSnooze(snoozeFor(th))
}

// snoozeFor is how long a job out of rate tokens sleeps: until its token
// is due, plus up to 10 % so that the waiting jobs do not wake in step.
func snoozeFor(th *throttledError) time.Duration {
	return th.retryIn + rand.N(th.retryIn/10+1)
}
