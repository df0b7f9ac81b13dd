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

// zeroTime schedules a job to run now.
var zeroTime time.Time

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
	ids      map[string]int64 // built-in name → subscribers.id, after Register
	river    *river.Client[pgx.Tx]
	metrics  *metrics.Metrics
}

// DispatcherConfig configures NewDispatcher; zero fields take defaults.
type DispatcherConfig struct {
	Logger   *slog.Logger
	Retry    RetryPolicy
	Webhooks *WebhookSender
	// Metrics, when set, records dispatches, deliveries, events written
	// by subscribers and the dispatch latency.
	Metrics *metrics.Metrics
}

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
	d := &Dispatcher{pool: pool, logger: cfg.Logger, retry: cfg.Retry, webhooks: cfg.Webhooks,
		builtins: map[string]Subscriber{}, ids: map[string]int64{}, metrics: cfg.Metrics}
	for _, s := range builtins {
		d.builtins[s.Name()] = s
	}
	return d
}

// Register records the built-in subscribers in table subscribers (with the
// event types they take now). Run at every start.
func (d *Dispatcher) Register(ctx context.Context) error {
	for name, s := range d.builtins {
		row, err := db.UpsertBuiltinSubscriber(ctx, d.pool, name, s.EventTypes())
		if err != nil {
			return err
		}
		d.ids[name] = row.ID
	}
	return nil
}

// Dispatch creates the delivery records of event id and enqueues their
// jobs, in one transaction; an event no subscriber takes is processed at
// once. It reports false when there was nothing to do (unknown, already
// dispatched or processed).
func (d *Dispatcher) Dispatch(ctx context.Context, id int64) (bool, error) {
	done := false
	var evType string
	var latency *time.Duration
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		ev, err := db.LockUnprocessedEvent(ctx, tx, id)
		if errors.Is(err, db.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if ev.DispatchedAt != nil {
			return nil
		}
		due, any, err := db.StartDispatch(ctx, tx, ev)
		if err != nil {
			return err
		}
		if !any {
			took, err := db.MarkEventProcessedLatency(ctx, tx, id)
			if err != nil {
				return err
			}
			latency = &took
		}
		// Later events of this document may have been waiting for this one
		// to be dispatched.
		later, err := db.LaterOpenDeliveries(ctx, tx, ev, nil)
		if err != nil {
			return err
		}
		done, evType = true, ev.Type
		return d.enqueueDeliveries(ctx, tx, append(due, later...), zeroTime)
	})
	if err != nil {
		return false, fmt.Errorf("dispatch event %d: %w", id, err)
	}
	if done {
		d.metrics.EventDispatched(evType)
		if latency != nil {
			d.metrics.EventProcessedAfter(*latency)
		}
	}
	return done, nil
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
// itself could not be made or stored (the job is retried).
func (d *Dispatcher) Deliver(ctx context.Context, k db.DeliveryKey) (string, error) {
	outcome := OutcomeSkipped
	var evType, subName string
	var written []db.Event
	var latency *time.Duration
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		written, latency = nil, nil
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
			outcome = OutcomeBlocked
			return nil
		}
		attempt, newEvents, err := d.attempt(ctx, tx, sub, ev, del.Attempts+1)
		if err != nil {
			return err
		}
		rec, err := db.RecordAttempt(ctx, tx, k, attempt)
		if err != nil {
			return err
		}
		outcome, evType, subName, written = rec.Status, ev.Type, sub.Name, newEvents
		if err := EnqueueDispatch(ctx, d.river, tx, newEvents); err != nil {
			return err
		}
		if rec.Status == db.DeliveryFailed {
			return d.enqueueDeliveries(ctx, tx, []db.DeliveryKey{k}, rec.NextAttemptAt)
		}
		finished, took, err := db.FinishEventIfDone(ctx, tx, ev.ID)
		if err != nil {
			return err
		}
		if finished {
			latency = &took
		}
		later, err := db.LaterOpenDeliveries(ctx, tx, ev, &sub.ID)
		if err != nil {
			return err
		}
		return d.enqueueDeliveries(ctx, tx, later, zeroTime)
	})
	if err != nil {
		return "", fmt.Errorf("deliver event %d to subscriber %d: %w", k.EventID, k.SubscriberID, err)
	}
	d.record(evType, subName, outcome, written, latency)
	if outcome == OutcomeFailed || outcome == OutcomeDead {
		d.logger.WarnContext(ctx, "delivery "+outcome, slog.Int64("event_id", k.EventID), slog.Int64("subscriber_id", k.SubscriberID))
	}
	return outcome, nil
}

// record counts one committed Deliver: the attempt's outcome, the events
// the subscriber wrote, and the event's latency when it finished it.
func (d *Dispatcher) record(evType, subscriber, outcome string, written []db.Event, latency *time.Duration) {
	switch outcome {
	case OutcomeDelivered, OutcomeFailed, OutcomeDead:
		d.metrics.Delivery(evType, subscriber, outcome)
	}
	for _, ev := range written {
		d.metrics.EventWritten(ev.Type)
	}
	if latency != nil {
		d.metrics.EventProcessedAfter(*latency)
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
	switch {
	case a.Error == "":
		a.Status = db.DeliveryDelivered
	case permanent || attemptNo >= sub.MaxAttempts:
		a.Status = db.DeliveryDead
	default:
		a.Status = db.DeliveryFailed
		a.RetryIn = max(d.retry.Delay(int(attemptNo)), retryAfter)
	}
	return a, newEvents, nil
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

// enqueueDeliveries inserts one deliver job per key in tx, to run at at
// (zero: now).
func (d *Dispatcher) enqueueDeliveries(ctx context.Context, tx pgx.Tx, keys []db.DeliveryKey, at time.Time) error {
	if len(keys) == 0 {
		return nil
	}
	params := make([]river.InsertManyParams, len(keys))
	for i, k := range keys {
		params[i] = river.InsertManyParams{Args: DeliverArgs{EventID: k.EventID, SubscriberID: k.SubscriberID}}
		if !at.IsZero() {
			params[i].InsertOpts = &river.InsertOpts{ScheduledAt: at}
		}
	}
	if _, err := d.river.InsertManyTx(ctx, tx, params); err != nil {
		return fmt.Errorf("enqueue %d deliveries: %w", len(keys), err)
	}
	return nil
}

// SweepResult counts one sweep's work.
type SweepResult struct {
	Dispatched int // events whose deliveries the sweep created
	Finished   int // events marked processed after their last delivery
	Delivered  int // deliveries made (delivered)
	Failed     int // attempts that failed (retry later) or went dead
	Errors     int // events or deliveries the sweep could not handle
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
			ok, err := d.Dispatch(ctx, id)
			if err != nil {
				if err := note("dispatch", id, err); err != nil {
					return res, err
				}
			} else if ok {
				res.Dispatched++
			}
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
		for _, id := range ids {
			after = id
			var finished bool
			var took time.Duration
			err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) (err error) {
				finished, took, err = db.FinishEventIfDone(ctx, tx, id)
				return err
			})
			if err == nil && finished {
				d.metrics.EventProcessedAfter(took)
			}
			if err != nil {
				if err := note("finish", id, err); err != nil {
					return res, err
				}
			} else if finished {
				res.Finished++
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
			outcome, err := d.Deliver(ctx, k)
			switch {
			case err != nil:
				if err := note("delivery", k.EventID, err); err != nil {
					return res, err
				}
			case outcome == OutcomeDelivered:
				res.Delivered++
			case outcome == OutcomeFailed || outcome == OutcomeDead:
				res.Failed++
			}
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
