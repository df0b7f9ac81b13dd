package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"erp/db"
)

// errCareful asks for the careful dispatch path: the batched one met
// something it does not handle (a subscriber failed, a lock wait ran out,
// a built-in subscriber this server lacks, any other error). Its
// transaction is rolled back, so nothing of it stays.
var errCareful = errors.New("dispatch needs the careful path")

// priorAttempt is a failed first attempt of delivery key.
type priorAttempt struct {
	key     db.DeliveryKey
	attempt db.Attempt
}

// failedAttemptError is errCareful after a built-in subscriber failed in
// the batched path: the careful path records that attempt instead of
// making another.
type failedAttemptError struct{ priorAttempt }

func (e *failedAttemptError) Error() string {
	return fmt.Sprintf("delivery %d/%d failed: %s", e.key.EventID, e.key.SubscriberID, e.attempt.Error)
}

func (e *failedAttemptError) Is(target error) bool { return target == errCareful }

// docKey is a document: an event's entity and id.
type docKey struct {
	entity string
	id     int64
}

// dispatchBatch is the batched dispatch transaction: it dispatches event id
// and, while a backlog waits, up to DispatchBatch−1 undispatched events
// after it with a handful of statements per batch. Built-in deliveries run
// without a savepoint each and their records are written once, with their
// outcome (delivered), together with the events' stamps and marks, in one
// closing statement (db.CloseBatch). The dispatch jobs of the backlog
// events it took on are deleted in the same transaction: they would find
// nothing to do. errCareful (the transaction rolled back) means the
// careful path must do it; ErrLocked as dispatchTx.
func (d *Dispatcher) dispatchBatch(ctx context.Context, id int64, try bool) (txWork, error) {
	var w txWork
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		w = txWork{try: try}
		head, waited, err := db.LockBatchHead(ctx, tx, id, try)
		if errors.Is(err, db.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		events := []db.Event{head}
		bounded := false
		if waited >= d.backlogAfter && d.batch > 1 {
			// Bound every lock wait from here on: a batch holds many
			// events and must not wait long for anyone (two batches could
			// wait on each other). A wait that runs out hands the job to
			// the careful path.
			if _, err := tx.Exec(ctx, backlogLockTimeoutSQL); err != nil {
				return fmt.Errorf("bound lock waits: %w", err)
			}
			bounded = true
			backlog, jobIDs, err := db.ClaimBacklog(ctx, tx, id, d.batch-1)
			if err != nil {
				return err
			}
			// Their jobs would find nothing to do (or, fetched before we
			// commit, wait for us first): delete them now, so that River
			// does not fetch them. An event the batch leaves gets a new one.
			if err := d.deleteJobs(ctx, tx, jobIDs); err != nil {
				return err
			}
			events = append(events, backlog...)
		}
		return d.dispatchEvents(ctx, tx, &w, events, bounded)
	})
	if err != nil {
		if errors.Is(err, errCareful) || errors.Is(err, db.ErrLocked) || ctx.Err() != nil {
			return txWork{}, err
		}
		// A lock wait that ran out, a statement that failed after a
		// subscriber left the transaction aborted: the batched path is an
		// optimisation, the careful one decides.
		return txWork{}, fmt.Errorf("%w: event %d: %w", errCareful, id, err)
	}
	d.record(ctx, &w)
	return w, nil
}

// dispatchEvents dispatches the locked, undispatched events (the job's
// first, the rest in id order) in tx: see dispatchBatch.
func (d *Dispatcher) dispatchEvents(ctx context.Context, tx pgx.Tx, w *txWork, events []db.Event, bounded bool) error {
	ids := make([]int64, len(events))
	for i, ev := range events {
		ids[i] = ev.ID
	}
	plans, err := db.PlanBatch(ctx, tx, ids)
	if err != nil {
		return err
	}
	if len(plans) != len(events) {
		return fmt.Errorf("plan dispatch: %d plans for %d events", len(plans), len(events))
	}
	// Which built-in deliveries an earlier event outside the batch holds
	// back: asked in a fresh statement, after PlanBatch's locks.
	var ask []db.DeliveryKey
	for _, p := range plans {
		if !p.Check || p.Held {
			continue
		}
		for _, s := range p.Subscribers {
			if s.Kind == db.SubscriberBuiltin && !s.Paused {
				ask = append(ask, db.DeliveryKey{EventID: p.EventID, SubscriberID: s.ID})
			}
		}
	}
	blockedOutside := map[db.DeliveryKey]bool{}
	if len(ask) > 0 {
		if blockedOutside, err = db.BlockedOutsideBatch(ctx, tx, ids, ask); err != nil {
			return err
		}
	}

	// Walk the events in order. A document's earlier event in the batch
	// decides in Go whether it holds a later one's delivery back.
	held := map[docKey]bool{}           // the document waits for an event another transaction holds
	open := map[docKey]map[int64]bool{} // subscribers with an open delivery of the document in the batch
	var dispatched, done, later []int64
	var records []db.BatchDelivery
	for i, ev := range events {
		p := plans[i]
		if p.EventID != ev.ID {
			return fmt.Errorf("plan dispatch: plan of event %d for event %d", p.EventID, ev.ID)
		}
		doc := docKey{ev.Entity, ev.EntityID}
		if p.Held || held[doc] {
			if i == 0 {
				// The job's own event waits for an earlier one.
				if w.try {
					return fmt.Errorf("event %d waits for an earlier event: %w", ev.ID, db.ErrLocked)
				}
				return errCareful
			}
			// Left, locked and untouched, to a new dispatch job (its own
			// was deleted with the claim).
			held[doc] = true
			w.redispatch = append(w.redispatch, ev.ID)
			continue
		}
		w.dispatched = append(w.dispatched, ev.Type)
		dispatched = append(dispatched, ev.ID)
		if p.Later {
			later = append(later, ev.ID)
		}
		isDone := true
		for _, sub := range p.Subscribers {
			k := db.DeliveryKey{EventID: ev.ID, SubscriberID: sub.ID}
			rec := db.BatchDelivery{Key: k}
			blocked := blockedOutside[k] || open[doc][sub.ID]
			switch {
			case sub.Paused:
				// Held until the subscriber resumes.
			case sub.Kind != db.SubscriberBuiltin:
				w.now = append(w.now, k)
			case blocked:
				// The earlier event's last delivery releases it
				// (LaterOpenDeliveries).
			default:
				delivered, err := d.deliverBatched(ctx, tx, w, sub, ev)
				if err != nil {
					return err
				}
				rec.Delivered, rec.DurationMs = true, delivered
			}
			if !rec.Delivered {
				isDone = false
				if open[doc] == nil {
					open[doc] = map[int64]bool{}
				}
				open[doc][sub.ID] = true
			}
			records = append(records, rec)
		}
		if isDone {
			done = append(done, ev.ID)
		}
	}
	// Later events of these documents outside the batch may have been
	// waiting for these.
	for _, id := range later {
		ev := events[indexOfEvent(events, id)]
		keys, err := db.LaterOpenDeliveries(ctx, tx, ev, nil)
		if err != nil {
			return err
		}
		w.now = append(w.now, keys...)
	}
	if err := d.enqueue(ctx, tx, w); err != nil {
		return err
	}
	finished, err := db.CloseBatch(ctx, tx, bounded, dispatched, done, records)
	if errors.Is(err, db.ErrConflict) {
		// A delivery record existed: the careful path makes only the
		// missing ones.
		return fmt.Errorf("%w: %w", errCareful, err)
	}
	if err != nil {
		return err
	}
	w.finished = finished
	return nil
}

func indexOfEvent(events []db.Event, id int64) int {
	for i, ev := range events {
		if ev.ID == id {
			return i
		}
	}
	return -1
}

// deliverBatched makes the first attempt of ev to the built-in subscriber
// sub in tx, without a savepoint: a failure returns errCareful (the batch
// is rolled back and the careful path records the failure). It returns the
// attempt's duration in ms.
func (d *Dispatcher) deliverBatched(ctx context.Context, tx pgx.Tx, w *txWork, sub db.Subscriber, ev db.Event) (int32, error) {
	s, ok := d.builtins[sub.Name]
	if !ok {
		return 0, errCareful
	}
	hctx, cancel := context.WithTimeout(ctx, time.Duration(sub.TimeoutMs)*time.Millisecond)
	start := time.Now()
	events, err := s.Handle(hctx, tx, ev)
	cancel()
	elapsed := time.Since(start)
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if db.IsLockWait(err) {
			// Not the subscriber's failure: the attempt could not run.
			return 0, fmt.Errorf("%w: %s on event %d: %w", errCareful, sub.Name, ev.ID, err)
		}
		a := db.Attempt{Error: err.Error(), Duration: elapsed}
		d.settle(&a, isPermanent(err), 0, 1, sub)
		return 0, &failedAttemptError{priorAttempt{key: db.DeliveryKey{EventID: ev.ID, SubscriberID: sub.ID}, attempt: a}}
	}
	k := db.DeliveryKey{EventID: ev.ID, SubscriberID: sub.ID}
	w.outcomes = append(w.outcomes, deliveryOutcome{key: k, evType: ev.Type, subscriber: sub.Name, outcome: db.DeliveryDelivered})
	w.written = append(w.written, events...)
	return int32(elapsed / time.Millisecond), nil
}

// deleteJobs deletes, in tx, the River jobs ids (dispatch jobs of the
// events a batch took on: each would only find its event dispatched, at
// the cost of a fetch, a transaction and a completion).
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
