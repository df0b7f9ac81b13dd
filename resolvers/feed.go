package resolvers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"unique"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"erp/db"
	"erp/graph/sse"
	"erp/graph/wsgorilla"
)

// CloseSlowConsumer is the websocket close code for a subscriber that fell
// too far behind the live feed: one that fell more than its feed buffer
// (Resolver.FeedBuffer) behind reads on from the journal, and is closed
// once it lags more than Resolver.FeedMaxLag events; the server never
// buffers without bound, and the client resumes with
// eventProcessed(after: <its last cursor>). A client that reads too
// slowly to take one message within the websocket write timeout is
// dropped by the transport instead, and resumes the same way. Not 4429,
// which graphql-transport-ws uses for repeated connection_init and which
// the graphql-ws client treats as fatal; 4503 makes it reconnect. An SSE
// stream is cut instead (sse.End) after an error with the reason,
// extensions.code CodeSlowConsumer.
const CloseSlowConsumer = 4503

// CodeSlowConsumer is the extensions.code of the error that ends an SSE
// stream of eventProcessed that fell too far behind (CloseSlowConsumer).
const CodeSlowConsumer = "SLOW_CONSUMER"

// closeReasonSlowConsumer tells the client what to do (at most 123 bytes).
const closeReasonSlowConsumer = "slow consumer: resume with eventProcessed(after: <last cursor>)"

// feedStream is one eventProcessed subscription: the back-fill from the
// journal, then the live feed, with last the feed sequence of the last
// event handed on, so that the hand-over neither repeats nor skips one.
// A live stream that falls behind its buffer goes back to the journal
// (catching up) and is live again once it has read it through. It runs no
// goroutine of its own: the goroutine that serves the subscription pulls
// it (next).
type feedStream struct {
	r      *Resolver
	filter db.EventFilter
	// ctx is the subscription's: the socket CloseSocket closes.
	ctx context.Context

	// Owned by the goroutine pulling or advancing the stream.
	page        []db.Event // back-filled events not handed on yet
	backfilling bool
	ready       bool // the feed listens (back-fill may start)
	more        bool // the last page was full: read another

	last    atomic.Int64 // feed sequence of the last event handed on
	wasLive atomic.Bool  // live once: a back-fill is a catch-up, bounded
	warned  atomic.Bool  // the slow consumer was logged

	// refused: its user's role may no longer run it (refuse). Guarded
	// by mu, as sub.
	mu              sync.Mutex
	closed, refused bool
	sub             *db.FeedSubscription
}

// liveEvents implements eventProcessed: with after, every processed event
// past that cursor matching f, from the journal, then the live ones, for
// as long as allowed (the subscription's re-authorisation hook) lets its
// user's role run it (Reauthorize). It
// subscribes to the feed before reading the journal, so nothing processed
// in between is lost; what arrives twice is skipped by feed sequence. A
// cursor of an unprocessed event or of another journal is an
// *db.InputError.
//
// Under SharedFeedPayloads (the server's handler) the returned channel
// only carries the event being executed, and the transport's goroutine
// for the subscription pulls the stream one event at a time; without
// SharedFeedPayloads a goroutine pumps the events into the channel.
func (r *Resolver) liveEvents(ctx context.Context, f db.EventFilter, after *string, allowed func(role string) error) (<-chan *db.Event, error) {
	var from *int64
	if after != nil {
		seq, err := r.feedPosition(ctx, *after)
		if err != nil {
			return nil, err
		}
		from = &seq
	}
	s := &feedStream{r: r, filter: f, ctx: ctx, backfilling: from != nil, more: true}
	// Guarded before the role is read: a role change from then on
	// reaches the stream (Reauthorize), an earlier one is in the role.
	guardSubscription(ctx, s, allowed)
	if err := r.authorizeNow(ctx, allowed); err != nil {
		forgetSubscription(ctx, s)
		return nil, err
	}
	if from != nil {
		s.last.Store(*from)
	} else {
		// Live from now: read before subscribing, so that an event
		// published in between is read from the journal should the
		// stream ever catch up, and none it was given is skipped.
		s.last.Store(r.Feed.LastSeq())
		s.wasLive.Store(true)
	}
	s.subscribe()
	// The subscription ends with the operation.
	context.AfterFunc(ctx, s.close)
	if slot := feedSlotOf(ctx); slot != nil {
		ch := make(chan *db.Event, 1)
		slot.stream, slot.ch = s, ch
		return ch, nil
	}
	out := make(chan *db.Event)
	go func() {
		defer close(out)
		for {
			ev, ok := s.next(ctx)
			if !ok {
				return
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// subscribe takes a (new) feed subscription unless the stream was closed.
// Its queue holds FeedBuffer events plus one: the one the resolver's pump
// goroutine used to hold in hand besides the channel of FeedBuffer, so
// that a subscriber is allowed the same lag as before it was removed.
// When the feed drops a live subscription for falling behind, the stream
// catches up from the journal (next).
func (s *feedStream) subscribe() {
	sub := s.r.Feed.Subscribe(s.filter, s.r.feedBuffer()+1)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		sub.Close()
		return
	}
	old := s.sub
	s.sub = sub
	s.mu.Unlock()
	if old != nil {
		old.Close()
	}
}

// tooFarBehind reports a stream more than FeedMaxLag events behind the
// feed.
func (s *feedStream) tooFarBehind() bool {
	return s.r.Feed.LastSeq()-s.last.Load() > s.r.feedMaxLag()
}

// closeSlow closes the socket with CloseSlowConsumer, or cuts the SSE
// stream with CodeSlowConsumer, and logs it once.
func (s *feedStream) closeSlow() {
	if wsgorilla.CloseSocket(s.ctx, CloseSlowConsumer, closeReasonSlowConsumer) ||
		sse.End(s.ctx, CodedError(closeReasonSlowConsumer, CodeSlowConsumer)) {
		s.warnSlow()
	}
}

// subscriptionError ends the operation of ctx with err: a websocket's
// operation gets it as its error message (wsgorilla.AddSubscriptionError,
// the socket stays), an SSE stream is cut after it (sse.End).
func subscriptionError(ctx context.Context, err *gqlerror.Error) {
	if !sse.End(ctx, err) {
		wsgorilla.AddSubscriptionError(ctx, err)
	}
}

func (s *feedStream) current() *db.FeedSubscription {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sub
}

func (s *feedStream) close() {
	s.mu.Lock()
	s.closed = true
	sub := s.sub
	s.mu.Unlock()
	if sub != nil {
		sub.Close()
	}
	forgetSubscription(s.ctx, s)
}

// refuse implements reauthorizable: the operation ends with err as its
// error message (subscriptionError); closing the feed subscription wakes
// the stream, which then ends.
func (s *feedStream) refuse(err *gqlerror.Error) {
	subscriptionError(s.ctx, err)
	s.mu.Lock()
	s.refused = true
	s.mu.Unlock()
	s.close()
}

func (s *feedStream) isRefused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused
}

// FeedStart is the cursor eventProcessed takes to start from the
// journal's first processed event: the whole journal, then live.
const FeedStart = "start"

// feedPosition returns the feed sequence of a cursor taken from the
// journal this server reads (0 for FeedStart): a cursor the server never gave out, of an
// event not processed yet, or from another database is refused rather than
// silently streaming nothing.
func (r *Resolver) feedPosition(ctx context.Context, cursor string) (int64, error) {
	if cursor == FeedStart {
		return 0, nil // feed sequences start at 1
	}
	c, err := db.ParseCursor("after", cursor)
	if err != nil {
		return 0, err
	}
	if c.FeedSeq == nil {
		return 0, &db.InputError{Field: "after", Msg: "the cursor is of an event that was not processed yet; resume from a processed event's cursor"}
	}
	ev, err := db.EventByID(ctx, r.Pool, c.ID)
	if errors.Is(err, db.ErrNotFound) || (err == nil && (ev.FeedSeq == nil || *ev.FeedSeq != *c.FeedSeq)) {
		return 0, &db.InputError{Field: "after", Msg: "the cursor is of no event in this journal"}
	}
	if err != nil {
		return 0, err
	}
	return *c.FeedSeq, nil
}

// next returns the stream's next event, waiting for one: back-filled ones
// first, then live ones. ok is false when the stream ends (ctx ended, a
// back-fill query failed, or the feed dropped the subscription, whose
// socket is then closed with the code that says why).
func (s *feedStream) next(ctx context.Context) (ev *db.Event, ok bool) {
	if s.isRefused() {
		return nil, false
	}
	if s.backfilling {
		if ev, ok, done := s.backfillNext(ctx); !done {
			return ev, ok
		}
	}
	sub := s.current()
	for {
		if ev, ok = sub.Next(ctx); !ok {
			if ctx.Err() != nil || s.isRefused() {
				return nil, false
			}
			if !sub.Overflowed() {
				s.dropped()
				return nil, false
			}
			// Fell behind its buffer: read on from the journal.
			s.backfilling, s.more = true, true
			if ev, ok, done := s.backfillNext(ctx); !done {
				return ev, ok
			}
			sub = s.current()
			continue
		}
		if *ev.FeedSeq <= s.last.Load() {
			continue // back-filled already
		}
		s.last.Store(*ev.FeedSeq)
		return ev, true
	}
}

// backfillNext hands on the journal's processed events past last, page by
// page, until it has caught up with the live subscription (done). Live
// events that arrive meanwhile wait in the subscription; when more than its
// buffer arrive (a long back-fill on a busy system), the feed drops it and
// the back-fill takes a new one and reads on from the journal, so a client
// catching up is not mistaken for a slow one. A stream that was live
// before (it fell behind) is closed with CloseSlowConsumer once it is
// more than FeedMaxLag events behind the feed; a first back-fill from an
// old cursor is not bounded.
func (s *feedStream) backfillNext(ctx context.Context) (ev *db.Event, ok, done bool) {
	if !s.ready {
		// Until the feed listens, the journal may hold events the feed
		// will never publish (it starts from the journal's end): read
		// after that.
		select {
		case <-s.r.Feed.Ready():
			s.ready = true
		case <-ctx.Done():
			return nil, false, false
		}
	}
	for {
		if len(s.page) > 0 {
			ev = &s.page[0]
			s.page = s.page[1:]
			s.last.Store(*ev.FeedSeq)
			return ev, true, false
		}
		if s.wasLive.Load() && s.tooFarBehind() {
			s.closeSlow()
			return nil, false, false
		}
		if !s.more {
			if sub := s.current(); !sub.Overflowed() {
				// What the back-fill read is queued too: free its room.
				sub.DiscardThrough(s.last.Load())
				s.backfilling = false
				s.wasLive.Store(true)
				// Dropped between the check and now: next sees the ended
				// subscription and closes the socket.
				return nil, false, true
			}
			s.subscribe()
		}
		events, err := db.EventsProcessedAfter(ctx, s.r.Pool, s.filter, s.last.Load(), s.r.feedBuffer())
		if err != nil {
			if ctx.Err() == nil {
				s.r.Logger.ErrorContext(ctx, "event feed back-fill", slog.String("error", err.Error()))
				subscriptionError(ctx, CodedError("internal error", CodeInternal))
			}
			return nil, false, false
		}
		s.page, s.more = events, len(events) == s.r.feedBuffer()
	}
}

// dropped ends a subscription the feed ended other than for falling behind:
// the feed itself stopped (the server is going down), so the socket is
// closed with 1001, or the SSE stream cut, and the client reconnects and
// resumes instead of taking the end of the stream for a normal
// completion. A socket that is closing already keeps its first close code.
func (s *feedStream) dropped() {
	const reason = "server shutting down"
	if !wsgorilla.CloseSocket(s.ctx, wsgorilla.CloseGoingAway, reason) {
		subscriptionError(s.ctx, CodedError(reason, CodeInternal))
	}
}

// warnSlow logs, once, that the subscriber is closed as a slow consumer:
// with the socket's request id and user, so that the line meets the
// socket's own, and the feed sequence of the last event handed to the
// socket (the client may not have read that far).
func (s *feedStream) warnSlow() {
	if s.warned.CompareAndSwap(false, true) {
		login := ""
		if u, ok := UserFrom(s.ctx); ok {
			login = u.Login
		}
		s.r.Logger.WarnContext(s.ctx, "live subscriber fell too far behind, closing its socket",
			slog.String("request_id", RequestID(s.ctx)), slog.String("user", login),
			slog.Int64("max_lag", s.r.feedMaxLag()),
			slog.Int64("last_feed_seq_sent", s.last.Load()))
	}
}

// SharedFeedPayloads is a gqlgen extension that executes and serialises
// each live event once per distinct eventProcessed operation (query,
// operation name, variables and the viewer's role) instead of once per
// subscriber: the first subscriber to take an event executes it as usual,
// the others with the same operation get its data bytes. With a thousand
// sockets subscribed by the events page, an event costs one execution and
// a thousand writes. Responses with errors are never shared; extensions
// (the request id) stay per subscriber.
//
// It also lets the eventProcessed resolver run without a goroutine of its
// own: gqlgen's subscription goroutine pulls the events here. Use one
// value per handler (gql.Use(resolvers.NewSharedFeedPayloads())), after
// Observer.
type SharedFeedPayloads struct {
	executed, shared atomic.Int64 // events executed, and answered from the cache

	mu    sync.RWMutex
	bySeq map[int64]map[unique.Handle[string]]*sharedPayload // feed sequence → operation key → data
	seqs  []int64                                            // cached sequences, oldest first
}

// sharedPayloadEvents is how many recent events keep their payloads: a
// subscriber further behind executes its events itself.
const sharedPayloadEvents = 256

// NewSharedFeedPayloads returns the extension with an empty cache.
func NewSharedFeedPayloads() *SharedFeedPayloads {
	return &SharedFeedPayloads{bySeq: make(map[int64]map[unique.Handle[string]]*sharedPayload)}
}

var _ interface {
	graphql.HandlerExtension
	graphql.OperationInterceptor
	graphql.ResponseInterceptor
} = (*SharedFeedPayloads)(nil)

const sharedFeedPayloadsName = "SharedFeedPayloads"

// feedSlot is where a subscription operation's eventProcessed resolver
// leaves its stream for InterceptResponse.
type feedSlot struct {
	key    unique.Handle[string] // the operation's cache key, one copy for all sockets that share it
	stream *feedStream
	ch     chan *db.Event // what gqlgen's field executor reads (capacity 1)
}

// feedSlotKey is the context key of an operation's *feedSlot: a context
// value rather than an extension in the operation's Stats, whose map
// would cost every open subscription 300 bytes.
type feedSlotKey struct{}

func feedSlotOf(ctx context.Context) *feedSlot {
	slot, _ := ctx.Value(feedSlotKey{}).(*feedSlot)
	return slot
}

// ExtensionName implements graphql.HandlerExtension.
func (*SharedFeedPayloads) ExtensionName() string { return sharedFeedPayloadsName }

// Validate implements graphql.HandlerExtension.
func (*SharedFeedPayloads) Validate(graphql.ExecutableSchema) error { return nil }

// InterceptOperation implements graphql.OperationInterceptor: it gives
// every subscription operation a slot for its stream.
func (*SharedFeedPayloads) InterceptOperation(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	oc := graphql.GetOperationContext(ctx)
	if oc.Operation == nil || oc.Operation.Operation != ast.Subscription {
		return next(ctx)
	}
	// Only the variables the event's selection uses change how an event
	// looks; the root field's arguments (filter, after: the cursor every
	// reconnecting client sends) choose which events, not their frames.
	used := map[string]any{}
	for _, sel := range oc.Operation.SelectionSet {
		f, ok := sel.(*ast.Field)
		if !ok {
			used = oc.Variables // a root fragment: keyed on them all
			break
		}
		selectionVariables(f.SelectionSet, oc.Variables, used)
		directiveVariables(f.Directives, oc.Variables, used)
	}
	vars, err := json.Marshal(used)
	if err != nil {
		return next(ctx) // not shareable; executes as usual
	}
	role := ""
	if u, ok := UserFrom(ctx); ok {
		role = u.Role
	}
	return next(context.WithValue(ctx, feedSlotKey{}, &feedSlot{
		key: unique.Make(strings.Join([]string{role, oc.OperationName, oc.RawQuery, string(vars)}, "\x00")),
	}))
}

// InterceptResponse implements graphql.ResponseInterceptor: for an
// eventProcessed subscription it takes the next event and answers with the
// shared data, or executes the event (next) and shares the result.
//
// It is the frame an idle subscription's goroutine waits under (in next),
// so the work after the wait lives in respond: a few hundred bytes more of
// idle stack double the goroutine's stack (4 to 8 KiB), as the runtime
// only shrinks a stack that is less than a quarter used.
func (p *SharedFeedPayloads) InterceptResponse(ctx context.Context, next graphql.ResponseHandler) *graphql.Response {
	slot := feedSlotOf(ctx)
	if slot == nil || slot.stream == nil {
		return next(ctx)
	}
	ev, ok := slot.stream.next(ctx)
	if !ok {
		return nil
	}
	return p.respond(ctx, slot, ev, next)
}

// respond answers with the shared data of ev, or executes it (next) and
// shares the result. Subscribers that take an event while another
// executes it for the same operation wait for that execution rather than
// run their own, so that an event is executed once per operation however
// many sockets write it at the same time.
//
//go:noinline
func (p *SharedFeedPayloads) respond(ctx context.Context, slot *feedSlot, ev *db.Event, next graphql.ResponseHandler) *graphql.Response {
	e, first := p.claim(*ev.FeedSeq, slot.key)
	if !first {
		// Most subscribers come once the data is there: a receive that
		// may not wait reads a closed channel without its lock, where
		// the select below locks it, and the thousands of sockets of one
		// event queue on that lock.
		select {
		case <-e.done:
		default:
			select {
			case <-e.done:
			case <-ctx.Done():
				return nil
			}
		}
		if e.data != nil {
			p.shared.Add(1)
			return &graphql.Response{Data: e.data}
		}
		// The execution failed or had errors: those are never shared.
		return p.execute(ctx, slot, ev, next)
	}
	defer close(e.done)
	resp := p.execute(ctx, slot, ev, next)
	if resp != nil && len(resp.Errors) == 0 && resp.Data != nil {
		// Data is the executor's buffer, reused for the next event.
		e.data = bytes.Clone(resp.Data)
	}
	return resp
}

// execute runs the operation for ev.
func (p *SharedFeedPayloads) execute(ctx context.Context, slot *feedSlot, ev *db.Event, next graphql.ResponseHandler) *graphql.Response {
	p.executed.Add(1)
	select {
	case <-slot.ch: // left by an execution cut short
	default:
	}
	slot.ch <- ev
	return next(ctx)
}

// Stats returns how many live events were executed for a subscriber
// (executed) and how many were answered with the data of another's
// execution (shared), since the extension was made.
func (p *SharedFeedPayloads) Stats() (executed, shared int64) {
	return p.executed.Load(), p.shared.Load()
}

// sharedPayload is the data of one event for one operation: data is set
// before done is closed, and nil then when it is not to be shared.
type sharedPayload struct {
	done chan struct{}
	data []byte
}

// claim returns the entry of (seq, key), making it when there is none:
// first then reports that the caller executes the event and closes done.
func (p *SharedFeedPayloads) claim(seq int64, key unique.Handle[string]) (e *sharedPayload, first bool) {
	p.mu.RLock()
	e = p.bySeq[seq][key]
	p.mu.RUnlock()
	if e != nil {
		return e, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	byKey, ok := p.bySeq[seq]
	if !ok {
		if len(p.seqs) == sharedPayloadEvents {
			delete(p.bySeq, p.seqs[0])
			p.seqs = append(p.seqs[:0], p.seqs[1:]...)
		}
		byKey = make(map[unique.Handle[string]]*sharedPayload)
		p.bySeq[seq] = byKey
		p.seqs = append(p.seqs, seq)
	}
	if e = byKey[key]; e != nil {
		return e, false
	}
	e = &sharedPayload{done: make(chan struct{})}
	byKey[key] = e
	return e, true
}

// selectionVariables adds to used the variables of vars that set's fields,
// fragments and directives refer to.
func selectionVariables(set ast.SelectionSet, vars map[string]any, used map[string]any) {
	for _, sel := range set {
		switch sel := sel.(type) {
		case *ast.Field:
			for _, a := range sel.Arguments {
				valueVariables(a.Value, vars, used)
			}
			directiveVariables(sel.Directives, vars, used)
			selectionVariables(sel.SelectionSet, vars, used)
		case *ast.InlineFragment:
			directiveVariables(sel.Directives, vars, used)
			selectionVariables(sel.SelectionSet, vars, used)
		case *ast.FragmentSpread:
			directiveVariables(sel.Directives, vars, used)
			if sel.Definition != nil {
				selectionVariables(sel.Definition.SelectionSet, vars, used)
			}
		}
	}
}

func directiveVariables(ds ast.DirectiveList, vars map[string]any, used map[string]any) {
	for _, d := range ds {
		for _, a := range d.Arguments {
			valueVariables(a.Value, vars, used)
		}
	}
}

func valueVariables(v *ast.Value, vars map[string]any, used map[string]any) {
	if v == nil {
		return
	}
	if v.Kind == ast.Variable {
		used[v.Raw] = vars[v.Raw]
	}
	for _, c := range v.Children {
		valueVariables(c.Value, vars, used)
	}
}
