package jobs

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"erp/db"
)

// sweepBatch is how many ids the sweep reads per query.
const sweepBatch = 500

// sweepParallel is how many due deliveries the sweep attempts at once.
const sweepParallel = 8

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
// done, attempts every open delivery that is due, and keeps running replays
// going (sweepReplays). Everything is
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
	err := eachPage(func(after int64) ([]int64, error) {
		return db.UndispatchedEventIDs(ctx, d.pool, after, sweepBatch)
	}, func(ids []int64) error {
		for _, id := range ids {
			w, err := d.dispatch(ctx, id)
			if err != nil {
				if err := note("dispatch", id, err); err != nil {
					return err
				}
			}
			res.Dispatched += len(w.dispatched)
			res.Finished += len(w.finished)
			res.count(w.outcomes)
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	err = eachPage(func(after int64) ([]int64, error) {
		return db.UnfinishedEventIDs(ctx, d.pool, after, sweepBatch)
	}, func(ids []int64) error {
		var w txWork
		err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) (err error) {
			w = txWork{}
			w.finished, err = db.FinishEventsIfDone(ctx, tx, ids)
			return err
		})
		if err != nil {
			return note("finish", ids[0], err)
		}
		d.record(ctx, &w)
		res.Finished += len(w.finished)
		return nil
	})
	if err != nil {
		return res, err
	}
	err = eachPage(func(after db.DeliveryKey) ([]db.DeliveryKey, error) {
		return db.DueDeliveries(ctx, d.pool, after, sweepBatch)
	}, func(keys []db.DeliveryKey) error {
		var mu sync.Mutex
		var noteErr error
		inParallel(keys, func(k db.DeliveryKey) {
			w, err := d.deliver(ctx, k)
			mu.Lock()
			defer mu.Unlock()
			var th *throttledError
			switch {
			case errors.As(err, &th):
				// At its limits: the delivery's own job (snoozing) or a
				// later sweep makes the attempt.
			case err != nil:
				if nerr := note("delivery", k.EventID, err); nerr != nil {
					noteErr = nerr
				}
			default:
				res.Finished += len(w.finished)
				res.count(w.outcomes)
			}
		})
		return noteErr
	})
	if err != nil {
		return res, err
	}
	return res, d.sweepReplays(ctx, &res, note)
}

// inParallel runs attempt for every key, up to sweepParallel at once, and
// returns when all have returned: receivers that never answer hold the
// sweep for one timeout, not one each.
func inParallel[K any](keys []K, attempt func(K)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, sweepParallel)
	for _, k := range keys {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			attempt(k)
		})
	}
	wg.Wait()
}

// eachPage hands each page of up to sweepBatch keys that list returns to
// handle, asking list for the keys after the last one of the page before
// (the zero key first), until a page comes back short.
func eachPage[K any](list func(after K) ([]K, error), handle func(page []K) error) error {
	var after K
	for {
		page, err := list(after)
		if err != nil {
			return err
		}
		if len(page) > 0 {
			if err := handle(page); err != nil {
				return err
			}
			after = page[len(page)-1]
		}
		if len(page) < sweepBatch {
			return nil
		}
	}
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
