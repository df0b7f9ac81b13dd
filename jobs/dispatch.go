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
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"erp/db"
	"erp/metrics"
)

// sweepBatch is how many ids the sweep reads per query.
const sweepBatch = 500

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

// Dispatcher turns journal events into deliveries and makes them: one
// delivery record per (event, subscriber), attempted by River jobs, retried
// with backoff, dead after the subscriber's max attempts. An event is
// processed once every delivery is delivered or dead.
type Dispatcher struct {
	pool     *pgxpool.Pool
	logger   *slog.Logger
	retry    RetryPolicy
	webhooks *WebhookSender
	builtins map[string]Subscriber
	river    *river.Client[pgx.Tx]
	metrics  *metrics.Metrics
	batch    int
	// backlogAfter: see DispatcherConfig.BacklogAfter.
	backlogAfter time.Duration
	// careful: see DispatcherConfig.Careful.
	careful bool
}

// DispatcherConfig configures NewDispatcher; zero fields take defaults.
type DispatcherConfig struct {
	Logger   *slog.Logger
	Retry    RetryPolicy
	Webhooks *WebhookSender
	// Metrics, when set, records dispatches, deliveries, events written
	// by subscribers and the dispatch latency.
	Metrics *metrics.Metrics
	// DispatchBatch is how many events one dispatch transaction handles
	// at most: its job's event and, while a backlog waits, the ones after
	// it (default DefaultDispatchBatch; 1 dispatches only the job's). The
	// careful path takes at most 16 (carefulBatch).
	DispatchBatch int
	// BacklogAfter is how long a job's event must have waited for its
	// dispatch before the job looks for a backlog to take on (default
	// DefaultBacklogAfter; negative: always).
	BacklogAfter time.Duration
	// Careful makes every dispatch take the careful path (one savepoint
	// per built-in delivery, records inserted pending and then updated)
	// instead of trying the batched one first (dispatchBatch); for tests
	// of the careful path.
	Careful bool
}

// DefaultBacklogAfter: an event dispatched within 20 ms of its commit means
// the workers keep up, and a query for a backlog would only cost time.
const DefaultBacklogAfter = 20 * time.Millisecond

// DefaultDispatchBatch bounds a batched dispatch transaction
// (dispatchBatch) to 32 events: enough to drain a backlog with few commits
// (each commit waits for the feed counter and a WAL flush; in figure E's
// drain 16 was clearly slower, 64 and 128 faster still), short enough
// that the live feed's bursts stay small: its catch-up publishes every
// event committed since the last one at once, and with 64 a client
// reading as fast as it could (under -race) fell a whole 1,024-event
// buffer behind and was dropped. It takes no savepoint, so PostgreSQL's 64
// cached subtransactions do not bound it; the careful path's are
// (carefulBatch).
const DefaultDispatchBatch = 32

// carefulBatch bounds a careful dispatch transaction to 16 events, so that
// its savepoints (one per backlog event, one per built-in delivery that
// writes) stay within the 64 subtransactions PostgreSQL tracks per backend
// before other sessions' visibility checks slow down (subxid overflow).
const carefulBatch = 16

// NewDispatcher returns a dispatcher for the given built-in subscribers.
// Register them before the first dispatch; NewRiverClient connects it to
// River.
func NewDispatcher(pool *pgxpool.Pool, cfg DispatcherConfig, builtins ...Subscriber) *Dispatcher {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Retry.Base == 0 {
		cfg.Retry = DefaultRetryPolicy
	}
	if cfg.Webhooks == nil {
		cfg.Webhooks = NewWebhookSender()
	}
	if cfg.DispatchBatch <= 0 {
		cfg.DispatchBatch = DefaultDispatchBatch
	}
	if cfg.BacklogAfter == 0 {
		cfg.BacklogAfter = DefaultBacklogAfter
	}
	d := &Dispatcher{pool: pool, logger: cfg.Logger, retry: cfg.Retry, webhooks: cfg.Webhooks,
		builtins: map[string]Subscriber{}, metrics: cfg.Metrics, batch: cfg.DispatchBatch, backlogAfter: cfg.BacklogAfter, careful: cfg.Careful}
	for _, s := range builtins {
		d.builtins[s.Name()] = s
	}
	return d
}

// Register records the built-in subscribers in table subscribers (with the
// event types they take now). Run at every start.
func (d *Dispatcher) Register(ctx context.Context) error {
	for name, s := range d.builtins {
		if _, err := db.UpsertBuiltinSubscriber(ctx, d.pool, name, s.EventTypes()); err != nil {
			return err
		}
	}
	return nil
}

// Dispatch dispatches event id and, while a backlog waits, up to
// DispatchBatch−1 of the undispatched events after it, in one
// transaction: it creates their delivery records, makes the deliveries to
// built-in subscribers right there (one transaction per event, not one
// per delivery) and enqueues a deliver job for each webhook delivery. An
// event whose deliveries are all done (or that no subscriber takes) is
// processed when the transaction commits. It returns how many events it
// dispatched: 0 when there was nothing to do.
func (d *Dispatcher) Dispatch(ctx context.Context, id int64) (int, error) {
	w, err := d.dispatch(ctx, id)
	return len(w.dispatched), err
}

// busyRetries is how often dispatch tries, without waiting, an event
// another transaction holds (usually a batch that took it on), or whose
// document's earlier event another transaction holds, before it waits for
// the lock: 5, 10, 20, 40, then 50 ms apart (≈ 0.4 s in all). Between
// tries it holds no connection, so the pool serves the holders.
const busyRetries = 10

// dispatch is Dispatch returning the transaction's work.
func (d *Dispatcher) dispatch(ctx context.Context, id int64) (txWork, error) {
	for try := 0; ; try++ {
		w, err := d.dispatchTx(ctx, id, try < busyRetries)
		if !errors.Is(err, db.ErrLocked) || try >= busyRetries {
			return w, err
		}
		select {
		case <-ctx.Done():
			return txWork{}, ctx.Err()
		case <-time.After(min(5*time.Millisecond<<try, 50*time.Millisecond)):
		}
	}
}

// dispatchTx is one dispatch transaction; with try it does not wait for
// the job's event or an earlier event of its document (ErrLocked when
// another transaction holds one).
func (d *Dispatcher) dispatchTx(ctx context.Context, id int64, try bool) (txWork, error) {
	var prior *priorAttempt
	if !d.careful {
		w, err := d.dispatchBatch(ctx, id, try)
		if !errors.Is(err, errCareful) {
			return w, err
		}
		var f *failedAttemptError
		if errors.As(err, &f) {
			prior = &f.priorAttempt
		}
		d.logger.DebugContext(ctx, "dispatch takes the careful path", slog.Int64("event_id", id), slog.String("reason", err.Error()))
	}
	lock := db.LockUndispatchedEvent
	if try {
		lock = db.TryLockUndispatchedEvent
	}
	var w txWork
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		w = txWork{try: try, prior: prior}
		ev, err := lock(ctx, tx, id)
		if errors.Is(err, db.ErrNotFound) {
			// Dispatched already, perhaps in another job's batch: that
			// job is at the backlog's front, not this one.
			return nil
		}
		if err != nil {
			return err
		}
		waited, err := d.dispatchOne(ctx, tx, &w, ev)
		if err != nil {
			return err
		}
		if waited >= d.backlogAfter {
			if err := d.dispatchBacklog(ctx, tx, &w, id, min(d.batch, carefulBatch)-1); err != nil {
				return err
			}
		}
		if err := d.enqueue(ctx, tx, &w); err != nil {
			return err
		}
		// The events are ours (locked): finish without locking again.
		done, err := db.FinishEvents(ctx, tx, w.check)
		w.finished = done
		return err
	})
	if err != nil {
		return txWork{}, fmt.Errorf("dispatch event %d: %w", id, err)
	}
	d.record(ctx, &w)
	return w, nil
}

// dispatchBacklog dispatches up to limit of the oldest undispatched events
// after the job's own event (afterID) that no other transaction holds, each
// in a savepoint. It runs after the job's own event, holding its lock. So
// that it never waits long on a lock while holding others (two batches
// could wait on each other), every lock wait is bounded
// (backlogLockTimeoutSQL); an event that hits the bound is rolled back and
// left to its own dispatch job.
func (d *Dispatcher) dispatchBacklog(ctx context.Context, tx pgx.Tx, w *txWork, afterID int64, limit int) error {
	if limit <= 0 {
		return nil
	}
	events, err := db.ClaimUndispatchedEvents(ctx, tx, afterID, limit)
	if err != nil || len(events) == 0 {
		return err
	}
	w.try = true
	if _, err := tx.Exec(ctx, backlogLockTimeoutSQL); err != nil {
		return fmt.Errorf("bound lock waits: %w", err)
	}
	for _, ev := range events {
		mark := w.mark()
		err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
			_, err := d.dispatchOne(ctx, sp, w, ev)
			return err
		})
		if db.IsLockWait(err) {
			w.undo(mark)
			continue
		}
		if err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout TO DEFAULT`); err != nil {
		return fmt.Errorf("unbound lock waits: %w", err)
	}
	return nil
}

// backlogLockTimeoutSQL bounds each lock wait of a backlog event to 100 ms
// (see dispatchBacklog).
const backlogLockTimeoutSQL = `SET LOCAL lock_timeout = '100ms'`

// dispatchOne creates the deliveries of the locked, undispatched event ev,
// makes those to built-in subscribers the document's order lets through,
// and notes in w the deliver jobs of the others and of later events of the
// document that were waiting for this one. It returns how long ev waited
// for its dispatch.
func (d *Dispatcher) dispatchOne(ctx context.Context, tx pgx.Tx, w *txWork, ev db.Event) (waited time.Duration, err error) {
	st, err := db.StartDispatch(ctx, tx, ev)
	if err != nil {
		return 0, err
	}
	w.dispatched = append(w.dispatched, ev.Type)
	w.check = append(w.check, ev.ID)
	var builtins []int64
	for _, sub := range st.Due {
		if sub.Kind == db.SubscriberBuiltin {
			builtins = append(builtins, sub.ID)
		} else {
			w.now = append(w.now, db.DeliveryKey{EventID: ev.ID, SubscriberID: sub.ID})
		}
	}
	if len(builtins) > 0 {
		blocked := map[int64]bool{}
		if st.Earlier {
			check := db.BlockedSubscribers
			if w.try {
				check = db.TryBlockedSubscribers
			}
			if blocked, err = check(ctx, tx, ev, builtins); err != nil {
				return 0, err
			}
		}
		for _, sub := range st.Due {
			if sub.Kind != db.SubscriberBuiltin || blocked[sub.ID] {
				continue
			}
			// A blocked delivery stays pending: the earlier event's last
			// delivery releases it (LaterOpenDeliveries).
			if _, err := d.deliverOne(ctx, tx, w, sub, ev, 1); err != nil {
				return 0, err
			}
		}
	}
	if !st.Later {
		// A later event dispatched from now on waits for our lock and
		// sees what we commit; none was held back by this one before.
		return st.Waited, nil
	}
	// Later events of this document may have been waiting for this one to
	// be dispatched or delivered.
	later, err := db.LaterOpenDeliveries(ctx, tx, ev, nil)
	if err != nil {
		return 0, err
	}
	w.now = append(w.now, later...)
	return st.Waited, nil
}

// Outcome of one Deliver call.
const (
	OutcomeSkipped   = "skipped" // nothing to do: not open, in flight elsewhere, or paused
	OutcomeBlocked   = "blocked" // an earlier event of the document comes first
	OutcomeDelivered = db.DeliveryDelivered
	OutcomeFailed    = db.DeliveryFailed
	OutcomeDead      = db.DeliveryDead
)

// Deliver makes one attempt of delivery k, in one transaction with its
// record: lock it (skipping one in flight elsewhere), wait for earlier
// events of the same document, call the subscriber, store the outcome,
// schedule the retry or finish the event, and release deliveries that were
// waiting for this one. It returns the outcome; an error means the attempt
// itself could not be made or stored (the job is retried). Dispatch makes
// the first attempt of built-in deliveries itself; Deliver makes webhook
// deliveries, retries and redeliveries.
func (d *Dispatcher) Deliver(ctx context.Context, k db.DeliveryKey) (string, error) {
	w, err := d.deliver(ctx, k)
	return w.outcome, err
}

// deliver is Deliver returning the transaction's work; w.outcome is the
// outcome.
func (d *Dispatcher) deliver(ctx context.Context, k db.DeliveryKey) (txWork, error) {
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
		sub, err := db.SubscriberByID(ctx, tx, k.SubscriberID)
		if err != nil {
			return err
		}
		if sub.Paused {
			return nil
		}
		ev, err := db.EventByID(ctx, tx, k.EventID)
		if err != nil {
			return err
		}
		blocked, err := db.DeliveryBlocked(ctx, tx, ev, sub.ID)
		if err != nil {
			return err
		}
		if blocked {
			w.outcome = OutcomeBlocked
			return nil
		}
		if w.outcome, err = d.deliverOne(ctx, tx, &w, sub, ev, del.Attempts+1); err != nil {
			return err
		}
		if w.outcome != OutcomeFailed {
			// Lock the event before looking for later deliveries: one
			// being dispatched right now share-locks it and sees our commit.
			if err := w.finish(ctx, tx); err != nil {
				return err
			}
			later, err := db.LaterOpenDeliveries(ctx, tx, ev, &sub.ID)
			if err != nil {
				return err
			}
			w.now = append(w.now, later...)
		}
		return d.enqueue(ctx, tx, &w)
	})
	if err != nil {
		return txWork{}, fmt.Errorf("deliver event %d to subscriber %d: %w", k.EventID, k.SubscriberID, err)
	}
	d.record(ctx, &w)
	return w, nil
}

// deliverOne attempts the delivery of ev to sub in tx, records it, and
// notes in w what follows: the dispatch of the events a built-in
// subscriber wrote, the retry of a failure, or the event's check for
// completion.
func (d *Dispatcher) deliverOne(ctx context.Context, tx pgx.Tx, w *txWork, sub db.Subscriber, ev db.Event, attemptNo int32) (string, error) {
	k := db.DeliveryKey{EventID: ev.ID, SubscriberID: sub.ID}
	var attempt db.Attempt
	var written []db.Event
	if p := w.prior; p != nil && p.key == k && attemptNo == 1 {
		// The batched path made this attempt and it failed: record it
		// rather than calling the subscriber again.
		attempt, w.prior = p.attempt, nil
	} else {
		var err error
		if attempt, written, err = d.attempt(ctx, tx, sub, ev, attemptNo); err != nil {
			return "", err
		}
	}
	rec, err := db.RecordAttempt(ctx, tx, k, attempt)
	if err != nil {
		return "", err
	}
	w.outcomes = append(w.outcomes, deliveryOutcome{key: k, evType: ev.Type, subscriber: sub.Name, outcome: rec.Status})
	w.written = append(w.written, written...)
	if rec.Status == db.DeliveryFailed {
		w.retries = append(w.retries, retry{key: k, at: rec.NextAttemptAt})
	} else {
		w.check = append(w.check, ev.ID)
	}
	return rec.Status, nil
}

// txWork collects what one dispatch or delivery transaction did: the jobs
// it enqueues before committing, the events it may finish, and what the
// metrics count once it committed.
type txWork struct {
	now        []db.DeliveryKey // deliver jobs to run at once
	retries    []retry          // deliver jobs of failed attempts
	written    []db.Event       // events built-in subscribers journaled
	redispatch []int64          // events a batch claimed (deleting their dispatch jobs) but left
	check      []int64          // events that may be done
	dispatched []string         // types of the events dispatched
	outcomes   []deliveryOutcome
	finished   []db.ProcessedEvent
	outcome    string // Deliver's outcome
	// try: do not wait for an earlier event of a document that another
	// transaction holds (ErrLocked).
	try bool
	// prior: a first attempt the batched path made, which failed and was
	// rolled back with its batch; the careful path records it.
	prior *priorAttempt
}

type retry struct {
	key db.DeliveryKey
	at  time.Time
}

type deliveryOutcome struct {
	key        db.DeliveryKey
	evType     string
	subscriber string
	outcome    string
}

// workMark is how far a txWork had got, to undo a rolled-back savepoint.
type workMark struct{ now, retries, written, check, dispatched, outcomes int }

func (w *txWork) mark() workMark {
	return workMark{len(w.now), len(w.retries), len(w.written), len(w.check), len(w.dispatched), len(w.outcomes)}
}

func (w *txWork) undo(m workMark) {
	w.now, w.retries, w.written = w.now[:m.now], w.retries[:m.retries], w.written[:m.written]
	w.check, w.dispatched, w.outcomes = w.check[:m.check], w.dispatched[:m.dispatched], w.outcomes[:m.outcomes]
}

// finish marks processed the events of w.check whose deliveries are all
// done. Marking takes the feed counter, held until commit: it comes last.
func (w *txWork) finish(ctx context.Context, tx pgx.Tx) error {
	done, err := db.FinishEventsIfDone(ctx, tx, w.check)
	w.finished, w.check = append(w.finished, done...), nil
	return err
}

// enqueue inserts, in tx and in one statement, the dispatch jobs of the
// events written and of those a batch left, and the deliver jobs of w
// (retries at their next attempt).
func (d *Dispatcher) enqueue(ctx context.Context, tx pgx.Tx, w *txWork) error {
	params := make([]river.InsertManyParams, 0, len(w.written)+len(w.redispatch)+len(w.now)+len(w.retries))
	for _, ev := range w.written {
		params = append(params, river.InsertManyParams{Args: DispatchArgs{EventID: ev.ID}})
	}
	for _, id := range w.redispatch {
		params = append(params, river.InsertManyParams{Args: DispatchArgs{EventID: id}})
	}
	for _, k := range w.now {
		params = append(params, river.InsertManyParams{Args: DeliverArgs{EventID: k.EventID, SubscriberID: k.SubscriberID}})
	}
	for _, r := range w.retries {
		params = append(params, river.InsertManyParams{
			Args:       DeliverArgs{EventID: r.key.EventID, SubscriberID: r.key.SubscriberID},
			InsertOpts: &river.InsertOpts{ScheduledAt: r.at},
		})
	}
	if len(params) == 0 {
		return nil
	}
	if _, err := d.river.InsertManyTx(ctx, tx, params); err != nil {
		return fmt.Errorf("enqueue %d jobs: %w", len(params), err)
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
		if o.outcome == OutcomeFailed || o.outcome == OutcomeDead {
			d.logger.WarnContext(ctx, "delivery "+o.outcome, slog.Int64("event_id", o.key.EventID),
				slog.Int64("subscriber_id", o.key.SubscriberID), slog.String("subscriber", o.subscriber))
		}
	}
	for _, ev := range w.written {
		d.metrics.EventWritten(ev.Type)
	}
	for _, p := range w.finished {
		d.metrics.EventProcessedAfter(p.Latency)
	}
}

// attempt calls the subscriber once. attemptNo counts this attempt. An
// error is returned only when the attempt could not be made at all (the
// context ended): then nothing is recorded.
func (d *Dispatcher) attempt(ctx context.Context, tx pgx.Tx, sub db.Subscriber, ev db.Event, attemptNo int32) (db.Attempt, []db.Event, error) {
	timeout := time.Duration(sub.TimeoutMs) * time.Millisecond
	var a db.Attempt
	var newEvents []db.Event
	var permanent bool
	var retryAfter time.Duration
	switch sub.Kind {
	case db.SubscriberBuiltin:
		s, ok := d.builtins[sub.Name]
		if !ok {
			a.Error, permanent = fmt.Sprintf("built-in subscriber %s is not part of this server", sub.Name), true
			break
		}
		hctx, cancel := context.WithTimeout(ctx, timeout)
		start := time.Now()
		events, err := handleInSavepoint(hctx, tx, s, ev)
		cancel()
		a.Duration = time.Since(start)
		if err != nil {
			if ctx.Err() != nil {
				return db.Attempt{}, nil, ctx.Err()
			}
			if db.IsLockWait(err) {
				// Not the subscriber's failure: the attempt could not run.
				return db.Attempt{}, nil, err
			}
			a.Error, permanent = err.Error(), isPermanent(err)
			break
		}
		newEvents = events
	case db.SubscriberWebhook:
		target, err := db.WebhookTargetOf(ctx, tx, sub.ID)
		if err != nil {
			return db.Attempt{}, nil, err
		}
		body, err := json.Marshal(feedView(ev))
		if err != nil {
			return db.Attempt{}, nil, fmt.Errorf("marshal event %d: %w", ev.ID, err)
		}
		res := d.webhooks.Send(ctx, WebhookConfig{URL: target.URL, Secret: target.Secret, Timeout: timeout}, ev.ID, body)
		if res.Err != nil && ctx.Err() != nil {
			return db.Attempt{}, nil, ctx.Err()
		}
		a.Duration, a.ResponseStatus, a.ResponseBody = res.Duration, res.Status, res.Body
		if res.Err != nil {
			a.Error, permanent, retryAfter = res.Err.Error(), res.Permanent, res.RetryAfter
		}
	default:
		a.Error, permanent = fmt.Sprintf("unknown subscriber kind %q", sub.Kind), true
	}
	d.settle(&a, permanent, retryAfter, attemptNo, sub)
	return a, newEvents, nil
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

// handleInSavepoint runs a built-in subscriber in a savepoint, so that a
// failure undoes its writes but not the delivery record of the failure.
func handleInSavepoint(ctx context.Context, tx pgx.Tx, s Subscriber, ev db.Event) ([]db.Event, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("savepoint: %w", err)
	}
	events, err := s.Handle(ctx, sp, ev)
	if err != nil {
		if rbErr := sp.Rollback(context.WithoutCancel(ctx)); rbErr != nil {
			return nil, errors.Join(err, rbErr)
		}
		return nil, err
	}
	if err := sp.Commit(ctx); err != nil {
		return nil, fmt.Errorf("release savepoint: %w", err)
	}
	return events, nil
}

// SweepResult counts one sweep's work.
type SweepResult struct {
	Dispatched int // events whose deliveries the sweep created
	Finished   int // events marked processed after their last delivery
	Delivered  int // deliveries made (delivered)
	Failed     int // attempts that failed (retry later) or went dead
	Errors     int // events or deliveries the sweep could not handle
}

func (r *SweepResult) count(outcomes []deliveryOutcome) {
	for _, o := range outcomes {
		if o.outcome == OutcomeDelivered {
			r.Delivered++
		} else {
			r.Failed++
		}
	}
}

// Sweep is the safety net behind the jobs: it dispatches events never
// dispatched (their job was lost), finishes events whose deliveries are all
// done, and attempts every open delivery that is due. Everything is
// selected by state, never by id past a remembered cursor, so late commits
// are found; failed deliveries wait for their backoff, so a poison event is
// not retried on every sweep. A failure is counted and skipped.
func (d *Dispatcher) Sweep(ctx context.Context) (SweepResult, error) {
	var res SweepResult
	note := func(what string, id int64, err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		res.Errors++
		d.logger.WarnContext(ctx, "sweep: "+what+" failed", slog.Int64("event_id", id), slog.String("error", err.Error()))
		return nil
	}
	for after := int64(0); ; {
		ids, err := db.UndispatchedEventIDs(ctx, d.pool, after, sweepBatch)
		if err != nil {
			return res, err
		}
		for _, id := range ids {
			after = id
			w, err := d.dispatch(ctx, id)
			if err != nil {
				if err := note("dispatch", id, err); err != nil {
					return res, err
				}
			}
			res.Dispatched += len(w.dispatched)
			res.Finished += len(w.finished)
			res.count(w.outcomes)
		}
		if len(ids) < sweepBatch {
			break
		}
	}
	for after := int64(0); ; {
		ids, err := db.UnfinishedEventIDs(ctx, d.pool, after, sweepBatch)
		if err != nil {
			return res, err
		}
		if len(ids) > 0 {
			after = ids[len(ids)-1]
			var w txWork
			err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
				w = txWork{check: ids}
				return w.finish(ctx, tx)
			})
			if err != nil {
				if err := note("finish", ids[0], err); err != nil {
					return res, err
				}
			} else {
				d.record(ctx, &w)
				res.Finished += len(w.finished)
			}
		}
		if len(ids) < sweepBatch {
			break
		}
	}
	for after := (db.DeliveryKey{}); ; {
		keys, err := db.DueDeliveries(ctx, d.pool, after, sweepBatch)
		if err != nil {
			return res, err
		}
		for _, k := range keys {
			after = k
			w, err := d.deliver(ctx, k)
			if err != nil {
				if err := note("delivery", k.EventID, err); err != nil {
					return res, err
				}
			}
			res.Finished += len(w.finished)
			res.count(w.outcomes)
		}
		if len(keys) < sweepBatch {
			return res, nil
		}
	}
}

// feedEvent is an event as the live feed and webhooks show it: the GraphQL
// Event's fields, ids as strings.
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
	Cursor      string          `json:"cursor"`
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
		CreatedAt: ev.CreatedAt, ProcessedAt: ev.ProcessedAt, Cursor: ev.Cursor(),
	}
	if u := ev.Actor(); u != nil {
		v.Actor = &feedActor{ID: strconv.FormatInt(u.ID, 10), Login: u.Login, DisplayName: u.DisplayName}
	}
	return v
}

// DispatchArgs is the River job that creates the deliveries of one journal
// event; it is enqueued in the transaction that wrote the event.
type DispatchArgs struct {
	EventID int64 `json:"event_id"`
}

// Kind implements river.JobArgs.
func (DispatchArgs) Kind() string { return "dispatch_event" }

// DispatchWorker works DispatchArgs.
type DispatchWorker struct {
	river.WorkerDefaults[DispatchArgs]
	Dispatcher *Dispatcher
}

// Work implements river.Worker.
func (w *DispatchWorker) Work(ctx context.Context, job *river.Job[DispatchArgs]) error {
	_, err := w.Dispatcher.Dispatch(ctx, job.Args.EventID)
	return err
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

// DeliverWorker works DeliverArgs.
type DeliverWorker struct {
	river.WorkerDefaults[DeliverArgs]
	Dispatcher *Dispatcher
}

// Timeout implements river.Worker: longer than the longest subscriber
// timeout (120 s).
func (w *DeliverWorker) Timeout(*river.Job[DeliverArgs]) time.Duration { return 3 * time.Minute }

// Work implements river.Worker.
func (w *DeliverWorker) Work(ctx context.Context, job *river.Job[DeliverArgs]) error {
	_, err := w.Dispatcher.Deliver(ctx, db.DeliveryKey{EventID: job.Args.EventID, SubscriberID: job.Args.SubscriberID})
	return err
}

// SweepArgs is the periodic River job (every DISPATCH_INTERVAL, once per
// cluster through River's leader) that runs Sweep.
type SweepArgs struct{}

// Kind implements river.JobArgs.
func (SweepArgs) Kind() string { return "sweep_events" }

// SweepWorker works SweepArgs.
type SweepWorker struct {
	river.WorkerDefaults[SweepArgs]
	Dispatcher *Dispatcher
	Logger     *slog.Logger
}

// Timeout implements river.Worker: a sweep through a large backlog may run
// longer than River's default one minute; it stops between items on ctx.
func (w *SweepWorker) Timeout(*river.Job[SweepArgs]) time.Duration { return 15 * time.Minute }

// Work implements river.Worker.
func (w *SweepWorker) Work(ctx context.Context, _ *river.Job[SweepArgs]) error {
	res, err := w.Dispatcher.Sweep(ctx)
	if res != (SweepResult{}) {
		w.Logger.InfoContext(ctx, "sweep done", slog.Int("dispatched", res.Dispatched), slog.Int("finished", res.Finished),
			slog.Int("delivered", res.Delivered), slog.Int("failed", res.Failed), slog.Int("errors", res.Errors))
	}
	return err
}
