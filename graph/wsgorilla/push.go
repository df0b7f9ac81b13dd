package wsgorilla

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Stream is a subscription whose events are pushed to the socket rather
// than waited for by a goroutine of its own: its resolver registers it with
// Push and calls the wake function Push returns whenever an event may be
// ready (from any goroutine; wake never blocks). The socket's writer then
// calls Advance and, while it reports true, the operation's response
// handler, and writes what it returns. A Stream that also has a Close
// method has it called once its operation ended (it was stopped, it
// finished, or its socket closed), so that it needs no watch on the
// operation's context of its own.
type Stream interface {
	// Advance readies the operation's next response without waiting for
	// an event: true when the response handler, called next, returns at
	// once (a response, or nil at the end of the stream: ctx ended or
	// the stream failed), false when nothing is ready yet. It may block
	// on I/O (a read of a journal), never on the arrival of an event.
	// One goroutine at a time calls it.
	Advance(ctx context.Context) bool
}

// pushTurn is how many responses of one operation the writer writes
// before it turns to the socket's other ready operations.
const pushTurn = 64

// Push makes stream the source of the subscription that ctx (its
// resolver's) belongs to, and returns the function that tells the socket
// the stream may have a response ready. ok is false when ctx is not a
// subscription of Transport or has a stream already: the resolver then
// serves its subscription through the channel it returns, as usual.
func Push(ctx context.Context, stream Stream) (wake func(), ok bool) {
	op, ok := ctx.Value(operationKey{}).(*operation)
	if !ok || !op.subscription || op.stream != nil {
		return nil, false
	}
	op.stream = stream
	return func() { op.s.push.wake(op) }, true
}

// pusher writes the responses of a socket's pushed operations. It has a
// writer goroutine only while some operation is ready: an idle socket has
// none.
type pusher struct {
	mu      sync.Mutex
	cond    *sync.Cond // signalled when writing ends
	ready   []*operation
	ops     []*operation // started and not finished (a slice: most sockets have one)
	writing bool         // the writer goroutine runs
	closed  bool         // the socket closed: no new writer
}

// start makes op, whose DispatchOperation returned ctx, ready for its
// first Advance: a stream that resumes from a cursor has responses before
// any wake.
func (p *pusher) start(op *operation, ctx context.Context) {
	p.mu.Lock()
	op.ctx = ctx
	op.started = true
	if p.closed {
		p.mu.Unlock()
		op.finish()
		return
	}
	p.ops = append(p.ops, op)
	p.enqueueLocked(op)
	p.mu.Unlock()
}

// wake queues op for the writer, starting the writer if none runs. A wake
// before start is dropped: start queues every operation.
func (p *pusher) wake(op *operation) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !op.started || op.finished {
		return
	}
	p.enqueueLocked(op)
}

func (p *pusher) enqueueLocked(op *operation) {
	if op.queued {
		return
	}
	op.queued = true
	p.ready = append(p.ready, op)
	if !p.writing && !p.closed {
		p.writing = true
		op.s.conn.impl.writers.start(p)
	}
}

// writerPool keeps the writer goroutines that have written a socket's
// frames, to write the next socket's. A goroutine starts on the smallest
// stack, and writing a response takes several times that: a goroutine per
// burst copies its stack as it grows, at every burst of every socket,
// which at thousands of sockets was a tenth of the server's CPU. A reused
// writer starts from the stack it has (the GC halves a parked writer's
// stack at each cycle, so a writer reused within a cycle or two keeps most
// of it). The most recently parked writer is reused first, so the writers
// beyond what the load keeps busy go unused and end after idleTimeout: the
// pool follows the load down, and an idle server keeps none. Its zero
// value is ready; close ends the parked writers and parks no more.
type writerPool struct {
	mu          sync.Mutex
	idle        []*writer // parked, the most recently parked last
	alive       int       // writer goroutines, parked or writing
	closed      bool
	idleTimeout time.Duration // 0: writerIdle
}

// writerIdle is how long a writer stays parked without work before it
// ends.
const writerIdle = time.Second

// writer is a parked writer goroutine's inbox: the pusher it is handed
// next, or nil when the pool closed. Buffered, so that a hand-off never
// waits.
type writer struct{ work chan *pusher }

// start runs p.write on the most recently parked writer, or on a new one
// when none is parked.
func (wp *writerPool) start(p *pusher) {
	wp.mu.Lock()
	if n := len(wp.idle); n > 0 {
		w := wp.idle[n-1]
		wp.idle[n-1] = nil
		wp.idle = wp.idle[:n-1]
		wp.mu.Unlock()
		w.work <- p
		return
	}
	wp.alive++
	wp.mu.Unlock()
	go wp.run(p)
}

// run is a writer goroutine: it writes p's ready responses, then parks
// for the next socket's until idleTimeout passes without one.
func (wp *writerPool) run(p *pusher) {
	defer func() {
		wp.mu.Lock()
		wp.alive--
		wp.mu.Unlock()
	}()
	w := &writer{work: make(chan *pusher, 1)}
	timeout := wp.idleTimeout
	if timeout == 0 {
		timeout = writerIdle
	}
	var idle *time.Timer
	for p != nil {
		p.write()
		if !wp.park(w) {
			return
		}
		if idle == nil {
			idle = time.NewTimer(timeout)
			defer idle.Stop()
		} else {
			idle.Reset(timeout)
		}
		select {
		case p = <-w.work:
		case <-idle.C:
			if wp.unpark(w) {
				return
			}
			// A start took w off the stack as the timer fired: its
			// pusher is on the way.
			p = <-w.work
		}
	}
}

// park puts w on the stack of idle writers, unless the pool closed.
func (wp *writerPool) park(w *writer) bool {
	wp.mu.Lock()
	defer wp.mu.Unlock()
	if wp.closed {
		return false
	}
	wp.idle = append(wp.idle, w)
	return true
}

// unpark takes w off the stack, reporting whether it was there. The
// writers that time out are the least recently parked: near the bottom.
func (wp *writerPool) unpark(w *writer) bool {
	wp.mu.Lock()
	defer wp.mu.Unlock()
	i := slices.Index(wp.idle, w)
	if i < 0 {
		return false
	}
	wp.idle = slices.Delete(wp.idle, i, i+1)
	return true
}

// close ends the parked writers; a writer that is writing ends when it
// is done. Writers started afterwards end once they wrote.
func (wp *writerPool) close() {
	wp.mu.Lock()
	wp.closed = true
	idle := wp.idle
	wp.idle = nil
	wp.mu.Unlock()
	for _, w := range idle {
		w.work <- nil
	}
}

// counts returns how many writer goroutines there are, and how many of
// them are parked.
func (wp *writerPool) counts() (alive, parked int) {
	wp.mu.Lock()
	defer wp.mu.Unlock()
	return wp.alive, len(wp.idle)
}

// write drains the ready operations, and returns when none is left or
// the socket closed.
func (p *pusher) write() {
	for {
		p.mu.Lock()
		if len(p.ready) == 0 || p.closed {
			p.writing = false
			if p.cond != nil {
				p.cond.Broadcast()
			}
			p.mu.Unlock()
			return
		}
		op := p.ready[0]
		p.ready[0] = nil
		p.ready = p.ready[1:]
		if len(p.ready) == 0 {
			p.ready = nil // let a burst's array go
		}
		op.queued = false
		p.mu.Unlock()
		p.drain(op)
	}
}

// drain writes op's ready responses, at most pushTurn of them before it
// queues op again behind the others.
func (p *pusher) drain(op *operation) {
	defer func() {
		if r := recover(); r != nil {
			if p.markFinished(op) {
				op.fail(op.ctx, r)
			}
		}
	}()
	for range pushTurn {
		if op.s.conn.closing.Load() || op.s.conn.netClosed.Load() {
			// Nothing goes out any more (a close frame went out, or a
			// write failed and dropped the connection); the socket's
			// goroutine ends the operation once it closed.
			return
		}
		if !op.stream.Advance(op.ctx) {
			return
		}
		resp := op.responses(op.ctx)
		if resp == nil {
			if p.markFinished(op) {
				op.finish()
			}
			return
		}
		op.deliver(resp)
	}
	p.wake(op)
}

// markFinished reports whether op was still running, and ends it for the
// pusher.
func (p *pusher) markFinished(op *operation) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if op.finished {
		return false
	}
	op.finished = true
	if i := slices.Index(p.ops, op); i >= 0 {
		p.ops = slices.Delete(p.ops, i, i+1)
	}
	return true
}

// stop is called once the socket closed and its operations were
// cancelled: it waits for the writer to end, then ends the operations it
// did not finish (their messages are not sent any more: the socket is
// closing).
func (p *pusher) stop() {
	p.mu.Lock()
	p.closed = true
	if p.cond == nil {
		p.cond = sync.NewCond(&p.mu)
	}
	for p.writing {
		p.cond.Wait()
	}
	left := p.ops
	for _, op := range left {
		op.finished = true
	}
	p.ops, p.ready = nil, nil
	p.mu.Unlock()
	for _, op := range left {
		op.finish()
	}
}
