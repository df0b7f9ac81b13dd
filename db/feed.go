package db

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// feedBatch bounds how many events one catch-up query reads.
const feedBatch = 500

// Feed is this process's view of the live journal: one LISTEN connection on
// channel event_processed (or, with no session connection, a read of the
// journal every FeedPollInterval), and a fan-out of processed events to
// in-process subscribers. A notification only wakes the feed; it then reads every
// event with a feed sequence past the last one it delivered, so events are
// read once per process (not once per subscriber), in feed order, and
// nothing is lost when notifications are coalesced or the connection drops.
type Feed struct {
	pool    *pgxpool.Pool
	session *pgxpool.Pool // where it LISTENs; nil: it polls the journal
	poll    time.Duration
	logger  *slog.Logger

	mu      sync.Mutex
	subs    map[*FeedSubscription]struct{}
	lastSeq int64
	ready   chan struct{}
	stopped bool
}

// FeedSubscription receives processed events matching its filter, in feed
// order, through Next. It ends when Close is called, the feed stops, or the
// subscriber falls more than its buffer behind (Overflowed then reports
// true; it can resume from its last cursor).
//
// The events are shared by every subscriber of the process and must not
// be modified. The queue of pending events starts empty and grows with the
// backlog up to the buffer (8 bytes an event), and shrinks back once
// drained: an idle subscription holds no buffer.
type FeedSubscription struct {
	filter EventFilter
	feed   *Feed
	buffer int
	// wake (capacity 1) tells a waiting Next that the queue grew or the
	// subscription ended. One channel rather than a select on done too:
	// an idle subscriber waits for as long as it is idle, and each channel
	// it waits on holds a 112-byte sudog. Nil under SubscribeFunc, whose
	// subscriber is told by notify instead and never waits in Next.
	wake chan struct{}
	// notify, when set (SubscribeFunc), is told of the same as wake; it
	// runs with the feed locked.
	notify func()

	mu    sync.Mutex
	queue []*Event // pending events are queue[head:]
	head  int
	ended bool
	// done is closed when the subscription ends; made by the first call
	// of Done, which few subscribers make (an idle one keeps no channel).
	done chan struct{}

	overflowed bool   // guarded by feed.mu
	onOverflow func() // guarded by feed.mu
}

// smallQueue is the capacity (events) a drained queue keeps for reuse;
// a larger one, left by a burst, is released.
const smallQueue = 16

// FeedPollInterval is how often a feed with no session connection (behind
// a transaction pooler without DATABASE_DIRECT_URL) reads the journal for
// newly processed events: the latency it adds to the live feed, at most.
const FeedPollInterval = 250 * time.Millisecond

// NewFeed returns a feed that reads on pool and LISTENs on pool; Run
// starts it.
func NewFeed(pool *pgxpool.Pool, logger *slog.Logger) *Feed {
	return NewFeedOn(&Database{Pool: pool, Session: pool}, logger)
}

// NewFeedOn returns a feed on d: it reads on d.Pool and LISTENs on
// d.Session, or, when d has no session connection, reads the journal every
// FeedPollInterval instead.
func NewFeedOn(d *Database, logger *slog.Logger) *Feed {
	return &Feed{
		pool:    d.Pool,
		session: d.Session,
		poll:    FeedPollInterval,
		logger:  logger,
		subs:    make(map[*FeedSubscription]struct{}),
		ready:   make(chan struct{}),
	}
}

// Ready is closed once the feed listens, so that events processed from then
// on reach subscribers.
func (f *Feed) Ready() <-chan struct{} { return f.ready }

// LastSeq is the feed sequence of the last event the feed published (0
// before the first).
func (f *Feed) LastSeq() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastSeq
}

// Subscribers is the number of live subscriptions in this process.
func (f *Feed) Subscribers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs)
}

// Subscribe registers a subscriber with room for buffer undelivered events
// (at least 1), read with Next.
func (f *Feed) Subscribe(filter EventFilter, buffer int) *FeedSubscription {
	return f.SubscribeFunc(filter, buffer, nil)
}

// SubscribeFunc is Subscribe for a subscriber that is told rather than
// waits: notify (when not nil) is called each time an event is queued and
// once when the subscription ends, and the subscriber takes what is there
// with TryNext (with a notify, Next is not to be called: it would not be
// woken). notify runs on the feed's goroutine with the feed locked: it
// must return at once and must not call the feed. A subscription of a
// feed that stopped already has ended, and notify is called before
// SubscribeFunc returns.
func (f *Feed) SubscribeFunc(filter EventFilter, buffer int, notify func()) *FeedSubscription {
	s := &FeedSubscription{filter: filter, feed: f, buffer: max(buffer, 1), notify: notify}
	if notify == nil {
		s.wake = make(chan struct{}, 1)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		s.ended = true
		if notify != nil {
			notify()
		}
		return s
	}
	f.subs[s] = struct{}{}
	return s
}

// Next returns the subscription's next event, waiting for one. ok is false
// once the subscription ended (Close, the feed stopped, or it was dropped
// for falling behind; events still queued then are not handed out: the
// subscriber resumes by cursor) or when ctx ends first.
func (s *FeedSubscription) Next(ctx context.Context) (ev *Event, ok bool) {
	for {
		if ev, open := s.TryNext(); ev != nil || !open {
			return ev, open
		}
		select {
		case <-s.wake:
		case <-ctx.Done():
			return nil, false
		}
	}
}

// TryNext is Next without the wait: it returns the next queued event, or
// nil when none is queued. open is false once the subscription ended (as
// for Next, events still queued then are not handed out).
func (s *FeedSubscription) TryNext() (ev *Event, open bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		s.queue, s.head = nil, 0
		return nil, false
	}
	if s.head == len(s.queue) {
		return nil, true
	}
	ev = s.queue[s.head]
	s.queue[s.head] = nil
	s.head++
	if s.head == len(s.queue) {
		s.head = 0
		if cap(s.queue) > smallQueue {
			s.queue = nil
		} else {
			s.queue = s.queue[:0]
		}
	}
	return ev, true
}

// DiscardThrough drops the queued events with a feed sequence up to seq:
// a subscriber that read them from the journal meanwhile (a back-fill)
// frees their room at once instead of skipping them one by one.
func (s *FeedSubscription) DiscardThrough(seq int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.head < len(s.queue) && *s.queue[s.head].FeedSeq <= seq {
		s.queue[s.head] = nil
		s.head++
	}
}

// push queues ev unless the queue is full; false means the subscriber
// fell behind.
func (s *FeedSubscription) push(ev *Event) bool {
	s.mu.Lock()
	n := len(s.queue) - s.head
	if n >= s.buffer {
		s.mu.Unlock()
		return false
	}
	if len(s.queue) == cap(s.queue) {
		if s.head > 0 {
			// Reuse the consumed front instead of growing: the array
			// stays within the buffer however long the backlog lasts.
			copy(s.queue, s.queue[s.head:])
			clear(s.queue[n:])
			s.queue, s.head = s.queue[:n], 0
		} else {
			grown := make([]*Event, n, min(max(2*n, 4), s.buffer))
			copy(grown, s.queue)
			s.queue = grown
		}
	}
	s.queue = append(s.queue, ev)
	s.mu.Unlock()
	s.signal()
	return true
}

// signal wakes a waiting Next, unless a wake is pending already, or
// tells notify. Called with the feed locked.
func (s *FeedSubscription) signal() {
	if s.notify != nil {
		s.notify()
		return
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Close ends the subscription; safe to call more than once.
func (s *FeedSubscription) Close() {
	s.feed.mu.Lock()
	defer s.feed.mu.Unlock()
	s.feed.removeLocked(s)
}

// Done is closed when the subscription ends: a subscriber busy handing on
// an event it took selects on it to learn at once that it was dropped.
func (s *FeedSubscription) Done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		s.done = make(chan struct{})
		if s.ended {
			close(s.done)
		}
	}
	return s.done
}

// OnOverflow registers fn to run when the feed drops the subscription for
// falling behind (at once if it was dropped already). fn runs on the feed's
// goroutine with the feed locked: it must return quickly and must not call
// the feed.
func (s *FeedSubscription) OnOverflow(fn func()) {
	s.feed.mu.Lock()
	defer s.feed.mu.Unlock()
	if s.overflowed {
		fn()
		return
	}
	s.onOverflow = fn
}

// Overflowed reports whether the feed dropped this subscriber because it
// fell behind.
func (s *FeedSubscription) Overflowed() bool {
	s.feed.mu.Lock()
	defer s.feed.mu.Unlock()
	return s.overflowed
}

func (f *Feed) removeLocked(s *FeedSubscription) {
	if _, ok := f.subs[s]; ok {
		delete(f.subs, s)
		s.mu.Lock()
		s.ended = true
		if s.done != nil {
			close(s.done)
		}
		s.mu.Unlock()
		s.signal()
	}
}

// Run listens until ctx ends, reconnecting when the connection fails and
// back-filling what was processed meanwhile, so subscribers miss nothing.
// Failed attempts back off from 100 ms doubling to 5 s; a connection that
// was up starts again from 100 ms. It closes every subscription when it
// returns; it returns nil on ctx end.
func (f *Feed) Run(ctx context.Context) error {
	defer f.stop()
	const firstBackoff, maxBackoff = 100 * time.Millisecond, 5 * time.Second
	backoff := firstBackoff
	for {
		listened, err := f.listen(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if listened {
			backoff = firstBackoff
		}
		f.logger.WarnContext(ctx, "event feed connection lost, reconnecting",
			slog.String("error", err.Error()), slog.Duration("backoff", backoff))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

func (f *Feed) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = true
	for s := range f.subs {
		f.removeLocked(s)
	}
}

// start makes the feed ready on its first connection: it goes live from
// the journal's current position. What was processed before the feed
// existed is back-fill, which subscribers ask for by cursor.
func (f *Feed) start(ctx context.Context) error {
	select {
	case <-f.ready:
		return nil
	default:
	}
	last, err := queries.EventGetLastFeedSeq(ctx, f.pool)
	if err != nil {
		return fmt.Errorf("read feed position: %w", err)
	}
	f.mu.Lock()
	f.lastSeq = last
	f.mu.Unlock()
	close(f.ready)
	return nil
}

// listen runs one LISTEN connection until it fails, or polls when the
// feed has no session pool; listened reports whether it got as far as
// listening and catching up.
func (f *Feed) listen(ctx context.Context) (listened bool, err error) {
	if f.session == nil {
		return f.pollJournal(ctx)
	}
	pc, err := f.session.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("acquire listen connection: %w", err)
	}
	// The connection leaves the pool for good: a LISTENing session must not
	// be handed to other users.
	conn := pc.Hijack()
	defer conn.Close(context.WithoutCancel(ctx)) // closing a dead connection may fail; nothing to do then

	if err := queries.FeedListen(ctx, bareStatement{conn}); err != nil {
		return false, fmt.Errorf("listen %s: %w", notifyEventProcessed, err)
	}
	// Read on the pool: the listening session runs LISTEN alone, which is
	// how pg_stat_activity tells it apart.
	if err := f.start(ctx); err != nil {
		return false, err
	}
	// After a reconnect, deliver what was processed while we were away.
	if err := f.catchUp(ctx); err != nil {
		return false, err
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, fmt.Errorf("wait for notification: %w", err)
		}
		seq, err := strconv.ParseInt(n.Payload, 10, 64)
		if err != nil {
			f.logger.WarnContext(ctx, "bad event_processed payload", slog.String("payload", n.Payload))
			continue
		}
		f.mu.Lock()
		seen := seq <= f.lastSeq
		f.mu.Unlock()
		if seen {
			continue
		}
		if err := f.catchUp(ctx); err != nil {
			return true, err
		}
	}
}

// pollJournal reads the journal every f.poll until a read fails: what a
// feed does where LISTEN is not available. Every read is the catch-up a
// notification would have triggered, so the order and the no-loss rule
// are the listening feed's.
func (f *Feed) pollJournal(ctx context.Context) (polled bool, err error) {
	if err := f.start(ctx); err != nil {
		return false, err
	}
	t := time.NewTicker(f.poll)
	defer t.Stop()
	for {
		if err := f.catchUp(ctx); err != nil {
			return polled, err
		}
		polled = true
		select {
		case <-ctx.Done():
			return polled, ctx.Err()
		case <-t.C:
		}
	}
}

// catchUp delivers every processed event past lastSeq, in feed order.
func (f *Feed) catchUp(ctx context.Context) error {
	for {
		f.mu.Lock()
		after := f.lastSeq
		f.mu.Unlock()
		events, err := EventsProcessedAfter(ctx, f.pool, EventFilter{}, after, feedBatch)
		if err != nil {
			return err
		}
		for i := range events {
			f.publish(&events[i])
		}
		if len(events) < feedBatch {
			return nil
		}
	}
}

// publish hands ev to every matching subscriber without ever blocking: a
// subscriber whose buffer is full is dropped (its subscription ended), so
// one slow client never delays the feed or the others.
func (f *Feed) publish(ev *Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ev.FeedSeq != nil && *ev.FeedSeq > f.lastSeq {
		f.lastSeq = *ev.FeedSeq
	}
	for s := range f.subs {
		if !s.filter.Matches(*ev) {
			continue
		}
		if !s.push(ev) {
			s.overflowed = true
			f.removeLocked(s)
			if s.onOverflow != nil {
				s.onOverflow()
			}
		}
	}
}

// bareStatement runs a generated statement without the "-- name: …" line
// sqlc puts before it, so that pg_stat_activity shows the listening
// session's query as LISTEN …, which is how it is told apart.
type bareStatement struct{ conn *pgx.Conn }

func (b bareStatement) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if strings.HasPrefix(sql, "-- name: ") {
		if _, rest, ok := strings.Cut(sql, "\n"); ok {
			sql = rest
		}
	}
	return b.conn.Exec(ctx, sql, args...)
}

func (b bareStatement) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return nil, fmt.Errorf("bare statement: query %q: not supported", sql)
}

func (b bareStatement) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return b.conn.QueryRow(ctx, sql, args...)
}
