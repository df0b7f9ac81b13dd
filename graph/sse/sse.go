// Package sse keeps the GraphQL over Server-Sent Events streams of a
// server (graphql-sse's distinct connections mode: one POST with Accept:
// text/event-stream per operation, answered by gqlgen's transport.SSE).
// transport.SSE writes the events; Streams adds what a stream that lives
// for hours needs around it: a deadline on every write, a way to cut a
// stream with an error (End: a revoked token, a changed role, a slow
// consumer), Shutdown, and the complete event's empty data field.
package sse

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// Supports reports whether r asks for an SSE stream, as gqlgen's
// transport.SSE decides it: POST, Content-Type application/json and
// Accept naming text/event-stream.
func Supports(r *http.Request) bool { return transport.SSE{}.Supports(r) }

// Streams are the open SSE streams of a server. Handler opens one for
// every request Supports, End cuts one, Shutdown cuts them all.
type Streams struct {
	// WriteTimeout bounds every write of a stream (an event, a keepalive
	// comment): a client that does not take it in time is cut, and
	// resumes by cursor. 0: no bound.
	WriteTimeout time.Duration
	// SendBuffer caps the kernel's send buffer of a stream's connection
	// (SO_SNDBUF, bytes), as a websocket's: what a client that stops
	// reading pins in the kernel before WriteTimeout cuts it. It needs
	// the server's ConnContext to be ConnContext. 0: the kernel's own.
	SendBuffer int
	// Logger, when set, says why a stream was cut by a failed write.
	Logger *slog.Logger

	mu      sync.Mutex
	open    map[*stream]struct{}
	closing bool
}

// ErrShuttingDown answers a stream asked for after Shutdown began (HTTP
// 503).
var ErrShuttingDown = errors.New("server shutting down: connect again and resume")

// errCut is what a write to a cut or finished stream returns.
var errCut = errors.New("sse stream cut")

type connKey struct{}

// ConnContext is an http.Server's ConnContext that lets Handler reach
// each request's connection (for Streams.SendBuffer).
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// Handler serves next with each SSE request's stream as its
// ResponseWriter and in its context (End finds it there); other requests
// pass through. After Shutdown began, an SSE request gets 503.
func (s *Streams) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !Supports(r) {
			next.ServeHTTP(w, r)
			return
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		st := &stream{ResponseWriter: w, rc: http.NewResponseController(w), timeout: s.WriteTimeout, cancel: cancel,
			logger: s.Logger, remote: r.RemoteAddr}
		if !s.add(st) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			b, _ := json.Marshal(graphql.Response{Errors: gqlerror.List{{Message: ErrShuttingDown.Error(),
				Extensions: map[string]any{"code": "UNAVAILABLE"}}}})
			_, _ = w.Write(b)
			return
		}
		if tc, ok := r.Context().Value(connKey{}).(*net.TCPConn); ok && s.SendBuffer > 0 {
			_ = tc.SetWriteBuffer(s.SendBuffer)
		}
		defer s.remove(st)
		defer st.finish()
		next.ServeHTTP(st, r.WithContext(context.WithValue(ctx, streamKey{}, st)))
	})
}

// Open is the number of SSE streams open now.
func (s *Streams) Open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open)
}

// Shutdown cuts every open stream with err (End) and refuses new ones; it
// returns how many it cut, within one WriteTimeout (the streams are cut
// at once, a client that does not read delays only its own). The
// handlers return as their operations end, for http.Server.Shutdown to
// see their connections idle.
func (s *Streams) Shutdown(err *gqlerror.Error) int {
	s.mu.Lock()
	s.closing = true
	open := make([]*stream, 0, len(s.open))
	for st := range s.open {
		open = append(open, st)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, st := range open {
		wg.Go(func() { st.end(err) })
	}
	wg.Wait()
	return len(open)
}

func (s *Streams) add(st *stream) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	if s.open == nil {
		s.open = map[*stream]struct{}{}
	}
	s.open[st] = struct{}{}
	return true
}

func (s *Streams) remove(st *stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.open, st)
}

type streamKey struct{}

// In reports whether ctx is an SSE stream's (Handler's).
func In(ctx context.Context) bool {
	_, ok := ctx.Value(streamKey{}).(*stream)
	return ok
}

// End cuts the SSE stream of ctx: it sends err as a last next event
// ({"data":null,"errors":[err]}), ends the stream's context, so that its
// operation ends, and drops whatever the operation still writes, the
// complete event included. A stream that ends without complete was cut,
// not finished: graphql-sse's client takes it for a network error and
// may connect again. It returns false when ctx is no stream's (a
// websocket's), and does nothing to a stream already cut.
func End(ctx context.Context, err *gqlerror.Error) bool {
	st, ok := ctx.Value(streamKey{}).(*stream)
	if ok {
		st.end(err)
	}
	return ok
}

// stream is one SSE response. transport.SSE writes each event (and each
// keepalive comment) with one Write, from the operation's goroutine and a
// keepalive goroutine; mu keeps End's event whole among them and nothing
// written once the stream is cut or its handler returned.
type stream struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	cancel  context.CancelFunc
	logger  *slog.Logger
	remote  string

	mu  sync.Mutex
	cut bool
}

// complete is the event transport.SSE ends a finished operation with;
// completeWithData is sent for it: graphql-sse's PROTOCOL.md gives the
// complete event an empty data field, without which a spec-following SSE
// parser (a browser's EventSource) drops the event and never sees the end.
var (
	complete         = []byte("event: complete\n\n")
	completeWithData = []byte("event: complete\ndata:\n\n")
)

// Write implements http.ResponseWriter; a failed write (the deadline
// passed, the peer went) cuts the stream.
func (st *stream) Write(p []byte) (int, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.cut {
		return 0, errCut
	}
	if bytes.Equal(p, complete) {
		if _, err := st.write(completeWithData); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return st.write(p)
}

// Flush implements http.Flusher, which transport.SSE requires.
func (st *stream) Flush() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.cut {
		st.flush()
	}
}

func (st *stream) write(p []byte) (int, error) {
	st.deadline()
	n, err := st.ResponseWriter.Write(p)
	if err != nil {
		st.dropped(err)
	}
	return n, err
}

func (st *stream) flush() {
	st.deadline()
	if err := st.rc.Flush(); err != nil {
		st.dropped(err)
	}
}

// dropped cuts the stream after a write failed: the deadline passed (a
// client that stopped reading; logged, as a websocket dropped for it is)
// or the peer went.
func (st *stream) dropped(err error) {
	if st.logger != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		st.logger.Info("sse stream dropped", slog.String("reason", "a write did not complete within FEED_WRITE_TIMEOUT"),
			slog.String("remote", st.remote))
	}
	st.cutLocked()
}

func (st *stream) deadline() {
	if st.timeout > 0 {
		_ = st.rc.SetWriteDeadline(time.Now().Add(st.timeout))
	}
}

func (st *stream) cutLocked() {
	st.cut = true
	st.cancel()
}

func (st *stream) end(err *gqlerror.Error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.cut {
		return
	}
	b, jerr := json.Marshal(graphql.Response{Errors: gqlerror.List{err}})
	if jerr == nil {
		if _, werr := st.write(fmt.Appendf(nil, "event: next\ndata: %s\n\n", b)); werr == nil {
			st.flush()
		}
	}
	st.cutLocked()
}

// finish stops every write once the handler returns (transport.SSE's
// keepalive goroutine may still tick) and lifts the write deadline from
// the connection, which may serve another request.
func (st *stream) finish() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.cut {
		st.flush()
	}
	st.cutLocked()
	if st.timeout > 0 {
		_ = st.rc.SetWriteDeadline(time.Time{})
	}
}
