package jobs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"erp/db"
)

// Concurrent sales orders share a commit. A document takes its number at
// commit and holds its gapless series row until the commit's WAL flush,
// so orders of one series commit one after another: with a transaction
// each, the series admits one order per flush (1–2 ms on the benchmark
// machine) and a steady 400 orders/s queued on that row. Here the orders
// written while a commit is in flight wait and then go into one
// transaction together, each in a savepoint of its own: one series lock
// and one flush for all of them, the numbers still gapless and in the
// order the orders were written.

// maxGroupRunners is how many shared transactions run at once: two let
// one group's statements overlap the other's commit.
const maxGroupRunners = 2

// maxGroupMembers bounds a shared transaction, so that its series lock
// and its rows' locks are held for a bounded time.
const maxGroupMembers = 64

// groupTimeout bounds a grouped write's transaction, shared or not. It
// does not run under any caller's cancellation: a client that goes away
// must not roll back the others' orders.
const groupTimeout = 30 * time.Second

// commitGroup queues the grouped writes of one outbox.
type commitGroup struct {
	mu      sync.Mutex
	runners int
	queue   []*groupMember
}

// groupMember is one WriteGrouped call.
type groupMember struct {
	ctx context.Context
	// run writes the member in tx and keeps its result; it is called
	// again when the member is retried alone.
	run    func(ctx context.Context, tx pgx.Tx) ([]db.Event, error)
	events []db.Event // committed with the member
	err    error
	done   chan struct{}
}

// WriteGrouped is Write for a mutation that inserts a new document which
// takes its number at commit (createSalesOrder), and whose writes touch
// nothing another such mutation could. A call made while a shared
// transaction is in flight waits for the next one and runs in it, in a
// savepoint: its error (returned to it alone) rolls back only its own
// writes, and the transaction commits the others. fn gets ctx's values
// without its cancellation, bounded by the transaction's 30 s, and must
// use that context for its statements; a call whose ctx ends before its
// turn writes nothing and returns ctx's error, one whose ctx ends later
// is committed all the same.
// A shared commit that fails with a database error (all of it rolled
// back, e.g. an exhausted series) runs each member again in a transaction
// of its own, so that one member's failure is its alone; a commit whose
// outcome is unknown (the connection lost) fails every member, as Write
// does. Errors are Write's.
func WriteGrouped[T any](ctx context.Context, o *Outbox, fn func(ctx context.Context, tx pgx.Tx) (T, []db.Event, error)) (T, error) {
	var result T
	m := &groupMember{ctx: ctx, done: make(chan struct{})}
	m.run = func(ctx context.Context, tx pgx.Tx) ([]db.Event, error) {
		v, events, err := fn(ctx, tx)
		if err == nil {
			result = v
		}
		return events, err
	}
	o.group.mu.Lock()
	o.group.queue = append(o.group.queue, m)
	start := o.group.runners < maxGroupRunners
	var batch []*groupMember
	if start {
		o.group.runners++
		batch = o.group.takeLocked()
	}
	o.group.mu.Unlock()
	if start {
		go o.runGroups(batch)
	}
	// Not ctx: a member taken into a transaction is decided there, and
	// one still queued is skipped at its turn when its ctx has ended.
	<-m.done
	if m.err != nil {
		var zero T
		return zero, m.err
	}
	return result, nil
}

// takeLocked takes up to maxGroupMembers queued members, oldest first.
func (g *commitGroup) takeLocked() []*groupMember {
	n := min(len(g.queue), maxGroupMembers)
	batch := make([]*groupMember, n)
	copy(batch, g.queue)
	rest := copy(g.queue, g.queue[n:])
	clear(g.queue[rest:])
	g.queue = g.queue[:rest]
	return batch
}

// runGroups commits batch, then whatever queued meanwhile, until the
// queue is empty.
func (o *Outbox) runGroups(batch []*groupMember) {
	for {
		o.commitShared(batch)
		o.group.mu.Lock()
		if len(o.group.queue) == 0 {
			o.group.runners--
			o.group.mu.Unlock()
			return
		}
		batch = o.group.takeLocked()
		o.group.mu.Unlock()
	}
}

// commitShared writes batch's members in one transaction, a savepoint
// each, and tells each its outcome.
func (o *Outbox) commitShared(batch []*groupMember) {
	live := batch[:0:0]
	for _, m := range batch {
		if err := m.ctx.Err(); err != nil {
			m.finish(nil, err)
			continue
		}
		live = append(live, m)
	}
	if len(live) == 0 {
		return
	}
	if len(live) == 1 {
		o.writeAlone(live[0])
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(live[0].ctx), groupTimeout)
	defer cancel()
	written, err := o.writeShared(ctx, live)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		for _, m := range live {
			if m.err != nil {
				m.finish(nil, m.err)
				continue
			}
			o.countWritten(m.events)
			m.finish(m.events, nil)
		}
	case written && !errors.As(err, &pgErr):
		// The commit's outcome is unknown: retrying could write twice.
		err = db.CommitErr(err)
		for _, m := range live {
			m.finish(nil, err)
		}
	default:
		// Rolled back: every member is written again on its own, its
		// own error (or its own commit's) then its alone.
		for _, m := range live {
			o.writeAlone(m)
		}
	}
}

// writeShared runs live's members in one transaction; members whose fn
// failed are rolled back to their savepoint and keep their error in
// m.err. committing reports that COMMIT was sent: an error after it is
// the commit's.
func (o *Outbox) writeShared(ctx context.Context, live []*groupMember) (committing bool, err error) {
	tx, err := o.pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() {
		if err != nil && !committing {
			_ = tx.Rollback(ctx)
		}
	}()
	var all []db.Event
	for _, m := range live {
		m.err = nil
		sp, err := tx.Begin(ctx) // a savepoint
		if err != nil {
			return false, err
		}
		events, err := m.runSafely(ctx, sp)
		if err != nil {
			if rbErr := sp.Rollback(ctx); rbErr != nil {
				return false, rbErr
			}
			m.err = err
			continue
		}
		if err := sp.Commit(ctx); err != nil {
			return false, err
		}
		m.events = events
		all = append(all, events...)
	}
	if err := EnqueueDispatch(ctx, o.river, tx, all); err != nil {
		return false, err
	}
	return true, tx.Commit(ctx)
}

// writeAlone writes m in a transaction of its own, as Write does.
func (o *Outbox) writeAlone(m *groupMember) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(m.ctx), groupTimeout)
	defer cancel()
	var events []db.Event
	err := pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		var err error
		if events, err = m.runSafely(ctx, tx); err != nil {
			return err
		}
		return EnqueueDispatch(ctx, o.river, tx, events)
	})
	if err != nil {
		m.finish(nil, db.CommitErr(err))
		return
	}
	o.countWritten(events)
	m.finish(events, nil)
}

// runSafely runs m's fn in tx under m's context without its cancellation
// and with the transaction's deadline, a panic in fn becoming m's error
// (fn runs on a goroutine no request's recovery covers).
func (m *groupMember) runSafely(ctx context.Context, tx pgx.Tx) (events []db.Event, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("write panicked: %v", p)
		}
	}()
	fnCtx := context.WithoutCancel(m.ctx)
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		fnCtx, cancel = context.WithDeadline(fnCtx, deadline)
		defer cancel()
	}
	return m.run(fnCtx, tx)
}

func (m *groupMember) finish(events []db.Event, err error) {
	m.events, m.err = events, err
	close(m.done)
}

func (o *Outbox) countWritten(events []db.Event) {
	for _, ev := range events {
		o.Metrics.EventWritten(ev.Type)
	}
}
