package jobs

import (
	"context"
	"sync"
	"time"
)

// Dispatch transactions of one process are few and shared. Every commit
// that marks events processed takes the single feed_counter row and holds
// it until its commit has flushed the WAL, so such commits follow one
// another: a transaction per event at 500 events/s queued on that row (a
// WAL flush is 1–2 ms on the benchmark machine) and the dispatch fell
// behind, while a bigger pool only queued more transactions on it. Here a
// dispatch job that finds maxLeaders transactions of this process in flight
// waits, holding no connection, and a transaction's backlog claim takes the
// waiting jobs' events on: one commit for what arrived during the last.
// The database still decides who dispatches what (the event locks): the
// sharing only saves commits, and a job that was not served dispatches
// its event itself.

// maxLeaders is how many dispatch transactions of this process run at
// once, the default pool's connections: long ones (a drain's batches of
// built-in deliveries) keep the cores busy, each one's statements and
// work in Go overlapping the others' round trips and commits.
const maxLeaders = 4

// moreLeadersAfter is how long a job waits while a transaction is in
// flight before it starts another (up to maxLeaders): a short transaction
// (a few events and a commit, 2–3 ms) is better waited for and shared than
// raced for the feed counter; a long one is not.
const moreLeadersAfter = 5 * time.Millisecond

// waitAlone bounds a job's wait for a slot: past it the job dispatches
// alone, so that two transactions stuck on locks do not hold up every
// dispatch of the process.
const waitAlone = 200 * time.Millisecond

// shareOutcome is what a waiting dispatch job was told.
type shareOutcome int

const (
	// shareLead: run a dispatch transaction (a slot is the job's).
	shareLead shareOutcome = iota
	// shareServed: a committed transaction dispatched the job's event.
	shareServed
	// shareAlone: dispatch without a slot: the transaction that took the
	// job's event on did not commit it, or no slot came within waitAlone.
	shareAlone
)

// dispatchShare is the process's dispatch jobs: the transactions in
// flight and the jobs waiting for one.
type dispatchShare struct {
	mu      sync.Mutex
	leaders int
	waiting []*shareWaiter
}

// shareWaiter is a dispatch job waiting for its event id.
type shareWaiter struct {
	id int64
	ch chan shareOutcome // buffered: the sender never waits
}

// leader is a dispatch transaction in flight and the waiting jobs whose
// events its claims took on.
type leader struct {
	share    *dispatchShare
	attached []*shareWaiter
}

// join returns a slot (shareLead, with the leader) at once when no
// transaction is in flight; else it waits for a slot (handed on by a
// finishing leader, or taken after moreLeadersAfter when one is free),
// for a transaction to serve event id, for waitAlone, or for ctx.
func (s *dispatchShare) join(ctx context.Context, id int64) (shareOutcome, *leader, error) {
	s.mu.Lock()
	if s.leaders == 0 {
		s.leaders++
		s.mu.Unlock()
		return shareLead, &leader{share: s}, nil
	}
	w := &shareWaiter{id: id, ch: make(chan shareOutcome, 1)}
	s.waiting = append(s.waiting, w)
	s.mu.Unlock()

	timer := time.NewTimer(moreLeadersAfter)
	defer timer.Stop()
	alone := time.NewTimer(waitAlone)
	defer alone.Stop()
	for {
		select {
		case o := <-w.ch:
			if o == shareLead {
				return o, &leader{share: s}, nil
			}
			return o, nil, nil
		case <-timer.C:
			if s.promote(w) {
				return shareLead, &leader{share: s}, nil
			}
		case <-alone.C:
			if s.remove(w) {
				return shareAlone, nil, nil
			}
		case <-ctx.Done():
			if !s.remove(w) {
				// Handed an outcome meanwhile, or attached to a leader
				// that will hand one: a slot must be given back.
				if o := <-w.ch; o == shareLead {
					(&leader{share: s}).finish(nil)
				}
			}
			return 0, nil, ctx.Err()
		}
	}
}

// promote makes waiting w a leader when a slot is free.
func (s *dispatchShare) promote(w *shareWaiter) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leaders >= maxLeaders || !s.removeLocked(w) {
		return false
	}
	s.leaders++
	return true
}

func (s *dispatchShare) remove(w *shareWaiter) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.removeLocked(w)
}

func (s *dispatchShare) removeLocked(w *shareWaiter) bool {
	for i, x := range s.waiting {
		if x == w {
			s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
			return true
		}
	}
	return false
}

// waitingIDs are the events of the jobs waiting: when there are some, a
// transaction claims a backlog whatever its own event waited.
func (l *leader) waitingIDs() []int64 {
	if l == nil {
		return nil
	}
	l.share.mu.Lock()
	defer l.share.mu.Unlock()
	ids := make([]int64, len(l.share.waiting))
	for i, w := range l.share.waiting {
		ids[i] = w.id
	}
	return ids
}

// attach takes the waiting jobs of the events claimed (locked by the
// leader's transaction) out of the queue: they wait for its outcome.
func (l *leader) attach(claimed []int64) {
	if l == nil || len(claimed) == 0 {
		return
	}
	in := make(map[int64]bool, len(claimed))
	for _, id := range claimed {
		in[id] = true
	}
	l.share.mu.Lock()
	defer l.share.mu.Unlock()
	kept := l.share.waiting[:0]
	for _, w := range l.share.waiting {
		if in[w.id] {
			l.attached = append(l.attached, w)
		} else {
			kept = append(kept, w)
		}
	}
	clear(l.share.waiting[len(kept):])
	l.share.waiting = kept
}

// finish ends the leader's transaction: the attached jobs whose events it
// committed dispatched (served) are done, the others dispatch theirs
// alone; its slot goes to the waiting job of the lowest event id (whose
// claim reaches the others' events, which come after it).
func (l *leader) finish(served map[int64]bool) {
	for _, w := range l.attached {
		if served[w.id] {
			w.ch <- shareServed
		} else {
			w.ch <- shareAlone
		}
	}
	l.attached = nil
	s := l.share
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waiting) == 0 {
		s.leaders--
		return
	}
	next := 0
	for i, w := range s.waiting {
		if w.id < s.waiting[next].id {
			next = i
		}
	}
	w := s.waiting[next]
	s.waiting = append(s.waiting[:next], s.waiting[next+1:]...)
	w.ch <- shareLead // the slot passes on: leaders stays
}
