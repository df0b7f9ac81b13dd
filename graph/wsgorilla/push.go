package wsgorilla

import (
	"context"
	"slices"
	"sync"
)

// Stream is a subscription whose events are pushed to the socket rather
// than waited for by a goroutine of its own: its resolver registers it with
// Push and calls the wake function Push returns whenever an event may be
// ready (from any goroutine; wake never blocks). The socket's writer then
// calls Advance and, while it reports true, the operation's response
// handler, and writes what it returns (after the next Advance, which tells
// it whether that response can wait for the next one to share a write).
// A Stream that also has a Close
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
// goroutine only while some operation is ready: an idle socket has none.
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
		go p.write()
	}
}

// write is the writer goroutine: it drains the ready operations and ends
// when none is left or the socket closed.
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
// queues op again behind the others. A response is held (Conn.writeText)
// when Advance reports the next one ready, so that the responses ready
// together go out in one write; the last goes out at once. The next
// response is not read before the last is written: its execution may
// reuse the last one's buffer.
func (p *pusher) drain(op *operation) {
	// Last: after a panic's error message, which takes out what is held.
	defer op.s.conn.endTurn()
	defer func() {
		if r := recover(); r != nil {
			if p.markFinished(op) {
				op.fail(op.ctx, r)
			}
		}
	}()
	if !p.advance(op) {
		return
	}
	for n := 1; ; n++ {
		resp := op.responses(op.ctx)
		if resp == nil {
			if p.markFinished(op) {
				op.finish()
			}
			return
		}
		if n == pushTurn {
			op.deliver(resp, false)
			p.wake(op)
			return
		}
		more := p.advance(op)
		op.deliver(resp, more)
		if !more {
			return
		}
	}
}

// advance reports whether op's stream has its next response ready, false
// once the socket is closing: nothing goes out any more (a close frame went
// out, or a write failed and dropped the connection), and the socket's
// goroutine ends the operation once it closed.
func (p *pusher) advance(op *operation) bool {
	conn := op.s.conn
	if conn.closing.Load() || conn.netClosed.Load() {
		return false
	}
	return op.stream.Advance(op.ctx)
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
