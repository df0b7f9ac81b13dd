package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"erp/db"
)

// sweepBatch is how many unprocessed event ids the sweep reads per query.
const sweepBatch = 500

// Dispatcher delivers journal events to the subscribers.
type Dispatcher struct {
	pool        *pgxpool.Pool
	logger      *slog.Logger
	subscribers []Subscriber
}

// NewDispatcher returns a dispatcher calling subscribers in the given order.
func NewDispatcher(pool *pgxpool.Pool, logger *slog.Logger, subscribers ...Subscriber) *Dispatcher {
	return &Dispatcher{pool: pool, logger: logger, subscribers: subscribers}
}

// Dispatch processes event id in one transaction: lock it, call every
// subscriber that accepts its type, mark it processed and NOTIFY the feed.
// It reports false, nil when there was nothing to do (unknown or already
// processed). A subscriber error rolls everything back and is returned.
func (d *Dispatcher) Dispatch(ctx context.Context, id int64) (bool, error) {
	processed := false
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		ev, err := db.LockUnprocessedEvent(ctx, tx, id)
		if errors.Is(err, db.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, s := range d.subscribers {
			if !s.Accepts(ev.Type) {
				continue
			}
			if err := s.Handle(ctx, tx, ev); err != nil {
				return fmt.Errorf("subscriber %s on event %d: %w", s.Name(), id, err)
			}
		}
		if err := db.MarkEventProcessed(ctx, tx, id); err != nil {
			return err
		}
		processed = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("dispatch event %d: %w", id, err)
	}
	return processed, nil
}

// SweepResult counts one sweep's work: events it processed and events whose
// dispatch failed (left for the next sweep or their job's retry).
type SweepResult struct {
	Processed int
	Failed    int
}

// Sweep dispatches every event still unprocessed, oldest first, selected by
// state (processed_at IS NULL), not by id past a remembered cursor, so late
// commits and events whose job was lost are found. A failing event is
// counted and skipped; the sweep goes on with the rest.
func (d *Dispatcher) Sweep(ctx context.Context) (SweepResult, error) {
	var res SweepResult
	var after int64
	for {
		ids, err := db.UnprocessedEventIDs(ctx, d.pool, after, sweepBatch)
		if err != nil {
			return res, err
		}
		for _, id := range ids {
			after = id
			processed, err := d.Dispatch(ctx, id)
			if err != nil {
				if ctx.Err() != nil {
					return res, ctx.Err()
				}
				res.Failed++
				d.logger.WarnContext(ctx, "sweep: dispatch failed", slog.Int64("event_id", id), slog.String("error", err.Error()))
				continue
			}
			if processed {
				res.Processed++
			}
		}
		if len(ids) < sweepBatch {
			return res, nil
		}
	}
}

// DispatchArgs is the River job that dispatches one journal event; it is
// enqueued in the transaction that wrote the event.
type DispatchArgs struct {
	EventID int64 `json:"event_id"`
}

// Kind implements river.JobArgs.
func (DispatchArgs) Kind() string { return "dispatch_event" }

// DispatchWorker works DispatchArgs. A failure is retried by River with its
// default backoff; the periodic sweep is the safety net behind that.
type DispatchWorker struct {
	river.WorkerDefaults[DispatchArgs]
	Dispatcher *Dispatcher
}

// Work implements river.Worker.
func (w *DispatchWorker) Work(ctx context.Context, job *river.Job[DispatchArgs]) error {
	_, err := w.Dispatcher.Dispatch(ctx, job.Args.EventID)
	return err
}

// SweepArgs is the periodic River job (every DISPATCH_INTERVAL, once per
// cluster through River's leader) that sweeps unprocessed events.
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
// longer than River's default one minute; it stops between events on ctx.
func (w *SweepWorker) Timeout(*river.Job[SweepArgs]) time.Duration { return 15 * time.Minute }

// Work implements river.Worker.
func (w *SweepWorker) Work(ctx context.Context, _ *river.Job[SweepArgs]) error {
	res, err := w.Dispatcher.Sweep(ctx)
	if res.Processed > 0 || res.Failed > 0 {
		w.Logger.InfoContext(ctx, "sweep done", slog.Int("processed", res.Processed), slog.Int("failed", res.Failed))
	}
	return err
}
