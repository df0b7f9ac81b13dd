package wsgorilla

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// A result written around shared data is byte for byte the message
// encoding/json would make of the response, on both subprotocols.
func TestSharedFrameMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	data := json.RawMessage(`{"eventProcessed":{"id":"7","payload":{"no":"ЗК-2026-000401"}}}`)
	tests := []struct {
		id   string
		resp *graphql.Response
	}{
		{"1", &graphql.Response{Data: data}},
		{"1", &graphql.Response{Data: data, Extensions: map[string]any{"requestId": "r-1"}}},
		{`a"b<c>`, &graphql.Response{Data: data, Extensions: map[string]any{"requestId": "r\n", "b": "é&"}}},
		{"2", &graphql.Response{Data: data, Extensions: map[string]any{"requestId": "r", "n": 3}}},
	}
	for _, legacy := range []bool{false, true} {
		s := &socket{legacy: legacy}
		for _, tt := range tests {
			parts, ok := s.sharedFrame(tt.id, tt.resp)
			if !ok {
				t.Fatalf("sharedFrame(%q, %+v): not shareable", tt.id, tt.resp)
			}
			payload, err := json.Marshal(tt.resp)
			if err != nil {
				t.Fatal(err)
			}
			want, err := json.Marshal(struct {
				Payload json.RawMessage `json:"payload"`
				ID      string          `json:"id"`
				Type    string          `json:"type"`
			}{payload, tt.id, s.dataType()})
			if err != nil {
				t.Fatal(err)
			}
			if got := bytes.Join(parts, nil); !bytes.Equal(got, want) {
				t.Errorf("sharedFrame(%q, %+v)\ngot  %s\nwant %s", tt.id, tt.resp, got, want)
			}
		}
	}
	withErrors := &graphql.Response{Data: data, Errors: gqlerror.List{{Message: "boom"}}}
	if _, ok := (&socket{}).sharedFrame("1", withErrors); ok {
		t.Error("a response with errors is written as encoding/json makes it, not around its data")
	}
}

// transportSchema is what the Transport tests serve: pulled is an
// ordinary subscription, a channel that gqlgen's executor waits on; pushed
// registers a Stream (Push), as the live feed does; burst is a pushed
// stream with burstLength responses ready at once.
const transportSchema = `
type Query { ok: Boolean! }
type Subscription { pulled: String! pushed: String! burst: String! }
`

// burstLength is how many responses a burst subscription has ready.
const burstLength = 2*pushTurn + 3

// markKey is the key of the value the operation interceptor adds to an
// operation's context.
type markKey struct{}

// socketKey is the key under which InitFunc puts the socket's number.
type socketKey struct{}

// seenResponse is what the response interceptor saw of one response.
type seenResponse struct {
	rc   *graphql.OperationContext // nil when ctx had none
	mark any                       // the operation interceptor's value
}

// testBundle is a Transport behind a gqlgen server with the schema above,
// and what its hooks and resolvers saw.
type testBundle struct {
	impl *Implementation
	url  string
	// panicReads makes the next read of a server-side connection panic
	// (after it read), on the socket's own goroutine.
	panicReads atomic.Bool
	// writes counts the server's writes to its network connections.
	writes atomic.Int64
	// plainTCP serves on the listener's own *net.TCPConn, as a server
	// does, rather than through the wrapper that counts writes and
	// panics reads.
	plainTCP bool
	// burstPanicsAt makes a burst's Advance panic once it handed out
	// that many responses; burstEnds makes a burst end (its handler
	// returns nil) after its last response.
	burstPanicsAt int
	burstEnds     bool
	// initDeadline is a deadline InitFunc puts on the socket's context.
	initDeadline time.Duration
	// initPanics makes InitFunc panic; onClosePanics makes the first
	// OnClose panic.
	initPanics, onClosePanics bool

	pulled  chan context.Context // each pulled subscription's resolver context
	events  chan string          // the pulled subscriptions' events
	pushed  chan struct{}        // a pushed subscription registered its stream
	streams chan struct{}        // a pushed subscription's stream was closed
	seen    chan seenResponse    // what the response interceptor saw (nil: not kept)

	mu      sync.Mutex
	sockets int          // sockets InitFunc accepted
	watched map[int]bool // the accepted sockets OnClose did not let go
	closes  int          // OnClose calls
	log     bytes.Buffer // the server's ErrorLog and its recovered panics
}

// setupTransport serves a Transport over HTTP, behind Handler when
// behindHandler is set, else as gqlgen's handler alone.
func setupTransport(t *testing.T, behindHandler bool, configure ...func(*testBundle)) *testBundle {
	t.Helper()
	b := &testBundle{
		impl:    &Implementation{},
		pulled:  make(chan context.Context, 4),
		events:  make(chan string),
		pushed:  make(chan struct{}, 4),
		streams: make(chan struct{}, 4),
		seen:    make(chan seenResponse, 4),
		watched: map[int]bool{},
	}
	for _, c := range configure {
		c(b)
	}
	schema := gqlparser.MustLoadSchema(&ast.Source{Input: transportSchema})
	gql := handler.New(&graphql.ExecutableSchemaMock{
		SchemaFunc: func() *ast.Schema { return schema },
		ExecFunc:   b.exec,
	})
	gql.AddTransport(Transport{
		Implementation: b.impl,
		InitFunc:       b.init,
		OnClose:        b.onClose,
	})
	gql.AroundOperations(func(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
		return next(context.WithValue(ctx, markKey{}, "operation interceptor"))
	})
	gql.AroundResponses(func(ctx context.Context, next graphql.ResponseHandler) *graphql.Response {
		var rc *graphql.OperationContext
		if graphql.HasOperationContext(ctx) {
			rc = graphql.GetOperationContext(ctx)
		}
		if b.seen != nil {
			b.seen <- seenResponse{rc: rc, mark: ctx.Value(markKey{})}
		}
		return next(ctx)
	})
	gql.SetRecoverFunc(func(_ context.Context, p any) error {
		b.logf("recovered: %v", p)
		return errors.New("internal system error")
	})
	var h http.Handler = gql
	if behindHandler {
		h = b.impl.Handler(gql)
	}
	srv := httptest.NewUnstartedServer(h)
	if !b.plainTCP {
		srv.Listener = panicListener{Listener: srv.Listener, armed: &b.panicReads, writes: &b.writes}
	}
	srv.Config.ErrorLog = log.New(logWriter{b}, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	b.url = "ws" + strings.TrimPrefix(srv.URL, "http")
	return b
}

// exec runs an operation as generated code would: a pulled subscription
// returns its channel's values until the context of the call ends.
func (b *testBundle) exec(ctx context.Context) graphql.ResponseHandler {
	rc := graphql.GetOperationContext(ctx)
	if rc.Operation.Operation != ast.Subscription {
		return graphql.OneShot(&graphql.Response{Data: json.RawMessage(`{"ok":true}`)})
	}
	switch rc.Operation.SelectionSet[0].(*ast.Field).Name {
	case "burst":
		stream := &burstStream{left: burstLength, big: b.plainTCP, panicAt: b.burstPanicsAt, ends: b.burstEnds}
		if _, ok := Push(ctx, stream); !ok {
			return graphql.OneShot(graphql.ErrorResponse(ctx, "not a subscription of Transport"))
		}
		return stream.next
	case "pushed":
		if _, ok := Push(ctx, closeStream{b.streams}); !ok {
			return graphql.OneShot(graphql.ErrorResponse(ctx, "not a subscription of Transport"))
		}
		b.pushed <- struct{}{}
		return func(context.Context) *graphql.Response { return nil }
	}
	b.pulled <- ctx
	return func(ctx context.Context) *graphql.Response {
		select {
		case e := <-b.events:
			return &graphql.Response{Data: json.RawMessage(`{"pulled":` + strconv.Quote(e) + `}`)}
		case <-ctx.Done():
			return nil
		}
	}
}

// init registers the socket, as Auth registers a socket with its token.
func (b *testBundle) init(ctx context.Context, _ transport.InitPayload) (context.Context, *transport.InitPayload, error) {
	if b.initPanics {
		panic("InitFunc panicked")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sockets++
	b.watched[b.sockets] = true
	ctx = context.WithValue(ctx, socketKey{}, b.sockets)
	if b.initDeadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.initDeadline)
		context.AfterFunc(ctx, cancel)
	}
	return ctx, nil, nil
}

// onClose lets go of what init registered for the socket of ctx.
func (b *testBundle) onClose(ctx context.Context) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closes++
	if b.onClosePanics && b.closes == 1 {
		panic("OnClose panicked")
	}
	delete(b.watched, ctx.Value(socketKey{}).(int))
}

// registrations returns how many times OnClose ran and how many accepted
// sockets are still registered.
func (b *testBundle) registrations() (closes, watched int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closes, len(b.watched)
}

func (b *testBundle) logf(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fmt.Fprintf(&b.log, format+"\n", args...)
}

func (b *testBundle) logged() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.log.String()
}

// logWriter is the server's ErrorLog, into the bundle's log.
type logWriter struct{ b *testBundle }

func (w logWriter) Write(p []byte) (int, error) {
	w.b.mu.Lock()
	defer w.b.mu.Unlock()
	return w.b.log.Write(p)
}

// closeStream is a pushed subscription that has no event: Advance never
// has a response ready; Close reports that the operation ended.
type closeStream struct{ closed chan<- struct{} }

func (closeStream) Advance(context.Context) bool { return false }
func (s closeStream) Close()                     { s.closed <- struct{}{} }

// burstStream is a pushed subscription with left responses ready from
// the start, numbered from 1. Like gqlgen's executor, it writes each
// response's data into the buffer of the one before. With big set, the
// second response carries 20 KiB of data and the fourth an error of
// 10 KiB, larger than a socket's write buffer, written around shared data
// and encoded whole.
type burstStream struct {
	mu        sync.Mutex
	left, off int
	buf       []byte
	big       bool
	panicAt   int  // Advance panics once off reaches it
	ends      bool // after the last response, the end of the stream is ready
}

func (s *burstStream) Advance(context.Context) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.panicAt > 0 && s.off == s.panicAt {
		panic("Advance panicked")
	}
	return s.left > 0 || (s.ends && s.left == 0)
}

func (s *burstStream) next(context.Context) *graphql.Response {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.left == 0 {
		s.left--
		return nil
	}
	s.left--
	s.off++
	n := strconv.Itoa(s.off)
	switch {
	case s.big && s.off == 2:
		n += strings.Repeat("d", 20<<10)
	case s.big && s.off == 4:
		return &graphql.Response{Errors: gqlerror.List{{Message: strings.Repeat("e", 10<<10)}}}
	}
	s.buf = append(s.buf[:0], `{"burst":"`+n+`"}`...)
	return &graphql.Response{Data: s.buf}
}

// panicListener accepts connections whose Read panics, once it returned,
// when armed is set: after the handshake, only the socket's own goroutine
// reads the connection, so the panic ends that goroutine. It counts the
// server's writes to its connections in writes.
type panicListener struct {
	net.Listener
	armed  *atomic.Bool
	writes *atomic.Int64
}

func (l panicListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return panicConn{Conn: c, armed: l.armed, writes: l.writes}, nil
}

type panicConn struct {
	net.Conn
	armed  *atomic.Bool
	writes *atomic.Int64
}

func (c panicConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

func (c panicConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.armed.CompareAndSwap(true, false) {
		panic("read panicked")
	}
	return n, err
}

// dial opens a socket with subprotocol proto and has it acknowledged.
func (b *testBundle) dial(t *testing.T, proto string) *websocket.Conn {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{proto}, HandshakeTimeout: 5 * time.Second}
	conn, res, err := d.Dial(b.url, nil)
	require.NoError(t, err)
	res.Body.Close()
	t.Cleanup(func() { conn.Close() })
	require.NoError(t, conn.WriteJSON(testMessage{Type: "connection_init"}))
	require.Equal(t, "connection_ack", readMessage(t, conn).Type)
	return conn
}

// readMessage reads the next message but graphql-ws's keepalive.
func readMessage(t *testing.T, conn *websocket.Conn) testMessage {
	t.Helper()
	for {
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
		var m testMessage
		require.NoError(t, conn.ReadJSON(&m))
		if m.Type != "ka" {
			return m
		}
	}
}

// subscribe starts operation id with query, in proto's words.
func subscribe(t *testing.T, conn *websocket.Conn, proto, id, query string) {
	t.Helper()
	typ := "subscribe"
	if proto == ProtoLegacyWS {
		typ = "start"
	}
	payload, err := json.Marshal(map[string]string{"query": query})
	require.NoError(t, err)
	require.NoError(t, conn.WriteJSON(testMessage{Type: typ, ID: id, Payload: payload}))
}

// closeCode reads until the socket ends and returns the close code the
// server sent (1006 when it sent none).
func closeCode(t *testing.T, conn *websocket.Conn) int {
	t.Helper()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	for {
		_, _, err := conn.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		require.ErrorAs(t, err, &ce, "the socket must be closed, not time out")
		return ce.Code
	}
}

// receive returns the next value of ch, failing the test after 5 s.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
	}
	t.Fatalf("timed out waiting for %s", what)
	var zero T
	return zero
}

// waitFor polls cond until it holds, failing the test after 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// A panic on a socket's own goroutine tears the socket down as its end
// would: its operations (whose contexts are not the socket's children) are
// stopped, pulled and pushed alike, OnClose lets go of what InitFunc
// registered, once, and the client gets a close frame saying 1011. The
// process lives on, behind Handler or not.
func TestPanicOnSocketGoroutineEndsTheSocket(t *testing.T) {
	t.Parallel()
	for _, behindHandler := range []bool{true, false} {
		for _, proto := range []string{ProtoTransportWS, ProtoLegacyWS} {
			t.Run(fmt.Sprintf("behindHandler=%t/%s", behindHandler, proto), func(t *testing.T) {
				t.Parallel()
				b := setupTransport(t, behindHandler)
				conn := b.dial(t, proto)
				subscribe(t, conn, proto, "1", "subscription { pulled }")
				subscribe(t, conn, proto, "2", "subscription { pushed }")
				resolverCtx := receive(t, b.pulled, "the pulled subscription's resolver")
				receive(t, b.pushed, "the pushed subscription's stream")

				b.panicReads.Store(true)
				require.NoError(t, conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(5*time.Second)))

				receive(t, resolverCtx.Done(), "the pulled subscription's context to end")
				receive(t, b.streams, "the pushed subscription's stream to close")
				waitFor(t, "the socket to leave the open set", func() bool { return b.impl.Open() == 0 })
				closes, watched := b.registrations()
				require.Equal(t, 1, closes, "OnClose calls")
				require.Zero(t, watched, "sockets still registered")
				require.Equal(t, websocket.CloseInternalServerErr, closeCode(t, conn), "the socket's close frame")
				waitFor(t, "the panic to be reported", func() bool { return strings.Contains(b.logged(), "read panicked") })
			})
		}
	}
}

// A panic in the socket's end itself (OnClose) does not run end again:
// OnClose is called once, and the socket still leaves the open set that
// Shutdown waits on.
func TestEndRunsOnceWhenOnClosePanics(t *testing.T) {
	t.Parallel()
	for _, behindHandler := range []bool{true, false} {
		t.Run(fmt.Sprintf("behindHandler=%t", behindHandler), func(t *testing.T) {
			t.Parallel()
			b := setupTransport(t, behindHandler, func(b *testBundle) { b.onClosePanics = true })
			conn := b.dial(t, ProtoTransportWS)
			subscribe(t, conn, ProtoTransportWS, "1", "subscription { pulled }")
			resolverCtx := receive(t, b.pulled, "the pulled subscription's resolver")

			require.NoError(t, conn.Close())
			receive(t, resolverCtx.Done(), "the pulled subscription's context to end")
			waitFor(t, "the socket to leave the open set", func() bool { return b.impl.Open() == 0 })
			closes, _ := b.registrations()
			require.Equal(t, 1, closes, "OnClose calls")
			waitFor(t, "the panic to be reported", func() bool { return strings.Contains(b.logged(), "OnClose panicked") })
		})
	}
}

// A panic in InitFunc, on the socket's goroutine before any operation,
// closes the socket with 1011 and takes it out of the open set; OnClose is
// not owed.
func TestInitFuncPanicClosesTheSocket(t *testing.T) {
	t.Parallel()
	for _, behindHandler := range []bool{true, false} {
		t.Run(fmt.Sprintf("behindHandler=%t", behindHandler), func(t *testing.T) {
			t.Parallel()
			b := setupTransport(t, behindHandler, func(b *testBundle) { b.initPanics = true })
			d := websocket.Dialer{Subprotocols: []string{ProtoTransportWS}, HandshakeTimeout: 5 * time.Second}
			conn, res, err := d.Dial(b.url, nil)
			require.NoError(t, err)
			res.Body.Close()
			t.Cleanup(func() { conn.Close() })
			require.NoError(t, conn.WriteJSON(testMessage{Type: "connection_init"}))

			require.Equal(t, websocket.CloseInternalServerErr, closeCode(t, conn), "the socket's close frame")
			waitFor(t, "the socket to leave the open set", func() bool { return b.impl.Open() == 0 })
			waitFor(t, "the panic to be reported", func() bool { return strings.Contains(b.logged(), "InitFunc panicked") })
			closes, _ := b.registrations()
			require.Zero(t, closes, "OnClose calls for a socket InitFunc did not accept")
		})
	}
}

// A subscription whose resolver returns a channel is pulled under the
// context DispatchOperation returned: response interceptors (Loaders,
// Tracing) find the operation's OperationContext and what the operation
// interceptors added. Its resolver's context ends when the client stops
// the operation and when the socket closes.
func TestPulledSubscriptionRunsInOperationContext(t *testing.T) {
	t.Parallel()
	const query = "subscription { pulled }"
	for _, proto := range []string{ProtoTransportWS, ProtoLegacyWS} {
		for _, end := range []string{"client stops", "socket closes"} {
			t.Run(proto+"/"+end, func(t *testing.T) {
				t.Parallel()
				b := setupTransport(t, true)
				conn := b.dial(t, proto)
				subscribe(t, conn, proto, "1", query)
				resolverCtx := receive(t, b.pulled, "the resolver")

				b.events <- "tick"
				seen := receive(t, b.seen, "the response interceptor")
				require.NotNil(t, seen.rc, "the response interceptor's context has no OperationContext")
				require.Equal(t, query, seen.rc.RawQuery)
				require.Equal(t, "operation interceptor", seen.mark, "what the operation interceptor added")
				m := readMessage(t, conn)
				require.Equal(t, "1", m.ID)
				require.Contains(t, []string{"next", "data"}, m.Type)
				require.JSONEq(t, `{"data":{"pulled":"tick"}}`, string(m.Payload))
				select {
				case <-resolverCtx.Done():
					t.Fatal("the resolver's context ended while the subscription runs")
				default:
				}

				switch end {
				case "client stops":
					typ := "complete"
					if proto == ProtoLegacyWS {
						typ = "stop"
					}
					require.NoError(t, conn.WriteJSON(testMessage{Type: typ, ID: "1"}))
				case "socket closes":
					require.NoError(t, conn.Close())
				}
				receive(t, resolverCtx.Done(), "the resolver's context to end")
				if end == "socket closes" {
					waitFor(t, "the socket to leave the open set", func() bool { return b.impl.Open() == 0 })
					closes, watched := b.registrations()
					require.Equal(t, 1, closes, "OnClose calls")
					require.Zero(t, watched, "sockets still registered")
				}
			})
		}
	}
}

// Responses ready together leave in one write to the network per turn of
// the socket's writer (pushTurn of them), not one each, in order, on both
// subprotocols; nothing is left behind when the stream runs dry.
func TestReadyResponsesShareAWrite(t *testing.T) {
	t.Parallel()
	for _, proto := range []string{ProtoTransportWS, ProtoLegacyWS} {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			b := setupTransport(t, true, func(b *testBundle) { b.seen = nil })
			conn := b.dial(t, proto)
			if proto == ProtoLegacyWS {
				// The first ka, written on its own right after the ack,
				// is counted before the burst, not in it.
				var m testMessage
				require.NoError(t, conn.ReadJSON(&m))
				require.Equal(t, "ka", m.Type)
			}
			before := b.writes.Load()
			subscribe(t, conn, proto, "1", "subscription { burst }")
			for i := 1; i <= burstLength; i++ {
				m := readMessage(t, conn)
				want := `{"data":{"burst":"` + strconv.Itoa(i) + `"}}`
				require.Equal(t, "1", m.ID)
				require.JSONEq(t, want, string(m.Payload), "message %d", i)
			}
			turns := (burstLength + pushTurn - 1) / pushTurn
			require.Equal(t, int64(turns), b.writes.Load()-before,
				"%d responses ready at once: one write per turn of %d", burstLength, pushTurn)
		})
	}
}

// On a server's own TCP connection, messages larger than a socket's write
// buffer (shared data, an error response) in the middle of responses that
// share writes arrive whole and in order, after an idle spell longer than
// WriteTimeout: every frame goes through the socket's writes, none
// straight to the network under a deadline left from an earlier write.
func TestLargeMessagesAmongHeldOnesOnTCP(t *testing.T) {
	t.Parallel()
	for _, proto := range []string{ProtoTransportWS, ProtoLegacyWS} {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			b := setupTransport(t, true, func(b *testBundle) {
				b.seen, b.plainTCP = nil, true
				b.impl.WriteTimeout = 200 * time.Millisecond
			})
			conn := b.dial(t, proto)
			time.Sleep(400 * time.Millisecond) // past the ack's write deadline
			subscribe(t, conn, proto, "1", "subscription { burst }")
			for i := 1; i <= burstLength; i++ {
				m := readMessage(t, conn)
				require.Equal(t, "1", m.ID)
				if i == 4 {
					require.Contains(t, string(m.Payload), strings.Repeat("e", 10<<10), "message 4: the error")
					continue
				}
				n := strconv.Itoa(i)
				if i == 2 {
					n += strings.Repeat("d", 20<<10)
				}
				require.JSONEq(t, `{"data":{"burst":"`+n+`"}}`, string(m.Payload), "message %d", i)
			}
		})
	}
}

// A stream that panics after a response was held for the next still
// delivers it: the error message that ends the operation takes it out.
func TestPanicInAStreamKeepsWhatItHeld(t *testing.T) {
	t.Parallel()
	for _, proto := range []string{ProtoTransportWS, ProtoLegacyWS} {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			b := setupTransport(t, true, func(b *testBundle) { b.seen, b.burstPanicsAt = nil, 2 })
			conn := b.dial(t, proto)
			subscribe(t, conn, proto, "1", "subscription { burst }")
			m := readMessage(t, conn)
			require.NotEqual(t, "error", m.Type, "the response held before the panic was dropped")
			require.JSONEq(t, `{"data":{"burst":"1"}}`, string(m.Payload))
			// The second response was read when Advance panicked,
			// and is lost with the operation.
			require.Equal(t, "error", readMessage(t, conn).Type)
		})
	}
}

// A stream that ends while the socket is open gets its complete, and its
// responses held before it, even once the context InitFunc gave the socket
// has passed its deadline (a deadline the transport does not watch).
func TestStreamEndAfterInitDeadlineCompletes(t *testing.T) {
	t.Parallel()
	b := setupTransport(t, true, func(b *testBundle) {
		b.seen, b.burstEnds, b.initDeadline = nil, true, 50*time.Millisecond
	})
	conn := b.dial(t, ProtoTransportWS)
	time.Sleep(100 * time.Millisecond)
	subscribe(t, conn, ProtoTransportWS, "1", "subscription { burst }")
	for i := 1; i <= burstLength; i++ {
		m := readMessage(t, conn)
		require.JSONEq(t, `{"data":{"burst":"`+strconv.Itoa(i)+`"}}`, string(m.Payload), "message %d", i)
	}
	require.Equal(t, "complete", readMessage(t, conn).Type)
}
