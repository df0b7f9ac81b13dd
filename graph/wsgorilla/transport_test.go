package wsgorilla

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
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

// transportSchema is what the Transport tests serve: pulled is a
// subscription on a channel that gqlgen's executor waits on; three has
// three responses, then ends.
const transportSchema = `
type Query { ok: Boolean! }
type Subscription { pulled: String! three: String! }
`

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
	// initDeadline is a deadline InitFunc puts on the socket's context.
	initDeadline time.Duration
	// initPanics makes InitFunc panic; onClosePanics makes the first
	// OnClose panic.
	initPanics, onClosePanics bool

	pulled chan context.Context // each pulled subscription's resolver context
	events chan string          // the pulled subscriptions' events
	seen   chan seenResponse    // what the response interceptor saw (nil: not kept)

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
		seen:    make(chan seenResponse, 4),
		watched: map[int]bool{},
	}
	b.impl.Logger = slog.New(slog.NewTextHandler(logWriter{b}, nil))
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
	srv.Listener = panicListener{Listener: srv.Listener, armed: &b.panicReads}
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
	if rc.Operation.SelectionSet[0].(*ast.Field).Name == "three" {
		n := 0
		return func(context.Context) *graphql.Response {
			if n++; n > 3 {
				return nil
			}
			return &graphql.Response{Data: json.RawMessage(`{"three":"` + strconv.Itoa(n) + `"}`)}
		}
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

// panicListener accepts connections whose Read panics, once it returned,
// when armed is set: after the handshake, only the socket's own goroutine
// reads the connection, so the panic ends that goroutine.
type panicListener struct {
	net.Listener
	armed *atomic.Bool
}

func (l panicListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return panicConn{Conn: c, armed: l.armed}, nil
}

type panicConn struct {
	net.Conn
	armed *atomic.Bool
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
// stopped, OnClose lets go of what InitFunc
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
				resolverCtx := receive(t, b.pulled, "the pulled subscription's resolver")

				b.panicReads.Store(true)
				require.NoError(t, conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(5*time.Second)))

				receive(t, resolverCtx.Done(), "the pulled subscription's context to end")
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

// A subscription that ends while the socket is open gets its complete
// after its responses, even once the context InitFunc gave the socket has
// passed its deadline (a deadline the transport does not watch).
func TestSubscriptionEndAfterInitDeadlineCompletes(t *testing.T) {
	t.Parallel()
	b := setupTransport(t, true, func(b *testBundle) {
		b.seen, b.initDeadline = nil, 50*time.Millisecond
	})
	conn := b.dial(t, ProtoTransportWS)
	time.Sleep(100 * time.Millisecond)
	subscribe(t, conn, ProtoTransportWS, "1", "subscription { three }")
	for i := 1; i <= 3; i++ {
		m := readMessage(t, conn)
		require.JSONEq(t, `{"data":{"three":"`+strconv.Itoa(i)+`"}}`, string(m.Payload), "message %d", i)
	}
	require.Equal(t, "complete", readMessage(t, conn).Type)
}
