package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"erp/db"
)

// DefaultReplayBatch is how many events one replay batch goes through: one
// short transaction writes their replayed delivery records and moves the
// replay's cursor. The next batch is written when this one's deliveries
// are all finished, so a replay of a long journal never floods the queue
// ahead of live deliveries.
const DefaultReplayBatch = 500

// replayPriority puts replay jobs behind live dispatches and deliveries
// (River's default priority 1) whenever both wait.
const replayPriority = 3

// ReplayMessageID is the webhook-id of event eventID replayed by replay
// replayID to subscriber subscriberID: "rpl_<replay>_<event>_<subscriber>",
// the same at every retry of that replayed delivery and different from the
// live delivery's (WebhookMessageID), because a replay is a deliberate
// re-send that receivers de-duplicating by webhook-id must not drop.
func ReplayMessageID(replayID, eventID, subscriberID int64) string {
	return "rpl_" + strconv.FormatInt(replayID, 10) + "_" + strconv.FormatInt(eventID, 10) + "_" + strconv.FormatInt(subscriberID, 10)
}

// ReplayInput is what replaySubscriber asks for: the subscriber's name and
// the range, every bound optional: After an events cursor (Event.cursor:
// events processed after it), From and To created_at bounds (From
// inclusive, To exclusive).
type ReplayInput struct {
	Subscriber string
	After      *string
	From       *time.Time
	To         *time.Time
}

// StartReplay starts a replay to one external (webhook or NATS) subscriber of the processed
// events of in's range that its filter takes, by actorID: in one
// transaction the replay row (total counted), the subscriber.replay_started
// event with its dispatch job and the first batch job. Errors, all writing
// nothing: *db.InputError for a malformed or unprocessed event's cursor
// ("after"), From after To ("from") or a built-in subscriber
// ("subscriber"); db.ErrNotFound for no such subscriber; an *InputError
// matching db.ErrConflict naming the replay of it that is running.
func (d *Dispatcher) StartReplay(ctx context.Context, actorID *int64, in ReplayInput) (db.Replay, error) {
	rng := db.ReplayRange{From: in.From, To: in.To}
	if in.After != nil {
		c, err := db.ParseCursor("after", *in.After)
		if err != nil {
			return db.Replay{}, err
		}
		if c.FeedSeq == nil {
			return db.Replay{}, &db.InputError{Field: "after", Msg: "the cursor of an event not processed yet: a replay starts after a processed event"}
		}
		rng.AfterSeq = *c.FeedSeq
	}
	if in.From != nil && in.To != nil && in.From.After(*in.To) {
		return db.Replay{}, &db.InputError{Field: "from", Msg: "must not be after to"}
	}
	var r db.Replay
	err := runTx(ctx, d.pool, func(tx pgx.Tx) error {
		sub, err := db.SubscriberByName(ctx, tx, in.Subscriber)
		if err != nil {
			return err
		}
		if sub.Kind == db.SubscriberBuiltin {
			return &db.InputError{Field: "subscriber", Msg: "only webhooks and NATS subscribers are replayed: a built-in subscriber's effects happen exactly once"}
		}
		started, ev, err := db.StartReplay(ctx, tx, actorID, sub, rng)
		if err != nil {
			return err
		}
		r = started
		return d.enqueue(ctx, tx, &txWork{written: []db.Event{ev}, replayBatches: []int64{r.ID}})
	})
	if err != nil {
		return db.Replay{}, fmt.Errorf("replay subscriber %s: %w", in.Subscriber, err)
	}
	return r, nil
}

// CancelReplay stops running replay id by actorID: no further batch is
// written and its replayed deliveries not yet made are not made (one in
// flight finishes); journals subscriber.replay_finished with status
// cancelled. db.ErrNotFound for no such replay; an *InputError on "id"
// matching db.ErrConflict when it has ended already.
func (d *Dispatcher) CancelReplay(ctx context.Context, actorID *int64, id int64) (db.Replay, error) {
	var r db.Replay
	err := runTx(ctx, d.pool, func(tx pgx.Tx) error {
		cur, err := db.LockReplay(ctx, tx, id)
		if err != nil {
			return err
		}
		var w txWork
		if r, err = d.finishReplay(ctx, tx, &w, actorID, cur, db.ReplayCancelled); err != nil {
			return err
		}
		return d.enqueue(ctx, tx, &w)
	})
	if errors.Is(err, db.ErrNotFound) {
		return db.Replay{}, fmt.Errorf("there is no replay %d: %w", id, db.ErrNotFound)
	}
	if err != nil {
		return db.Replay{}, fmt.Errorf("cancel replay %d: %w", id, err)
	}
	return r, nil
}

// finishReplay ends locked replay r with status, journals it, and notes
// the subscriber's open live deliveries that are due, which the replay
// may have held back, for deliver jobs.
func (d *Dispatcher) finishReplay(ctx context.Context, tx pgx.Tx, w *txWork, actorID *int64, r db.Replay, status string) (db.Replay, error) {
	sub, err := db.SubscriberByID(ctx, tx, r.SubscriberID)
	if err != nil {
		return db.Replay{}, err
	}
	done, ev, err := db.FinishReplay(ctx, tx, actorID, r.ID, sub, status)
	if err != nil {
		return db.Replay{}, err
	}
	held, err := db.DueDeliveriesOf(ctx, tx, sub.ID)
	if err != nil {
		return db.Replay{}, err
	}
	w.written = append(w.written, ev)
	w.now = append(w.now, held...)
	return done, nil
}

// ReplayBatch goes one step on replay id in one transaction, the replay
// locked: when it is running and its last batch's deliveries are all
// finished, it writes the next batch (DispatcherConfig.ReplayBatch events after the
// cursor: a pending record for each the condition takes, the cursor moved,
// deliver jobs for the first of each document) or, past the range's end,
// finishes the replay (done, or failed when a replayed delivery went
// dead). Otherwise it does nothing. complete, when set, runs in the same
// transaction (a batch job completing itself).
func (d *Dispatcher) ReplayBatch(ctx context.Context, id int64, complete func(pgx.Tx) error) error {
	var w txWork
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		w = txWork{}
		r, err := db.LockReplay(ctx, tx, id)
		if errors.Is(err, db.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if r.Status == db.ReplayRunning {
			open, err := db.OpenReplayDeliveries(ctx, tx, id)
			if err != nil {
				return err
			}
			if open == 0 {
				if err := d.replayNext(ctx, tx, &w, r); err != nil {
					return err
				}
			}
		}
		if complete != nil {
			if err := complete(tx); err != nil {
				return err
			}
		}
		return d.enqueue(ctx, tx, &w)
	})
	if err != nil {
		return fmt.Errorf("replay %d batch: %w", id, err)
	}
	d.record(ctx, &w)
	return nil
}

// replayNext continues locked, running replay r none of whose records is
// open: finish it past the range's end, else write the next batch. A batch
// the condition takes nothing of leaves the next one to a new job.
func (d *Dispatcher) replayNext(ctx context.Context, tx pgx.Tx, w *txWork, r db.Replay) error {
	if r.Written {
		status := db.ReplayDone
		if r.Dead > 0 {
			status = db.ReplayFailed
		}
		_, err := d.finishReplay(ctx, tx, w, nil, r, status)
		return err
	}
	sub, err := db.SubscriberByID(ctx, tx, r.SubscriberID)
	if err != nil {
		return err
	}
	events, err := db.ReplayCandidates(ctx, tx, r.ID, d.replayBatch)
	if err != nil {
		return err
	}
	// The condition the subscriber had when the replay started.
	filter := sub
	filter.Condition = r.Condition
	ids := make([]int64, 0, len(events))
	var taken []int64
	first := map[docKey]bool{}
	for _, ev := range events {
		ids = append(ids, ev.ID)
		if !d.takes(ctx, filter, NewFilterEvent(ev)) {
			continue
		}
		taken = append(taken, ev.ID)
		if doc := (docKey{ev.Entity, ev.EntityID}); !first[doc] {
			// The document's later events of the batch follow this one's
			// delivery (LaterOpenReplayDeliveries).
			first[doc] = true
			w.replayNow = append(w.replayNow, db.ReplayKey{ReplayID: r.ID, EventID: ev.ID})
		}
	}
	cursor := r.CursorID
	if len(events) > 0 {
		cursor = events[len(events)-1].ID
	}
	r, err = db.WriteReplayBatch(ctx, tx, r, taken, cursor, len(events) < d.replayBatch, len(events)-len(taken))
	if err != nil {
		return err
	}
	// Live deliveries of these documents waited for the cursor to pass.
	held, err := db.LaterOpenDeliveriesOfDocuments(ctx, tx, sub.ID, ids)
	if err != nil {
		return err
	}
	w.now = append(w.now, held...)
	if len(taken) == 0 {
		if r.Written {
			return d.replayNext(ctx, tx, w, r)
		}
		w.replayBatches = append(w.replayBatches, r.ID)
	}
	return nil
}

// DeliverReplayed makes one attempt of replayed delivery k in one
// transaction with its record, as Deliver does for a live one: skipped
// when the record is not open or is held by another worker, the replay is
// not running or the subscriber paused; blocked behind an earlier event of
// the document (the rule of db.BlockedDeliveries, live and replayed
// alike). A finished delivery releases the document's later deliveries,
// live and replayed, counts in the replay's progress and, when it was the
// batch's last, continues the replay (the next batch job, or the end).
func (d *Dispatcher) DeliverReplayed(ctx context.Context, k db.ReplayKey) (string, error) {
	w, err := d.deliverReplayed(ctx, k)
	var th *throttledError
	if errors.As(err, &th) {
		return OutcomeThrottled, nil
	}
	return w.outcome, err
}

// deliverReplayed is DeliverReplayed returning the work of the
// transaction that recorded the attempt: the three steps of
// deliverExternal. A replayed request counts against the webhook's limits
// like a live one (a *throttledError means no attempt was made), so that a
// replay never takes more of a slow webhook, or of the workers, than live
// deliveries.
func (d *Dispatcher) deliverReplayed(ctx context.Context, k db.ReplayKey) (txWork, error) {
	return d.deliverExternal(ctx, replayedDelivery{k})
}

// replayedDelivery is a delivery of a replay (table replay_deliveries).
type replayedDelivery struct{ k db.ReplayKey }

func (x replayedDelivery) String() string {
	return fmt.Sprintf("event %d of replay %d", x.k.EventID, x.k.ReplayID)
}

// lock attempts nothing unless the replay is running.
func (x replayedDelivery) lock(ctx context.Context, d *Dispatcher, tx pgx.Tx, w *txWork) (db.Subscriber, db.Event, bool, error) {
	rec, err := db.LockOpenReplayDelivery(ctx, tx, x.k)
	if err != nil {
		if errors.Is(err, db.ErrNotFound) {
			return db.Subscriber{}, db.Event{}, false, nil
		}
		return db.Subscriber{}, db.Event{}, false, err
	}
	r, err := db.ReplayByID(ctx, tx, x.k.ReplayID)
	if err != nil || r.Status != db.ReplayRunning {
		return db.Subscriber{}, db.Event{}, false, err
	}
	return d.readyToAttempt(ctx, tx, w, db.DeliveryKey{EventID: x.k.EventID, SubscriberID: rec.SubscriberID})
}

func (x replayedDelivery) lease(ctx context.Context, tx pgx.Tx, holder, instance string, ttl time.Duration) (db.Lease, error) {
	return db.LeaseReplayDelivery(ctx, tx, x.k, holder, instance, ttl)
}

func (x replayedDelivery) messageID(ev db.Event, sub db.Subscriber) string {
	return ReplayMessageID(x.k.ReplayID, ev.ID, sub.ID)
}

func (x replayedDelivery) drop(ctx context.Context, tx pgx.Tx, l db.Lease) error {
	return db.DropReplayLease(ctx, tx, x.k, l)
}

// record stores the outcome. A finished delivery counts in the replay's
// progress and, when it was the batch's last, continues the replay (the
// next batch job, or the end); the document's later deliveries, live and
// replayed, are released after the commit (wakeNext).
func (x replayedDelivery) record(ctx context.Context, d *Dispatcher, tx pgx.Tx, w *txWork, t *taken, a db.Attempt) (bool, error) {
	status, next, err := db.RecordLeasedReplayAttempt(ctx, tx, x.k, t.lease, a)
	if errors.Is(err, db.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	w.outcome = status
	if status == db.DeliveryFailed {
		d.logger.WarnContext(ctx, "replayed delivery failed", slog.Int64("replay_id", x.k.ReplayID),
			slog.Int64("event_id", x.k.EventID), slog.String("subscriber", t.sub.Name), slog.Int("attempt", int(t.lease.Attempt)),
			slog.String("error", a.Error), slog.Time("next_attempt_at", next))
		w.replayRetries = append(w.replayRetries, replayRetry{key: x.k, at: next})
		return true, nil
	}
	// Counting locks the replay: of the batch's last deliveries finishing
	// at once, the last to count sees the others'.
	if _, err := db.LockReplay(ctx, tx, x.k.ReplayID); err != nil {
		return false, err
	}
	r, err := db.CountReplayDelivery(ctx, tx, x.k.ReplayID, status == db.DeliveryDead)
	if err != nil {
		return false, err
	}
	if r.Status != db.ReplayRunning {
		return true, nil
	}
	open, err := db.OpenReplayDeliveries(ctx, tx, r.ID)
	if err != nil {
		return false, err
	}
	switch {
	case open > 0:
	case r.Written:
		if err := d.replayNext(ctx, tx, w, r); err != nil {
			return false, err
		}
	default:
		w.replayBatches = append(w.replayBatches, r.ID)
	}
	return true, nil
}

// replayRetry is a failed replayed delivery and when its next attempt is
// due (database clock).
type replayRetry struct {
	key db.ReplayKey
	at  time.Time
}

// sweepReplays is the sweep's part for replays: it attempts the due open
// records of running replays, then steps every running replay
// (ReplayBatch), so that one whose batch job was lost, or left running by
// a process that died (its unique key held until River rescues it), goes
// on within a sweep.
func (d *Dispatcher) sweepReplays(ctx context.Context, res *SweepResult, note func(string, int64, error) error) error {
	err := eachPage(func(after db.ReplayKey) ([]db.ReplayKey, error) {
		return db.DueReplayDeliveries(ctx, d.pool, after, sweepBatch)
	}, func(keys []db.ReplayKey) error {
		var mu sync.Mutex
		var noteErr error
		inParallel(keys, func(k db.ReplayKey) {
			outcome, err := d.DeliverReplayed(ctx, k)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if nerr := note("replayed delivery", k.EventID, err); nerr != nil {
					noteErr = nerr
				}
			}
			switch outcome {
			case OutcomeDelivered:
				res.Delivered++
			case OutcomeFailed, OutcomeDead:
				res.Failed++
			}
		})
		return noteErr
	})
	if err != nil {
		return err
	}
	running, err := db.RunningReplays(ctx, d.pool)
	if err != nil {
		return err
	}
	for _, r := range running {
		if err := d.ReplayBatch(ctx, r.ID, nil); err != nil {
			if err := note("replay batch", 0, err); err != nil {
				return err
			}
		}
	}
	return nil
}

// ReplayBatchArgs is the River job that goes one step on a replay
// (Dispatcher.ReplayBatch). Unique by replay: at most one waits or runs
// per replay.
type ReplayBatchArgs struct {
	ReplayID int64 `json:"replay_id" river:"unique"`
}

// Kind implements river.JobArgs.
func (ReplayBatchArgs) Kind() string { return "replay_batch" }

// InsertOpts implements river.JobArgsWithInsertOpts: unique by replay
// among the jobs not finished (a batch job completes itself in its
// transaction, so it can enqueue its successor), behind live work.
func (ReplayBatchArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Priority: replayPriority, UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
		rivertype.JobStateRetryable, rivertype.JobStateScheduled,
	}}}
}

// ReplayBatchWorker works ReplayBatchArgs.
type ReplayBatchWorker struct {
	river.WorkerDefaults[ReplayBatchArgs]
	Dispatcher *Dispatcher
}

// Work implements river.Worker.
func (w *ReplayBatchWorker) Work(ctx context.Context, job *river.Job[ReplayBatchArgs]) error {
	return w.Dispatcher.ReplayBatch(ctx, job.Args.ReplayID, func(tx pgx.Tx) error {
		_, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
		return err
	})
}

// ReplayDeliverArgs is the River job that attempts one replayed delivery;
// like DeliverArgs, a failed attempt's retry is a new job at its next
// attempt time.
type ReplayDeliverArgs struct {
	ReplayID int64 `json:"replay_id"`
	EventID  int64 `json:"event_id"`
}

// Kind implements river.JobArgs.
func (ReplayDeliverArgs) Kind() string { return "deliver_replayed" }

// InsertOpts implements river.JobArgsWithInsertOpts: on the deliveries
// queue, behind live work.
func (ReplayDeliverArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueDeliveries, Priority: replayPriority}
}

// ReplayDeliverWorker works ReplayDeliverArgs.
type ReplayDeliverWorker struct {
	river.WorkerDefaults[ReplayDeliverArgs]
	Dispatcher *Dispatcher
}

// Timeout implements river.Worker, as DeliverWorker's.
func (w *ReplayDeliverWorker) Timeout(*river.Job[ReplayDeliverArgs]) time.Duration {
	return 3 * time.Minute
}

// Work implements river.Worker; a webhook at its limits ends or snoozes
// the job, as DeliverWorker's.
func (w *ReplayDeliverWorker) Work(ctx context.Context, job *river.Job[ReplayDeliverArgs]) error {
	_, err := w.Dispatcher.deliverReplayed(ctx, db.ReplayKey{ReplayID: job.Args.ReplayID, EventID: job.Args.EventID})
	return throttled(err)
}
