// Package jobs is the dispatch side of the backbone: the outbox helper that
// commits document rows, their journal events and their River jobs in one
// transaction; the River workers that dispatch events to subscribers; the
// periodic sweep; and the subscribers themselves.
package jobs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"erp/db"
	"erp/metrics"
)

// Outbox commits document writes together with their events and the River
// jobs that dispatch them.
type Outbox struct {
	pool  *pgxpool.Pool
	river *river.Client[pgx.Tx]
	// Metrics, when set, counts the events committed through Write and
	// WriteGrouped.
	Metrics *metrics.Metrics
	// group queues WriteGrouped's calls.
	group commitGroup
}

// NewOutbox returns an outbox writing through pool and enqueuing on client
// (which may be an insert-only client: no workers started).
func NewOutbox(pool *pgxpool.Pool, client *river.Client[pgx.Tx]) *Outbox {
	return &Outbox{pool: pool, river: client}
}

// Pool is the pool the outbox writes through, for reads that go with writes.
func (o *Outbox) Pool() *pgxpool.Pool { return o.pool }

// Write runs fn in one transaction and, in that same transaction, enqueues a
// dispatch job for every event fn returns. Commit makes the rows, the events
// and the jobs visible at once; any error rolls all of them back (and frees
// any document number fn took). A transaction PostgreSQL fails to let
// concurrent ones go on (a deadlock, a serialization failure) is run again,
// fn included, as runTx says; fn must keep nothing from a run that failed.
// A commit error is returned as db.CommitErr gives it: a sales order takes
// its number inside COMMIT.
func Write[T any](ctx context.Context, o *Outbox, fn func(tx pgx.Tx) (T, []db.Event, error)) (T, error) {
	var result T
	var written []db.Event
	err := runTx(ctx, o.pool, func(tx pgx.Tx) error {
		v, events, err := fn(tx)
		if err != nil {
			return err
		}
		if err := EnqueueDispatch(ctx, o.river, tx, events); err != nil {
			return err
		}
		result, written = v, events
		return nil
	})
	if err != nil {
		var zero T
		return zero, db.CommitErr(err)
	}
	for _, ev := range written {
		o.Metrics.EventWritten(ev.Type)
	}
	return result, nil
}

// txAttempts is how many times runTx runs a transaction that PostgreSQL
// keeps failing to let concurrent ones go on.
const txAttempts = 4

// txRetryGap is the pause before runTx's first retry; it doubles for each
// one after (10, 20, 40 ms), less a random part of up to half, so that
// the transactions a deadlock set against each other do not meet again in
// step.
const txRetryGap = 10 * time.Millisecond

// runTx runs fn in a transaction of pool that commits when fn returns nil
// and rolls back otherwise (pgx.BeginFunc): the one way a mutation's
// transaction is run. When PostgreSQL fails it only to let concurrent
// ones go on (db.IsRetryableTx: it broke a deadlock, or could not
// serialize it), fn runs again in a new transaction after a short pause,
// up to txAttempts runs in all; so fn must keep nothing from a run that
// failed. The last such failure is returned wrapped in db.ErrBusy; ctx
// ending during a pause returns ctx's error. Any other error is returned
// as fn or the commit gave it.
func runTx(ctx context.Context, pool *pgxpool.Pool, fn func(tx pgx.Tx) error) error {
	gap := txRetryGap
	for attempt := 1; ; attempt++ {
		err := pgx.BeginFunc(ctx, pool, fn)
		if err == nil || !db.IsRetryableTx(err) {
			return err
		}
		if attempt == txAttempts {
			return fmt.Errorf("%w (%d attempts): %w", db.ErrBusy, attempt, err)
		}
		t := time.NewTimer(gap - rand.N(gap/2))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		gap *= 2
	}
}

// EnqueueDispatch inserts one dispatch job per event in tx.
func EnqueueDispatch(ctx context.Context, client *river.Client[pgx.Tx], tx pgx.Tx, events []db.Event) error {
	dispatch := make([]DispatchArgs, len(events))
	for i, ev := range events {
		dispatch[i] = DispatchArgs{EventID: ev.ID, jobID: ev.NewDispatchJobID}
	}
	return insertJobs(ctx, client, tx, dispatch, nil)
}

// insertJobs inserts, in tx and in one statement, the dispatch jobs
// dispatch and the jobs other. A dispatch job whose event was just
// inserted takes the id the event noted (events.dispatch_job_id), so that
// a batch taking the event on can delete the job; the events of the
// others (a redispatch) are updated to note their new job.
func insertJobs(ctx context.Context, client *river.Client[pgx.Tx], tx pgx.Tx, dispatch []DispatchArgs, other []river.InsertManyParams) error {
	if len(dispatch)+len(other) == 0 {
		return nil
	}
	params := make([]river.InsertManyParams, 0, len(dispatch)+len(other))
	for _, a := range dispatch {
		params = append(params, river.InsertManyParams{Args: a})
	}
	params = append(params, other...)
	res, err := client.InsertManyTx(ctx, tx, params)
	if err != nil {
		return fmt.Errorf("enqueue %d jobs: %w", len(params), err)
	}
	var eventIDs, jobIDs []int64
	for i, a := range dispatch {
		if id := res[i].Job.ID; id != a.jobID {
			// No id noted, or a client without presetJobIDs.
			eventIDs, jobIDs = append(eventIDs, a.EventID), append(jobIDs, id)
		}
	}
	if len(eventIDs) == 0 {
		return nil
	}
	return db.SetDispatchJobs(ctx, tx, eventIDs, jobIDs)
}

// presetJobIDs is the River insert middleware that gives a dispatch job
// the id its event noted (DispatchArgs.jobID); River inserts a job with
// the id its insert parameters carry.
type presetJobIDs struct{ river.MiddlewareDefaults }

var _ rivertype.JobInsertMiddleware = (*presetJobIDs)(nil)

// InsertMany implements rivertype.JobInsertMiddleware.
func (*presetJobIDs) InsertMany(ctx context.Context, params []*rivertype.JobInsertParams, doInner func(context.Context) ([]*rivertype.JobInsertResult, error)) ([]*rivertype.JobInsertResult, error) {
	for _, p := range params {
		if a, ok := p.Args.(DispatchArgs); ok && a.jobID != 0 && p.ID == nil {
			id := a.jobID
			p.ID = &id
		}
	}
	return doInner(ctx)
}
