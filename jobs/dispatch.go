package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/trace"

	"erp/db"
	"erp/metrics"
)

// Dispatcher turns journal events into deliveries and makes them: one
// delivery record per (event, subscriber), attempted by River jobs, retried
// with backoff, dead after the subscriber's max attempts. An event is
// processed once every built-in subscriber's delivery is delivered or dead
// and every external subscriber (webhook) has its delivery record: a
// receiver's answer never holds an event, the feed or the journal.
type Dispatcher struct {
	pool     *pgxpool.Pool
	logger   *slog.Logger
	retry    RetryPolicy
	webhooks *WebhookSender
	// nats publishes NATS subscribers' deliveries; nil: no NATS_URL.
	nats *NatsPublisher
	// filters compiles subscribers' filters, webhooks' when written and
	// conditions at dispatch (one program per condition text, cached).
	filters    *Filters
	filtersErr error
	builtins   map[string]Subscriber
	river      *river.Client[pgx.Tx]
	metrics    *metrics.Metrics
	batch      int
	// replayBatch: see DispatcherConfig.ReplayBatch.
	replayBatch int
	// backlogAfter: see DispatcherConfig.BacklogAfter.
	backlogAfter time.Duration
	// tracer makes the dispatch and delivery spans; nil: tracing off.
	tracer trace.Tracer
	// share: the dispatch jobs of this process share transactions.
	share dispatchShare
	// instance names this process in the attempt log.
	instance string
	// disableAfter: see DispatcherConfig.DisableAfter; now is its clock.
	disableAfter time.Duration
	now          func() time.Time
	// publicURL: see DispatcherConfig.PublicURL.
	publicURL string
}

// DispatcherConfig configures NewDispatcher; zero fields take defaults.
type DispatcherConfig struct {
	Logger *slog.Logger
	Retry  RetryPolicy
	// Webhooks sends webhook requests and checks webhook URLs when they
	// are written (CheckURL); default NewWebhookSender(), which allows
	// private addresses.
	Webhooks *WebhookSender
	// Nats publishes NATS subscribers' deliveries and creates their
	// streams; nil: this instance has no NATS (their deliveries fail here
	// and are retried, and createNatsSubscriber is refused).
	Nats *NatsPublisher
	// Metrics, when set, records dispatches, deliveries, events written
	// by subscribers and the dispatch latency.
	Metrics *metrics.Metrics
	// DispatchBatch is how many events one dispatch transaction handles
	// at most: its job's event and, while a backlog waits, the ones after
	// it (default DefaultDispatchBatch; 1 dispatches only the job's). After
	// a built-in subscriber failed it takes at most savepointBatch.
	DispatchBatch int
	// BacklogAfter is how long a job's event must have waited for its
	// dispatch before the job looks for a backlog to take on (default
	// DefaultBacklogAfter; negative: always).
	BacklogAfter time.Duration
	// ReplayBatch is how many events one replay batch goes through
	// (default DefaultReplayBatch).
	ReplayBatch int
	// TracerProvider, when set, traces dispatches and delivery attempts
	// (see spanDispatch, spanDeliver); nil: no spans, no cost.
	TracerProvider trace.TracerProvider
	// Instance names this process in the attempt log (default: the host
	// name and pid).
	Instance string
	// DisableAfter is how long a webhook may fail continuously (no
	// delivered attempt in between) before it is disabled (default
	// DefaultDisableAfter; negative: never).
	DisableAfter time.Duration
	// Now is the clock of the disable-after rule (default time.Now).
	Now func() time.Time
	// PublicURL is the server's public base URL (PUBLIC_URL, e.g.
	// "https://erp.example.com", no final slash): CloudEvents deliveries,
	// webhook and NATS, carry dataschema <PublicURL>/schemas/events/<type>.json.
	// Empty: they carry no dataschema.
	PublicURL string
}

// DefaultBacklogAfter: an event dispatched within 20 ms of its commit means
// the workers keep up, and a query for a backlog would only cost time.
const DefaultBacklogAfter = 20 * time.Millisecond

// DefaultDispatchBatch bounds a dispatch transaction to 128 events: enough
// to drain a backlog with few commits (each commit waits for the feed
// counter and a WAL flush; figure E's drain ran 3,747 events/s with 128
// against 2,325 with 32, in one pair). The live feed publishes what each
// commit processed at once, so a batch is also a burst for the live
// subscribers: one that falls behind its buffer reads on from the journal
// instead of being dropped, which is what lets batches grow past 32.
const DefaultDispatchBatch = 128

// savepointBatch bounds a dispatch transaction that runs its built-in
// subscribers in savepoints to 16 events, so that its savepoints (one per
// built-in delivery that writes) stay within the 64 subtransactions
// PostgreSQL tracks per backend before other sessions' visibility checks
// slow down (subxid overflow).
const savepointBatch = 16

// backlogLockTimeout bounds each lock wait of a transaction that holds a
// backlog (see dispatchTx).
const backlogLockTimeout = "100ms"

// busyRetries is how often dispatch tries, without waiting, an event
// another transaction holds (usually a batch that took it on), or whose
// document's earlier event another transaction holds, before it waits for
// the lock: 5, 10, 20, 40, then 50 ms apart (≈ 0.4 s in all). Between
// tries it holds no connection, so the pool serves the holders.
const busyRetries = 10

// maxLockWaitReruns bounds how often one dispatch rolls back for a backlog
// event whose subscriber waited past backlogLockTimeout before it takes
// its own event alone.
const maxLockWaitReruns = 3

// NewDispatcher returns a dispatcher for the given built-in subscribers.
// CheckEventTypes is Filters.CheckEventTypes with the event types this
// dispatcher knows (the journal's and its built-in subscribers').
func (d *Dispatcher) CheckEventTypes(field string, types []string) error {
	if d.filtersErr != nil {
		return d.filtersErr
	}
	return d.filters.CheckEventTypes(field, types)
}

// Register them before the first dispatch; NewRiverClient connects it to
// River. The event types and entities the built-in subscribers declare are
// known to every filter besides DefaultEventTypes and the journal's tables.
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
	if cfg.ReplayBatch <= 0 {
		cfg.ReplayBatch = DefaultReplayBatch
	}
	if cfg.Instance == "" {
		host, _ := os.Hostname()
		cfg.Instance = fmt.Sprintf("%s_pid%d", host, os.Getpid())
	}
	if cfg.DisableAfter == 0 {
		cfg.DisableAfter = DefaultDisableAfter
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	d := &Dispatcher{pool: pool, logger: cfg.Logger, retry: cfg.Retry, webhooks: cfg.Webhooks, nats: cfg.Nats,
		builtins: map[string]Subscriber{}, metrics: cfg.Metrics, batch: cfg.DispatchBatch, replayBatch: cfg.ReplayBatch,
		backlogAfter: cfg.BacklogAfter, instance: cfg.Instance, disableAfter: cfg.DisableAfter, now: cfg.Now,
		publicURL: strings.TrimRight(cfg.PublicURL, "/")}
	if cfg.TracerProvider != nil {
		d.tracer = cfg.TracerProvider.Tracer(tracerName)
	}
	known := defaultEntities()
	var opts []FiltersOption
	for _, s := range builtins {
		d.builtins[s.Name()] = s
		spec := s.Filter()
		opts = append(opts, WithEventTypes(spec.EventTypes...))
		for _, e := range spec.Entities {
			if _, ok := known[e]; !ok {
				opts = append(opts, WithEntity(e))
			}
		}
	}
	// The environment is the same for every process: an error here is a
	// programming error, reported by Register at start.
	d.filters, d.filtersErr = NewFilters(opts...)
	return d
}

// Register records the built-in subscribers in table subscribers with the
// filters they declare now (compiled first: a bad one is an error). Run at
// every start.
func (d *Dispatcher) Register(ctx context.Context) error {
	if d.filtersErr != nil {
		return d.filtersErr
	}
	for name, s := range d.builtins {
		f, err := d.filters.Compile(s.Filter())
		if err != nil {
			return fmt.Errorf("built-in subscriber %s: filter: %w", name, err)
		}
		spec := f.Spec()
		if _, err := db.UpsertBuiltinSubscriber(ctx, d.pool, name, spec.EventTypes, spec.Entities, spec.Condition); err != nil {
			return err
		}
	}
	return nil
}

// takes reports whether sub's condition takes ev (its types and entities
// matched in the dispatch plan already). A condition that does not compile
// any more or whose evaluation fails (a missing key, the cost limit) does
// not take the event: retrying would fail the same way. That is logged
// with the subscriber and the event.
func (d *Dispatcher) takes(ctx context.Context, sub db.Subscriber, fe *FilterEvent) bool {
	if sub.Condition == "" {
		return true
	}
	err := d.filtersErr
	var f *Filter
	if err == nil {
		f, err = d.filters.Compile(FilterSpec{Condition: sub.Condition})
	}
	if err == nil {
		var ok bool
		if ok, err = f.TakesEvent(fe); err == nil {
			return ok
		}
	}
	d.logger.WarnContext(ctx, "subscriber condition failed: event not taken", slog.Int64("event_id", fe.ev.ID),
		slog.String("event_type", fe.ev.Type), slog.Int64("subscriber_id", sub.ID), slog.String("subscriber", sub.Name),
		slog.String("error", err.Error()))
	return false
}

// Dispatch dispatches event id and, while a backlog waits, up to
// DispatchBatch−1 of the undispatched events after it, in one
// transaction: it creates their delivery records, makes the deliveries to
// built-in subscribers right there and enqueues a deliver job for each
// webhook delivery. An event whose built-in deliveries are all done (or
// that no built-in subscriber takes) is processed when the transaction
// commits. It returns
// how many events it dispatched: 0 when there was nothing to do.
func (d *Dispatcher) Dispatch(ctx context.Context, id int64) (int, error) {
	w, err := d.dispatch(ctx, id)
	return len(w.dispatched), err
}

// dispatchLoop is Dispatch returning the transaction's work (dispatch
// adds its span). While another transaction holds the event or an earlier
// event of its document it tries again without holding a connection,
// busyRetries times, and then waits.
func (d *Dispatcher) dispatchLoop(ctx context.Context, id int64) (txWork, error) {
	for try := 0; ; try++ {
		w, err := d.dispatchShared(ctx, id, try < busyRetries)
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

// dispatchShared is dispatchTx for the job of event id, sharing
// transactions with the other dispatch jobs of the process (see
// dispatchShare): it leads one, is served by one (nothing left to do), or
// dispatches alone when the one that took its event on did not commit it.
func (d *Dispatcher) dispatchShared(ctx context.Context, id int64, try bool) (txWork, error) {
	if !try {
		// It waits for the locks it needs, unbounded: not in a slot.
		return d.dispatchTx(ctx, id, false, nil)
	}
	outcome, ld, err := d.share.join(ctx, id)
	switch {
	case err != nil:
		return txWork{}, err
	case outcome == shareServed:
		return txWork{}, nil
	case outcome == shareAlone:
		return d.dispatchTx(ctx, id, try, nil)
	}
	var served map[int64]bool
	defer func() { ld.finish(served) }()
	w, err := d.dispatchTx(ctx, id, try, ld)
	if err == nil {
		served = make(map[int64]bool, len(w.dispatchedIDs))
		for _, e := range w.dispatchedIDs {
			served[e] = true
		}
	}
	return w, err
}

// dispatchTx is one dispatch: the transaction of dispatchOnce, run again
// when it rolled back to learn something (a rerun), until it commits.
// Built-in subscribers run in the transaction itself, without a
// savepoint. When one fails, the transaction rolls back and runs again
// with every built-in subscriber in a savepoint, recording that failure
// instead of calling the subscriber again. When a subscriber of a backlog
// event waits on a lock past the bound, the transaction runs again
// without that event (its own job dispatches it); when the job's own event
// does, without a backlog and without a bound. With try it waits neither
// for the job's event nor for an earlier event of its document (ErrLocked
// when another transaction holds one). With ld (nil: none), jobs waiting
// in the process make it claim a backlog, and those whose events it claims
// wait for its outcome.
func (d *Dispatcher) dispatchTx(ctx context.Context, id int64, try bool, ld *leader) (txWork, error) {
	l := lessons{try: try, failed: map[db.DeliveryKey]db.Attempt{}}
	for {
		w, err := d.dispatchOnce(ctx, id, &l, ld)
		var r *rerun
		if errors.As(err, &r) && ctx.Err() == nil {
			d.logger.DebugContext(ctx, "dispatch runs again", slog.Int64("event_id", id), slog.String("reason", r.Error()))
			l.learn(r)
			continue
		}
		if err != nil {
			return txWork{}, fmt.Errorf("dispatch event %d: %w", id, err)
		}
		d.record(ctx, &w)
		return w, nil
	}
}

// lessons is what the earlier runs of one dispatch, rolled back, learned.
type lessons struct {
	try bool
	// savepoints: run built-in subscribers in savepoints, a failure
	// recorded right there.
	savepoints bool
	// failed: first attempts a rolled-back run made that failed; they are
	// recorded, not made again.
	failed map[db.DeliveryKey]db.Attempt
	// skip: backlog events left to their own jobs.
	skip []int64
	// alone: take no backlog (and so no bound on lock waits).
	alone bool
}

func (l *lessons) learn(r *rerun) {
	switch {
	case r.failed != nil:
		l.failed[r.failed.key] = r.failed.attempt
		l.savepoints = true
	case r.head || len(l.skip) >= maxLockWaitReruns:
		l.alone = true
	default:
		l.skip = append(l.skip, r.lockWait)
	}
}

// rerun rolls back a dispatch transaction that must run again.
type rerun struct {
	failed   *priorAttempt // a built-in subscriber failed without a savepoint
	lockWait int64         // or a subscriber of this event waited past the bound
	head     bool          // the event is the job's own
	err      error
}

func (r *rerun) Error() string {
	if r.failed != nil {
		return fmt.Sprintf("delivery %d/%d failed: %s", r.failed.key.EventID, r.failed.key.SubscriberID, r.failed.attempt.Error)
	}
	return fmt.Sprintf("event %d waited for a lock: %v", r.lockWait, r.err)
}

// priorAttempt is a failed first attempt of delivery key.
type priorAttempt struct {
	key     db.DeliveryKey
	attempt db.Attempt
}

// docKey is a document: an event's entity and id.
type docKey struct {
	entity string
	id     int64
}

// lockBound bounds the lock waits of a transaction that holds a backlog
// (backlogLockTimeout), so that two batches never wait long on each
// other. Only built-in subscribers' statements and the delivery records
// can wait on another transaction (the claim skips locked events, the
// plan skips locked predecessors, the dispatch jobs deleted are of claimed
// events): the bound is set before the first of those runs and lifted
// before the feed counter is taken, and a batch with neither (no built-in
// takes its events) spends no round trip on it.
type lockBound struct {
	on       bool        // the transaction holds a backlog
	set      bool        // the bound is in force
	previous db.Timeouts // the bounds before it
}

// before sets the bound, once, ahead of a statement that may wait.
func (b *lockBound) before(ctx context.Context, tx pgx.Tx) error {
	if !b.on || b.set {
		return nil
	}
	prev, err := db.SetTimeouts(ctx, tx, db.Timeouts{Lock: backlogLockTimeout})
	if err != nil {
		return err
	}
	b.set, b.previous = true, prev
	return nil
}

// lift restores lock_timeout: waiting for the feed counter is waiting for
// the previous holder's commit, not a risk of a deadlock.
func (b *lockBound) lift(ctx context.Context, tx pgx.Tx) error {
	if !b.set {
		return nil
	}
	if _, err := db.SetTimeouts(ctx, tx, b.previous); err != nil {
		return err
	}
	b.set = false
	return nil
}

// dispatchOnce is one dispatch transaction: lock the job's event id; if it
// waited long enough for a backlog to be likely, or other jobs of the
// process wait, claim up to DispatchBatch−1 undispatched events after it
// and delete their dispatch jobs (they would find nothing to do); make the
// deliveries (deliverEvents), bounding lock waits then (lockBound); record
// them, stamp the events and mark the finished ones processed. A *rerun
// error means the transaction rolled back to be run again with what it
// learned.
func (d *Dispatcher) dispatchOnce(ctx context.Context, id int64, l *lessons, ld *leader) (txWork, error) {
	var w txWork
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		w = txWork{}
		head, waited, err := db.LockEventForDispatch(ctx, tx, id, l.try)
		if errors.Is(err, db.ErrNotFound) {
			// Dispatched already, perhaps in another job's batch: that
			// job is at the backlog's front, not this one.
			return nil
		}
		if err != nil {
			return err
		}
		if !l.try {
			// The last try waits for an earlier event of the document
			// another transaction holds, before any bound.
			if err := db.LockEarlierEvents(ctx, tx, head); err != nil {
				return err
			}
		}
		events := []db.Event{head}
		limit := d.batch
		if l.savepoints {
			limit = min(limit, savepointBatch)
		}
		var bound lockBound
		waiting := ld.waitingIDs()
		if !l.alone && limit > 1 && (waited >= d.backlogAfter || len(waiting) > 0) {
			bound.on = true
			// The claim takes events whose dispatch job is running too:
			// in this process it waits for this transaction (attach); in
			// another it finds the event locked, retries without a
			// connection and then finds it dispatched.
			backlog, jobIDs, err := db.ClaimBacklog(ctx, tx, id, limit-1, l.skip, waiting)
			if err != nil {
				return err
			}
			if err := d.deleteJobs(ctx, tx, jobIDs); err != nil {
				return err
			}
			claimed := make([]int64, len(backlog))
			for i, ev := range backlog {
				claimed[i] = ev.ID
			}
			ld.attach(claimed)
			events = append(events, backlog...)
		}
		w.links = d.writerLinks(events)
		done, err := d.deliverEvents(ctx, tx, &w, l, events, &bound)
		if err != nil {
			return err
		}
		if err := d.enqueue(ctx, tx, &w); err != nil {
			return err
		}
		if err := bound.lift(ctx, tx); err != nil {
			return err
		}
		// The events are ours (locked): mark them without locking again.
		if w.finished, err = db.MarkEventsProcessed(ctx, tx, done); err != nil {
			return err
		}
		if len(w.finished) != len(done) {
			return fmt.Errorf("marked %d of %d finished events processed", len(w.finished), len(done))
		}
		return nil
	})
	return w, err
}

// deliverEvents dispatches the locked, undispatched events (the job's
// first, the rest in id order) in tx: it plans them, makes the first
// attempt of each built-in delivery the document's order lets through,
// notes the deliver jobs of the others, records every delivery and stamps
// the events dispatched. An event behind an earlier one of its document
// that another transaction holds is left, with a new dispatch job. It
// returns the events whose deliveries are all done, to be marked.
func (d *Dispatcher) deliverEvents(ctx context.Context, tx pgx.Tx, w *txWork, l *lessons, events []db.Event, bound *lockBound) ([]int64, error) {
	ids := make([]int64, len(events))
	for i, ev := range events {
		ids[i] = ev.ID
	}
	plans, err := db.PlanDispatch(ctx, tx, ids)
	if err != nil {
		return nil, err
	}
	if len(plans) != len(events) {
		return nil, fmt.Errorf("plan dispatch: %d plans for %d events", len(plans), len(events))
	}
	// Which built-in deliveries an earlier event outside the batch holds
	// back: asked in a fresh statement, after PlanDispatch's locks.
	var ask []db.DeliveryKey
	for _, p := range plans {
		for _, s := range p.Subscribers {
			if p.Earlier && !p.Held && s.Kind == db.SubscriberBuiltin && !s.Paused {
				ask = append(ask, db.DeliveryKey{EventID: p.EventID, SubscriberID: s.ID})
			}
		}
	}
	blockedOutside := map[db.DeliveryKey]bool{}
	if len(ask) > 0 {
		if blockedOutside, err = db.BlockedDeliveries(ctx, tx, ask, ids); err != nil {
			return nil, err
		}
	}

	batched, err := d.attemptBatches(ctx, tx, l, events, plans, blockedOutside, bound)
	if err != nil {
		return nil, err
	}

	// Walk the events in order. A document's earlier event in the batch
	// decides in Go whether it holds a later one's delivery back: the
	// rule of db.BlockedDeliveries, on the records made here.
	held := map[docKey]bool{}           // the document waits for an event another transaction holds
	open := map[docKey]map[int64]bool{} // subscribers with an open delivery of the document in the batch
	var stamp, done []int64
	var records []db.DispatchRecord
	for i, ev := range events {
		p := plans[i]
		if p.EventID != ev.ID {
			return nil, fmt.Errorf("plan dispatch: plan of event %d for event %d", p.EventID, ev.ID)
		}
		doc := docKey{ev.Entity, ev.EntityID}
		if p.Held || held[doc] {
			if i == 0 {
				return nil, fmt.Errorf("event %d waits for an earlier event: %w", ev.ID, db.ErrLocked)
			}
			// Left, locked and untouched, to a new dispatch job (its own
			// was deleted with the claim).
			held[doc] = true
			w.redispatch = append(w.redispatch, ev.ID)
			continue
		}
		w.dispatched = append(w.dispatched, ev.Type)
		w.dispatchedIDs = append(w.dispatchedIDs, ev.ID)
		isDone := true
		fe := NewFilterEvent(ev) // decoded once, by the first condition
		for _, sub := range p.Subscribers {
			if !d.takes(ctx, sub, fe) {
				continue // no record: the subscriber does not take the event
			}
			k := db.DeliveryKey{EventID: ev.ID, SubscriberID: sub.ID}
			rec := db.DispatchRecord{Key: k}
			switch {
			case sub.Paused:
				// Held until the subscriber resumes.
			case sub.Kind != db.SubscriberBuiltin:
				w.now = append(w.now, k)
			case blockedOutside[k] || open[doc][sub.ID]:
				// The earlier event's last delivery releases it
				// (LaterOpenDeliveries).
			default:
				if err := bound.before(ctx, tx); err != nil {
					return nil, err
				}
				a, err := d.firstAttempt(ctx, tx, w, l, batched, sub, ev)
				if db.IsLockWait(err) && bound.on {
					return nil, &rerun{lockWait: ev.ID, head: i == 0, err: err}
				}
				if err != nil {
					return nil, err
				}
				rec.Attempt = &a
			}
			if rec.Attempt == nil || rec.Attempt.Status == db.DeliveryFailed {
				// An external delivery's record is all its event waits
				// for: processed never waits for a receiver.
				isDone = isDone && sub.Kind != db.SubscriberBuiltin
				if open[doc] == nil {
					open[doc] = map[int64]bool{}
				}
				open[doc][sub.ID] = true
			}
			records = append(records, rec)
		}
		if isDone {
			done = append(done, ev.ID)
		} else {
			stamp = append(stamp, ev.ID)
		}
		if p.Later {
			// Later events of this document outside the batch may have
			// been waiting for this one.
			later, err := db.LaterOpenDeliveries(ctx, tx, ev, nil)
			if err != nil {
				return nil, err
			}
			w.now = append(w.now, later...)
		}
	}
	if len(records) > 0 {
		// A record's key could wait on another transaction's insert.
		if err := bound.before(ctx, tx); err != nil {
			return nil, err
		}
	}
	retries, err := db.MarkDispatched(ctx, tx, stamp, records)
	if err != nil {
		return nil, err
	}
	w.retries = append(w.retries, retries...)
	return done, nil
}

// firstAttempt makes the first attempt of ev to the built-in subscriber
// sub in tx, or takes the one an earlier run made (l.failed) or its batch
// made (batched), and notes its outcome and the events the subscriber
// journaled in w. Outside savepoints a failure is a *rerun (the
// transaction must roll back).
func (d *Dispatcher) firstAttempt(ctx context.Context, tx pgx.Tx, w *txWork, l *lessons, batched map[db.DeliveryKey]batchedAttempt,
	sub db.Subscriber, ev db.Event) (db.Attempt, error) {
	k := db.DeliveryKey{EventID: ev.ID, SubscriberID: sub.ID}
	a, ok := l.failed[k]
	if b, inBatch := batched[k]; !ok && inBatch {
		a, ok = b.attempt, true
		w.written = append(w.written, b.written...)
	}
	if !ok {
		var written []db.Event
		var err error
		if a, written, err = d.attemptBuiltin(ctx, tx, sub, ev, 1, l.savepoints); err != nil {
			return db.Attempt{}, err
		}
		w.written = append(w.written, written...)
	}
	w.outcomes = append(w.outcomes, outcomeOf(k, ev, sub, 1, a, time.Now().Add(a.RetryIn)))
	return a, nil
}

// deleteJobs deletes, in tx, the River jobs ids (dispatch jobs of the
// events a batch took on: each would only find its event dispatched, at
// the cost of a fetch, a transaction and a completion). River skips a
// job that is running.
func (d *Dispatcher) deleteJobs(ctx context.Context, tx pgx.Tx, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	params := river.NewJobDeleteManyParams().IDs(ids...).First(len(ids))
	if _, err := d.river.JobDeleteManyTx(ctx, tx, params); err != nil {
		return fmt.Errorf("delete %d dispatch jobs: %w", len(ids), err)
	}
	return nil
}

// DispatchArgs is the River job that creates the deliveries of one journal
// event; it is enqueued in the transaction that wrote the event.
type DispatchArgs struct {
	EventID int64 `json:"event_id"`
	// jobID, when not 0, is the id the job is inserted with: the one its
	// event took from River's job sequence (db.Event.NewDispatchJobID).
	// Not part of the job's args.
	jobID int64
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
