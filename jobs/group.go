package jobs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"erp/db"
)

// Concurrent sales orders share a commit. A document takes its number at
// commit and holds its gapless series row until the commit's WAL flush,
// so orders of one series commit one after another: with a transaction
// each, the series admits one order per flush (1–5 ms on the benchmark
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

// groupTimeout bounds a shared transaction. It does not run under any
// caller's cancellation: a client that goes away must not roll back the
// others' orders.
const groupTimeout = 10 * time.Second

// groupTimeouts bound, on the server, a shared transaction's waits: a
// member stuck on a row another transaction holds fails with a database
// error its savepoint absorbs, and is written again on its own once the
// others committed, instead of holding them all up (a client-side
// deadline would drop the connection and the whole transaction with it).
var groupTimeouts = db.Timeouts{Lock: "1s", Statement: "5s"}

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
	// alone: the member's write in the shared transaction timed out on
	// the server or was failed to break a deadlock; it is written on its
	// own after the others.
	alone    bool
	finished bool // done is closed; read and set by the runner only
	done     chan struct{}
}

// WriteGrouped is Write for a mutation that inserts a new document which
// takes its number at commit (createSalesOrder), and whose writes touch
// nothing another such mutation could. A call that finds fewer than two
// shared transactions in flight is written at once, alone, under ctx, as
// Write would. One made while two are in flight waits and goes into the
// next, in a savepoint: its error (returned to it alone) rolls back only
// its own writes, and the transaction commits the others. There fn runs
// under ctx's values without its cancellation, within the transaction's
// 10 s and server-side lock (1 s) and statement (5 s) timeouts; a call
// stopped by those, or failed to break a deadlock, is written again on its
// own after the others. A call
// whose ctx ends while it waits returns ctx's error and writes nothing;
// once in a shared transaction it is decided there. A shared commit that
// fails with a database error or before COMMIT was sent (all of it rolled
// back, e.g. an exhausted series) writes each member again on its own,
// under its ctx, so that one member's failure is its alone; a commit
// whose outcome is unknown (the connection lost during COMMIT) fails
// every member, as Write does. Errors are Write's.
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
	select {
	case <-m.done:
	case <-ctx.Done():
		if o.group.remove(m) {
			var zero T
			return zero, ctx.Err()
		}
		// Taken into a shared transaction: decided there.
		<-m.done
	}
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

// remove takes m out of the queue; false when a runner took it already.
func (g *commitGroup) remove(m *groupMember) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, x := range g.queue {
		if x == m {
			g.queue = append(g.queue[:i], g.queue[i+1:]...)
			return true
		}
	}
	return false
}

// runGroups commits batch, then whatever queued meanwhile, until the
// queue is empty. Should it end otherwise (a panic outside a member's fn,
// in River's insert or pgx, or runtime.Goexit), the members of its batch
// not yet told are told so, and another runner takes the queue on.
func (o *Outbox) runGroups(batch []*groupMember) {
	normal := false
	defer func() {
		if normal {
			return
		}
		err := fmt.Errorf("shared write ended abnormally: %v", recover())
		for _, m := range batch {
			if !m.finished {
				m.finish(nil, err)
			}
		}
		o.group.mu.Lock()
		var next []*groupMember
		if len(o.group.queue) > 0 {
			next = o.group.takeLocked()
		} else {
			o.group.runners--
		}
		o.group.mu.Unlock()
		if next != nil {
			go o.runGroups(next)
		}
	}()
	for {
		o.commitShared(batch)
		o.group.mu.Lock()
		if len(o.group.queue) == 0 {
			o.group.runners--
			o.group.mu.Unlock()
			normal = true
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
			switch {
			case m.alone:
				o.writeAlone(m)
			case m.err != nil:
				m.finish(nil, m.err)
			default:
				o.countWritten(m.events)
				m.finish(m.events, nil)
			}
		}
	case written && !errors.As(err, &pgErr) && !pgconn.SafeToRetry(err):
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
		// Every return before COMMIT is an error, and a panic (which
		// runGroups reports) returns none: both roll back, so that the
		// connection goes back to the pool.
		if !committing {
			_ = tx.Rollback(ctx)
		}
	}()
	sessionTimeouts, err := db.SetTimeouts(ctx, tx, groupTimeouts)
	if err != nil {
		return false, err
	}
	var all []db.Event
	for _, m := range live {
		m.err, m.alone = nil, false
		sp, err := tx.Begin(ctx) // a savepoint
		if err != nil {
			return false, err
		}
		fnCtx, cancel := sharedCtx(ctx, m)
		events, err := m.runSafely(fnCtx, sp)
		cancel()
		if err != nil {
			if rbErr := sp.Rollback(ctx); rbErr != nil {
				return false, rbErr
			}
			m.err, m.alone = err, timedOut(err) || db.IsRetryableTx(err)
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
	// The timeouts are for the members' statements. At COMMIT the
	// numbering waits its turn on the series behind other commits, as
	// every write does; a second of it under load must not fail the
	// whole group and re-run each member alone (groupTimeout bounds it).
	if _, err := db.SetTimeouts(ctx, tx, sessionTimeouts); err != nil {
		return false, err
	}
	return true, tx.Commit(ctx)
}

// writeAlone writes m in a transaction of its own under its own context,
// as Write does (retries included): a member whose caller left is not
// written.
func (o *Outbox) writeAlone(m *groupMember) {
	if err := m.ctx.Err(); err != nil {
		m.finish(nil, err)
		return
	}
	var events []db.Event
	err := runTx(m.ctx, o.pool, func(tx pgx.Tx) error {
		var err error
		if events, err = m.runSafely(m.ctx, tx); err != nil {
			return err
		}
		return EnqueueDispatch(m.ctx, o.river, tx, events)
	})
	if err != nil {
		m.finish(nil, db.CommitErr(err))
		return
	}
	o.countWritten(events)
	m.finish(events, nil)
}

// sharedCtx is the context m's fn runs under in a shared transaction
// whose context is ctx: m's values without its cancellation, with ctx's
// deadline.
func sharedCtx(ctx context.Context, m *groupMember) (context.Context, context.CancelFunc) {
	deadline, _ := ctx.Deadline()
	return context.WithDeadline(context.WithoutCancel(m.ctx), deadline)
}

// timedOut reports a statement that the shared transaction's server-side
// timeouts ended (lock_not_available, query_canceled).
func timedOut(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.LockNotAvailable || pgErr.Code == pgerrcode.QueryCanceled)
}

// runSafely runs m's fn in tx under ctx, a panic in fn becoming m's error
// (fn may run on a goroutine no request's recovery covers).
func (m *groupMember) runSafely(ctx context.Context, tx pgx.Tx) (events []db.Event, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("write panicked: %v", p)
		}
	}()
	return m.run(ctx, tx)
}

func (m *groupMember) finish(events []db.Event, err error) {
	m.events, m.err, m.finished = events, err, true
	close(m.done)
}

func (o *Outbox) countWritten(events []db.Event) {
	for _, ev := range events {
		o.Metrics.EventWritten(ev.Type)
	}
}
