package jobs

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"erp/db"
)

// DefaultRetention is how long delivered delivery records, River's
// finished jobs and the auth changes the token watch reads are kept
// unless RETENTION says otherwise. The journal (events) is kept forever.
const DefaultRetention = 7 * 24 * time.Hour

// pruneBatch is how many rows one prune statement deletes, so
// that a large backlog is pruned in short transactions.
const pruneBatch = 1000

// pruneInterval is the period of the prune job.
const pruneInterval = 24 * time.Hour

// PruneArgs is the periodic River job (daily, on the leader) that deletes
// delivered delivery records (PruneDeliveries) and auth changes
// (PruneAuthChanges) older than the retention period.
type PruneArgs struct{}

// Kind implements river.JobArgs.
func (PruneArgs) Kind() string { return "prune_deliveries" }

// PruneWorker works PruneArgs.
type PruneWorker struct {
	river.WorkerDefaults[PruneArgs]
	Pool      *pgxpool.Pool
	Retention time.Duration
	Logger    *slog.Logger
}

// Timeout implements river.Worker: a first prune of a large table takes
// many batches; it stops between them on ctx.
func (w *PruneWorker) Timeout(*river.Job[PruneArgs]) time.Duration { return 30 * time.Minute }

// Work implements river.Worker.
func (w *PruneWorker) Work(ctx context.Context, _ *river.Job[PruneArgs]) error {
	before := time.Now().Add(-w.Retention)
	n, err := PruneDeliveries(ctx, w.Pool, before)
	if n > 0 {
		w.Logger.InfoContext(ctx, "delivered deliveries pruned", slog.Int64("rows", n), slog.Duration("retention", w.Retention))
	}
	if err != nil {
		return err
	}
	n, err = PruneAuthChanges(ctx, w.Pool, before)
	if n > 0 {
		w.Logger.InfoContext(ctx, "auth changes pruned", slog.Int64("rows", n), slog.Duration("retention", w.Retention))
	}
	return err
}

// PruneAuthChanges deletes the auth changes (token revocations, role
// changes: auth_changes) recorded before before, in batches of
// pruneBatch rows, and returns how many it deleted. Each instance's token
// watch reads them by position (seq > the last one it read) every
// httpapi.TokenPoll (2 s), so a change older than the retention period
// (at least 1 h) has been read by every instance that can reach the
// database; an instance that starts reads from the oldest one left, and
// needs none from before it started (a revoked token cannot open a
// socket). What an instance cut off from the database for longer than
// the retention period missed is lost to it.
func PruneAuthChanges(ctx context.Context, pool *pgxpool.Pool, before time.Time) (int64, error) {
	return pruneEach(ctx, func() (int64, error) { return db.PruneAuthChanges(ctx, pool, before, pruneBatch) })
}

// PruneDeliveries deletes delivered delivery records delivered before
// before, the records of replays that ended before before and the
// attempt log's rows of attempts started before before, in batches of
// pruneBatch rows, and returns how many it deleted.
func PruneDeliveries(ctx context.Context, pool *pgxpool.Pool, before time.Time) (int64, error) {
	var total int64
	for _, prune := range []func(context.Context, db.Querier, time.Time, int) (int64, error){
		db.PruneDeliveredDeliveries, db.PruneEndedReplayDeliveries, db.PruneAttemptLog,
	} {
		n, err := pruneEach(ctx, func() (int64, error) { return prune(ctx, pool, before, pruneBatch) })
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// pruneEach runs prune, which deletes at most pruneBatch rows, until it
// deletes fewer, and returns how many it deleted in all.
func pruneEach(ctx context.Context, prune func() (int64, error)) (int64, error) {
	var total int64
	for {
		n, err := prune()
		total += n
		if err != nil || n < pruneBatch {
			return total, err
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}
