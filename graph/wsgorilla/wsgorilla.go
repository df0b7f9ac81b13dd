// Package wsgorilla serves GraphQL over websockets on
// github.com/gorilla/websocket: Transport is the gqlgen transport that
// speaks both subprotocols (graphql-transport-ws and the legacy
// graphql-ws), Implementation accepts and hardens the sockets underneath,
// the same for both:
//
//   - a browser handshake from an Origin outside the allow-list gets HTTP 403
//     before any upgrade (Handler);
//   - a client that sends no connection_init within InitTimeout is closed
//     with 4408; a second connection_init on graphql-transport-ws with 4429;
//     a connection_init whose payload is not an object with 4400;
//   - a subscribe (start) whose id is already running is closed with 4409;
//   - a peer from which nothing arrived for two PingIntervals (websocket
//     pings are answered by every client, whatever the subprotocol) and
//     that read nothing of what was sent meanwhile (on Linux, its TCP
//     receive window did not move while data waited for it) is taken for
//     gone: its socket is closed and its operations cancelled;
//   - with ProtocolKeepAlive, each ping frame is followed by the
//     subprotocol's own keepalive message ("ka" on graphql-ws, "ping" on
//     graphql-transport-ws);
//   - a write that fails or exceeds WriteTimeout closes the socket, so a
//     client that stopped reading never holds a writer for longer;
//   - Shutdown closes every socket with 1001, and CloseSocket lets a
//     resolver close its own socket with a code of its choice.
//
// Implementation also fits gqlgen's own websocket transport
// (transport.WebsocketImplementation), without its InitTimeout (which
// closes with 1002) and read deadlines: this package owns the read
// deadline of its sockets.
//
// An idle socket costs little: one goroutine, which reads; pings run on a
// timer; a subscription that pushes (Push, the live feed) has no
// goroutine while it waits, and write buffers come from a pool shared by
// all sockets, held only while a message is written. A busy socket costs
// less: the messages ready for it together leave in one write.
package wsgorilla

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/gorilla/websocket"
)

// Close codes this package sends. The 44xx ones are those of the
// graphql-transport-ws protocol. The legacy graphql-ws subprotocol gets
// 4400 (for a connection_init payload only), 4408 and 4409 too; where
// graphql-transport-ws has 4401, 4429 or 4400 for a message, Transport
// closes graphql-ws with 1002 after a connection_error, or with 1000 for
// malformed JSON or an unknown type after the acknowledgement, as
// gqlgen's transport does.
const (
	// CloseGoingAway (RFC 6455) is sent to every socket by Shutdown.
	CloseGoingAway = websocket.CloseGoingAway
	// CloseBadRequest: a connection_init payload that is not a JSON
	// object; on graphql-transport-ws also a message that is not one the
	// client may send (malformed JSON, an unknown or server-only type) or
	// not a valid one (a subscribe or complete without an id, a subscribe
	// payload that is not an operation). The close reason says which.
	CloseBadRequest = 4400
	// CloseNotInitialised: subscribe before connection_ack
	// (graphql-transport-ws; the protocol names it Unauthorized).
	CloseNotInitialised = 4401
	// CloseInitTimeout: no connection_init within InitTimeout.
	CloseInitTimeout = 4408
	// CloseSubscriberExists: subscribe (start) with the id of an operation
	// that is still running on this socket.
	CloseSubscriberExists = 4409
	// CloseTooManyInit: a second connection_init (graphql-transport-ws).
	CloseTooManyInit = 4429
)

const (
	// defaultReadBufferSize is the read buffer of a socket when
	// ReadBufferSize is 0, in bytes.
	defaultReadBufferSize = 256
	// defaultWriteTimeout bounds one frame write when WriteTimeout is 0.
	defaultWriteTimeout = 10 * time.Second
	// defaultWriteBufferSize is the write buffer of a socket when
	// WriteBufferSize is 0, in bytes.
	defaultWriteBufferSize = 4096
	// closeGrace is how long a socket we sent a close frame on waits for
	// the peer's close frame before the network connection is dropped.
	closeGrace = time.Second
	// maxCloseReason is the longest close reason a close frame can carry
	// (125 bytes of control payload less the 2-byte code).
	maxCloseReason = 123
)

// errClosing is what writes get once a close frame was sent or is being
// sent on the socket.
var errClosing = errors.New("websocket is closing")

// Implementation accepts websockets with gorilla's Upgrader and keeps the
// set of open ones for Shutdown. Use it by pointer, with its Handler in
// front of the gqlgen handler; the zero value works (no pings, no init
// timeout, same-origin only).
type Implementation struct {
	// CheckOrigin decides whether a handshake's Origin may open a socket;
	// nil allows requests without Origin and same-origin ones (see
	// AllowOrigins).
	CheckOrigin func(r *http.Request) bool
	// ReadBufferSize and WriteBufferSize are the I/O buffer sizes in bytes.
	// A socket keeps its read buffer for life; 0 means 256 bytes: an idle
	// socket reads only control frames (at most 131 bytes), and a larger
	// message is read mostly past it, straight into the message. Never
	// net/http's reader of the hijacked connection, which would keep
	// net/http's whole connection state (and its 4 KiB write buffer)
	// reachable. Write buffers are taken from a pool shared by every
	// socket for the time of one write; 0 means gorilla's default (4096).
	// A message larger than the write buffer goes out as several frames.
	ReadBufferSize, WriteBufferSize int
	// SendBuffer caps the kernel's send buffer of each socket (SO_SNDBUF),
	// in bytes: what a client that stopped reading can pin in the kernel
	// (Linux reserves twice the value). 0 keeps the system's autotuning,
	// up to net.ipv4.tcp_wmem's maximum (4 MiB by default).
	SendBuffer int
	// PingInterval is the period of websocket ping frames; a peer from
	// which nothing (pong, ping or message) arrived for two intervals is
	// taken for gone and its socket closed, unless it is reading what the
	// socket sent (on Linux its TCP receive window moves on while data
	// waits for it): its pongs then wait behind that. 0 disables both.
	PingInterval time.Duration
	// ProtocolKeepAlive sends, with every ping frame once the connection
	// is acknowledged, the subprotocol's keepalive message: {"type":"ka"}
	// on graphql-ws, {"type":"ping"} on graphql-transport-ws (the client
	// answers "pong", which gqlgen takes). Set it instead of gqlgen's
	// KeepAlivePingInterval and PingPongInterval, which run two goroutines
	// per socket for the same.
	ProtocolKeepAlive bool
	// InitTimeout is how long a socket may stay open without sending
	// connection_init before it is closed with CloseInitTimeout; 0 disables.
	InitTimeout time.Duration
	// WriteTimeout bounds one frame write; a write that does not finish in
	// time (the peer stopped reading) closes the socket. 0 means 10 s.
	WriteTimeout time.Duration
	// OnMessage, when set, is told of every message written to a socket
	// (Transport's and WriteJSON's): sent true once written, false when
	// it was dropped (the socket was closing or the write failed).
	// Metrics hook in here.
	OnMessage func(sent bool)
	// Logger, when set, gets one line (info) for each socket dropped
	// because its peer seemed gone: nothing came from it and it read
	// nothing for two PingIntervals, or a write waited WriteTimeout while
	// it read nothing. The client sees 1006 then, and no close frame.
	Logger *slog.Logger

	writePool sync.Pool // write buffers shared by every socket

	mu           sync.Mutex
	conns        map[*Conn]struct{}
	shuttingDown bool
	drained      chan struct{} // closed when conns empties during Shutdown
}

var _ transport.WebsocketImplementation = (*Implementation)(nil)

type handleKey struct{}

// handle lets code holding a request's context reach the socket that
// request became; Handler puts one in every handshake's context and Accept
// fills it. released is done when the handshake's net/http goroutine may
// return: the connection was acknowledged or closed, or next returned
// (panicked then holds what it panicked with, if it did). A WaitGroup
// rather than a channel: the handle lives as long as the socket.
type handle struct {
	conn        atomic.Pointer[Conn]
	released    sync.WaitGroup
	releaseOnce sync.Once
	panicked    any
	// loop, when Transport set it, is the rest of the socket's life: run
	// by serveSocket after next returned, at the bottom of the
	// goroutine's stack.
	loop func()
	// cancel ends the handshake's context, which lives as long as the
	// socket: Transport uses it as the socket's own.
	cancel context.CancelFunc
	// socket is Transport's state of the socket, set once it has one: a
	// panic that ends the socket's goroutine tears it down (its
	// operations' contexts are not the handshake context's children).
	socket *socket
}

// release lets the handshake's net/http goroutine return, panicking with p
// when p is not nil; it reports false when that goroutine was let go
// already.
func (h *handle) release(p any) (first bool) {
	h.releaseOnce.Do(func() {
		h.panicked, first = p, true
		h.released.Done()
	})
	return first
}

// Handler guards next, the gqlgen handler, for websocket handshakes (any
// request with an Upgrade header, as gqlgen routes them): a disallowed
// Origin gets 403 and a handshake during Shutdown 503, both before any
// upgrade; an allowed one proceeds with a context through which
// CloseSocket reaches its socket. Other requests pass through untouched.
//
// An allowed handshake runs next on a goroutine of its own, with a
// context that the end of the HTTP request does not cancel. The request's
// goroutine waits until the socket is acknowledged (connection_ack) or
// closed, or next returns, and then returns to net/http, which lets go of
// its per-connection state (two 4 KiB buffers, the request, its goroutine
// stack) for the life of the socket; middleware around Handler therefore
// sees a websocket request end at connection_ack. The socket's own
// goroutine ends when gqlgen closes it (Shutdown still closes every socket
// with 1001).
func (i *Implementation) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "" {
			next.ServeHTTP(w, r)
			return
		}
		if !i.originAllowed(r) {
			http.Error(w, "websocket: origin not allowed", http.StatusForbidden)
			return
		}
		i.mu.Lock()
		down := i.shuttingDown
		i.mu.Unlock()
		if down {
			http.Error(w, "server shutting down", http.StatusServiceUnavailable)
			return
		}
		h := &handle{}
		h.released.Add(1)
		// Values stay (request id, logger attributes); cancellation does
		// not: net/http cancels r's context as soon as this returns.
		ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
		h.cancel = cancel
		ctx = context.WithValue(ctx, handleKey{}, h)
		go serveSocket(next, &handshakeWriter{w: w}, r.WithContext(ctx), h, cancel)
		h.released.Wait()
		if h.panicked != nil {
			panic(h.panicked) // net/http recovers and logs handler panics
		}
	})
}

// serveSocket runs next for a handshake that Handler let through, on the
// socket's own goroutine. It takes its arguments rather than being a
// closure over Handler's, which would keep the outer request (and what
// middleware hung on it) for the life of the socket.
func serveSocket(next http.Handler, w *handshakeWriter, r *http.Request, h *handle, cancel context.CancelFunc) {
	remote := r.RemoteAddr
	logger := log.Default()
	if srv, ok := r.Context().Value(http.ServerContextKey).(*http.Server); ok && srv.ErrorLog != nil {
		logger = srv.ErrorLog
	}
	handedOff := false
	defer func() {
		if !handedOff {
			cancel()
		}
	}()
	defer recoverSocket(h, remote, logger)
	next.ServeHTTP(w, r)
	if loop := h.loop; loop != nil {
		// The handshake's middleware and gqlgen's handler grew this
		// goroutine's stack to 8 KiB or more, which an idle socket would
		// keep for life; a fresh goroutine reading the socket needs 4.
		h.loop = nil
		handedOff = true
		go serveLoop(loop, h, remote, logger, cancel)
	}
}

// serveLoop runs the rest of a socket's life (handle.loop) on a goroutine
// of its own.
func serveLoop(loop func(), h *handle, remote string, logger *log.Logger, cancel context.CancelFunc) {
	defer cancel()
	defer recoverSocket(h, remote, logger)
	loop()
}

// recoverSocket, deferred, hands a panic serving a socket to the request's
// goroutine while that waits (Handler re-panics for net/http), else logs
// it as net/http would (to the server's ErrorLog) and drops the socket.
func recoverSocket(h *handle, remote string, logger *log.Logger) {
	p := recover()
	if s := h.socket; p != nil && s != nil {
		s.fail()
	}
	if h.release(p) || p == nil {
		return
	}
	if err, ok := p.(error); !ok || !errors.Is(err, http.ErrAbortHandler) {
		logger.Printf("wsgorilla: panic serving %s: %v\n%s", remote, p, debug.Stack())
	}
	if c := h.conn.Load(); c != nil {
		_ = c.Close()
		c.untrack()
	}
}

// handshakeWriter is the ResponseWriter next gets from Handler. Once the
// connection is hijacked it forgets net/http's ResponseWriter, which holds
// the connection's buffers and which gqlgen's handler keeps reachable (in a
// deferred recover) for as long as the socket is open; writes then fail
// with http.ErrHijacked.
type handshakeWriter struct {
	mu     sync.Mutex
	w      http.ResponseWriter // nil once hijacked
	header http.Header         // Header after the hijack
}

var _ http.Hijacker = (*handshakeWriter)(nil)

// Header implements http.ResponseWriter; after the hijack it is a map of
// its own, read by nobody.
func (hw *handshakeWriter) Header() http.Header {
	hw.mu.Lock()
	defer hw.mu.Unlock()
	if hw.w != nil {
		return hw.w.Header()
	}
	if hw.header == nil {
		hw.header = http.Header{}
	}
	return hw.header
}

// Write implements http.ResponseWriter.
func (hw *handshakeWriter) Write(b []byte) (int, error) {
	hw.mu.Lock()
	w := hw.w
	hw.mu.Unlock()
	if w == nil {
		return 0, http.ErrHijacked
	}
	return w.Write(b)
}

// WriteHeader implements http.ResponseWriter; a no-op after the hijack.
func (hw *handshakeWriter) WriteHeader(code int) {
	hw.mu.Lock()
	w := hw.w
	hw.mu.Unlock()
	if w != nil {
		w.WriteHeader(code)
	}
}

// Hijack implements http.Hijacker for gorilla's Upgrader.
func (hw *handshakeWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hw.mu.Lock()
	defer hw.mu.Unlock()
	if hw.w == nil {
		return nil, nil, http.ErrHijacked
	}
	conn, brw, err := http.NewResponseController(hw.w).Hijack()
	if err == nil {
		hw.w = nil
	}
	return conn, brw, err
}

func (i *Implementation) originAllowed(r *http.Request) bool {
	if i.CheckOrigin != nil {
		return i.CheckOrigin(r)
	}
	return sameOriginOrNone(r)
}

// writeBufferSize is the payload a socket's write buffer holds, in bytes
// (gorilla's default when WriteBufferSize is 0).
func (i *Implementation) writeBufferSize() int {
	if i.WriteBufferSize > 0 {
		return i.WriteBufferSize
	}
	return defaultWriteBufferSize
}

func (i *Implementation) writeTimeout() time.Duration {
	if i.WriteTimeout > 0 {
		return i.WriteTimeout
	}
	return defaultWriteTimeout
}

// Accept implements transport.WebsocketImplementation: it upgrades the
// request, negotiating one of the GraphQL subprotocols gqlgen offers, and
// starts the socket's pings and init timer.
func (i *Implementation) Accept(w http.ResponseWriter, r *http.Request, opts transport.WebsocketAcceptOptions) (transport.WebsocketConn, error) {
	up := websocket.Upgrader{
		Subprotocols:    slices.Clone(opts.Subprotocols),
		CheckOrigin:     i.originAllowed,
		ReadBufferSize:  cmp.Or(i.ReadBufferSize, defaultReadBufferSize),
		WriteBufferSize: i.writeBufferSize(),
		WriteBufferPool: &i.writePool,
	}
	c := &Conn{impl: i}
	ws, err := up.Upgrade(hijacker{w, &c.net}, r, opts.ResponseHeader)
	if err != nil {
		// Upgrade has already answered the request with an HTTP error.
		return nil, err
	}
	c.ws = ws
	if i.SendBuffer > 0 {
		if tc, ok := c.net.raw.(interface{ SetWriteBuffer(int) error }); ok {
			_ = tc.SetWriteBuffer(i.SendBuffer)
		}
	}
	if h, ok := r.Context().Value(handleKey{}).(*handle); ok {
		h.conn.Store(c)
		c.handle = h
	}
	i.mu.Lock()
	if i.conns == nil {
		i.conns = make(map[*Conn]struct{})
	}
	i.conns[c] = struct{}{}
	down := i.shuttingDown
	i.mu.Unlock()

	// Any frame from the peer proves it is there: data messages are seen
	// in NextReader, control frames here.
	ws.SetPongHandler(func(string) error { c.alive(); return nil })
	ping := ws.PingHandler()
	ws.SetPingHandler(func(data string) error { c.alive(); return ping(data) })
	c.alive()
	if i.InitTimeout > 0 {
		c.mu.Lock()
		c.initTimer = time.AfterFunc(i.InitTimeout, func() {
			c.closeWith(CloseInitTimeout, "Connection initialisation timeout", i.writeTimeout())
		})
		c.mu.Unlock()
	}
	if i.PingInterval > 0 {
		c.mu.Lock()
		c.pingTimer = time.AfterFunc(i.PingInterval, c.ping)
		c.mu.Unlock()
	}
	if down {
		c.closeWith(CloseGoingAway, "server shutting down", closeGrace)
	}
	return c, nil
}

// Open is the number of sockets accepted and not yet closed by gqlgen.
func (i *Implementation) Open() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return len(i.conns)
}

// Shutdown refuses new handshakes (503), closes every open socket with
// 1001 (going away) and waits until gqlgen has closed them all, which it
// does after cancelling their operations. When ctx ends first, the
// remaining sockets are dropped without waiting and ctx's error is
// returned.
func (i *Implementation) Shutdown(ctx context.Context) error {
	i.mu.Lock()
	i.shuttingDown = true
	conns := slices.Collect(maps.Keys(i.conns))
	if i.drained == nil {
		i.drained = make(chan struct{})
		if len(i.conns) == 0 {
			close(i.drained)
		}
	}
	drained := i.drained
	i.mu.Unlock()

	for _, c := range conns {
		c.closeWith(CloseGoingAway, "server shutting down", closeGrace)
	}
	select {
	case <-drained:
		return nil
	case <-ctx.Done():
		i.mu.Lock()
		left := slices.Collect(maps.Keys(i.conns))
		i.mu.Unlock()
		for _, c := range left {
			c.closeNetwork()
		}
		return fmt.Errorf("close %d websockets: %w", len(left), ctx.Err())
	}
}

func (i *Implementation) forget(c *Conn) {
	i.mu.Lock()
	defer i.mu.Unlock()
	delete(i.conns, c)
	if len(i.conns) == 0 && i.drained != nil {
		select {
		case <-i.drained:
		default:
			close(i.drained)
		}
	}
}

// CloseSocket closes the websocket that carries ctx (a resolver's or
// InitFunc's context, of a socket of Transport or of a handshake that went
// through Handler) with code and reason,
// without waiting: data writes stop at once, the close frame follows the
// frame being written if any (a client that stopped reading gets it when
// it reads again within WriteTimeout), and the network connection is
// dropped when the peer answers or a second later. gqlgen then cancels the
// socket's operations. It reports false when ctx belongs to no such socket.
func CloseSocket(ctx context.Context, code int, reason string) bool {
	h, ok := ctx.Value(handleKey{}).(*handle)
	if !ok {
		return false
	}
	c := h.conn.Load()
	if c == nil {
		return false
	}
	c.closeWith(code, reason, c.impl.writeTimeout())
	return true
}

// CloseStalledSocket is CloseSocket for a client that stopped reading: its
// buffers may be full, so the close frame gets closeGrace to go out, not
// WriteTimeout, before the network connection is dropped (the client then
// sees no close frame: 1006).
func CloseStalledSocket(ctx context.Context, code int, reason string) bool {
	h, ok := ctx.Value(handleKey{}).(*handle)
	if !ok {
		return false
	}
	c := h.conn.Load()
	if c == nil {
		return false
	}
	c.closeWith(code, reason, closeGrace)
	return true
}

// Conn is one accepted socket. gqlgen reads it from one goroutine and
// writes it from several (results, keepalives, close); gorilla allows one
// data writer at a time, so data writes are serialised here. Control frames
// (pings, close) may be written concurrently with them.
type Conn struct {
	ws   *websocket.Conn
	net  netConn // under ws
	impl *Implementation
	// handle is the handshake's, when it came through Handler: released
	// once the socket is acknowledged or closed.
	handle *handle

	writeMu sync.Mutex // serialises data writes

	// closing is set once a close frame was sent or is being sent: no data
	// frame goes out after it.
	closing atomic.Bool
	// closeMu is held while a close frame is written, so that Close lets
	// that frame out before dropping the connection.
	closeMu sync.Mutex

	netClosed    atomic.Bool // set with the network connection's close
	netCloseOnce sync.Once

	// untrackLater: Transport serves the socket and removes it from the
	// open set itself (untrack) once its operations and writer ended, so
	// that Shutdown returns only after them; Close then leaves it there.
	untrackLater bool
	// ownIDs: Transport keeps the running operations' ids (4409) in its
	// own set, and active stays nil.
	ownIDs bool
	// initSeen is set once a connection_init arrived; guarded by mu (it
	// sits here to fill the padding after ownIDs).
	initSeen bool

	// acked is set once connection_ack was written: keepalive messages
	// follow from then on.
	acked atomic.Bool

	mu sync.Mutex
	// peerEdge is receiveEdge at the last look (peerReading).
	peerEdge  atomic.Uint32
	initTimer *time.Timer         // closes with 4408; stopped by connection_init
	pingTimer *time.Timer         // sends the next ping; stopped with the connection
	active    map[string]struct{} // ids of operations running on this socket, made on first use
	// pinging is set while ping writes a ping frame and keepalive message.
	pinging atomic.Bool
	// readSeen is when checkReading last saw the peer reading, in ms
	// since readEpoch modulo 2³², with the lowest bit set (0: never).
	readSeen atomic.Uint32
}

var (
	_ transport.WebsocketConn        = (*Conn)(nil)
	_ transport.WebsocketReadLimiter = (*Conn)(nil)
)

// clientMessage is the envelope both subprotocols share.
type clientMessage struct {
	Type    string          `json:"type"`
	ID      string          `json:"id"`
	Payload json.RawMessage `json:"payload"`
}

// NextReader returns the next data message for gqlgen. A normal close by
// the peer is transport.ErrWebsocketClosed, as gqlgen expects. Messages
// that break the rules this package enforces close the socket and are not
// handed on; neither is anything that arrives after a close frame was
// sent: the reader then only waits for the peer's close frame. Any read
// error (a close frame, a missed deadline, a message over the read limit)
// drops the network connection.
func (c *Conn) NextReader() (int, io.Reader, error) {
	mt, b, _, _, err := c.next()
	if err != nil {
		return mt, nil, err
	}
	return mt, bytes.NewReader(b), nil
}

// next is NextReader for Transport: the message, and its envelope m
// unless it is not a JSON object of that shape (parsed false).
func (c *Conn) next() (mt int, b []byte, m clientMessage, parsed bool, err error) {
	for {
		var r io.Reader
		var skip bool
		mt, r, err = c.ws.NextReader()
		if b, m, parsed, skip, err = c.take(r, err); !skip {
			return mt, b, m, parsed, err
		}
	}
}

// take reads the message r that gorilla's NextReader returned with err
// and applies the socket rules to it: skip reports a message not to hand
// on (it broke a rule, or came after a close frame was sent). A read
// error drops the network connection; a normal close by the peer is
// transport.ErrWebsocketClosed. A binary message is taken as the text it
// holds: neither subprotocol defines binary messages, and the reference
// servers of both read them so.
func (c *Conn) take(r io.Reader, rerr error) (b []byte, m clientMessage, parsed, skip bool, err error) {
	if err = rerr; err == nil {
		b, err = io.ReadAll(r) // at most the read limit
		if err == nil {
			c.alive()
			if c.closing.Load() {
				return nil, m, false, true, nil
			}
			if json.Unmarshal(b, &m) != nil {
				// Malformed: the protocol answers it.
				return b, clientMessage{}, false, false, nil
			}
			return b, m, true, !c.admit(m), nil
		}
	}
	if isTimeout(err) && !c.closing.Load() && !c.netClosed.Load() {
		c.dropped("nothing came from the peer and it read nothing for two ping intervals")
	}
	c.closeNetwork()
	var ce *websocket.CloseError
	if errors.As(err, &ce) && (ce.Code == websocket.CloseNormalClosure || ce.Code == websocket.CloseNoStatusReceived) {
		err = transport.ErrWebsocketClosed
	}
	return nil, clientMessage{}, false, false, err
}

// admit applies the rules on incoming messages and keeps the set of
// running operation ids; false means the message broke a rule and the
// socket is closing.
func (c *Conn) admit(m clientMessage) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch m.Type {
	case "connection_init":
		if c.initSeen {
			if c.ws.Subprotocol() == "graphql-transport-ws" {
				c.closeWith(CloseTooManyInit, "Too many initialisation requests", c.impl.writeTimeout())
				return false
			}
			return true
		}
		c.initSeen = true
		if c.initTimer != nil {
			c.initTimer.Stop()
			c.initTimer = nil // not needed for the rest of the socket's life
		}
		p := bytes.TrimSpace(m.Payload)
		if len(p) > 0 && !bytes.Equal(p, []byte("null")) && p[0] != '{' {
			// gqlgen would drop such a socket without closing it.
			c.closeWith(CloseBadRequest, "connection_init payload must be an object", c.impl.writeTimeout())
			return false
		}
	case "subscribe", "start":
		if c.ownIDs {
			break
		}
		if _, dup := c.active[m.ID]; dup {
			c.closeSubscriberExists(m.ID)
			return false
		}
		if c.active == nil {
			c.active = make(map[string]struct{})
		}
		c.active[m.ID] = struct{}{}
	case "complete", "stop":
		// The client may reuse the id at once (Transport hands it to
		// the new operation).
		delete(c.active, m.ID)
	}
	return true
}

// closeSubscriberExists closes the socket for a subscribe (start) with the
// id of a running operation.
func (c *Conn) closeSubscriberExists(id string) {
	c.closeWith(CloseSubscriberExists, "Subscriber for "+id+" already exists", c.impl.writeTimeout())
}

// ended forgets the operation id of an outgoing complete or error, which
// end an operation in both subprotocols, so the client may reuse the id.
func (c *Conn) ended(typ, id string) {
	if id == "" || (typ != "complete" && typ != "error") {
		return
	}
	c.forget(id)
}

// forget frees operation id: a subscribe may use it again.
func (c *Conn) forget(id string) {
	c.mu.Lock()
	delete(c.active, id)
	c.mu.Unlock()
}

// WriteJSON writes v as one text message within WriteTimeout; a failed or
// timed-out write drops the connection.
func (c *Conn) WriteJSON(v any) error {
	b, typ, id, err := encodeMessage(v)
	if err != nil {
		return fmt.Errorf("encode websocket message: %w", err)
	}
	// Before the write: the client may reuse the id as soon as it reads it.
	c.ended(typ, id)
	return c.writeMessage(typ, id, b)
}

// writeMessage writes one text message made of parts, of type typ for
// operation id, and notes the acknowledgement. Which message frees an id
// is the caller's to say (WriteJSON's ended; Transport keeps its ids in
// its own set).
func (c *Conn) writeMessage(typ, id string, parts ...[]byte) error {
	if err := c.writeText(false, parts...); err != nil {
		return err
	}
	if typ == "connection_ack" {
		c.acked.Store(true)
		c.release()
	}
	return nil
}

// writeText writes one text message, the concatenation of parts, unless
// the socket is closing, and counts it. The parts go straight into the
// socket's write buffer: a payload shared by many sockets is never copied
// into a message of each one's own. A held message waits in memory for
// the socket's next write, which takes it along (netConn): a pushed
// operation's writer holds a message when the next one is ready.
func (c *Conn) writeText(hold bool, parts ...[]byte) error {
	if c.closing.Load() {
		c.impl.onMessage(false)
		return errClosing
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(c.impl.writeTimeout()))
	if hold {
		c.net.holdNext()
		defer c.net.releaseHold()
	}
	if err := c.writeParts(parts); err != nil {
		c.impl.onMessage(false)
		if !c.closing.Load() {
			if isTimeout(err) && !c.netClosed.Load() {
				c.dropped("a write waited the write timeout while the peer read nothing")
			}
			c.closeNetwork()
		}
		return err
	}
	c.impl.onMessage(true)
	return nil
}

// writeParts writes one text message, the concatenation of parts. gorilla
// copies what it is handed into its write buffer and writes each frame
// with one call, except a part too large for the buffer, which it writes
// as a buffer of its own beside the frame's header: on a TCP connection
// straight to the socket, past netConn. A large part is therefore handed
// over in pieces that fit.
func (c *Conn) writeParts(parts [][]byte) error {
	piece := c.impl.writeBufferSize()
	if len(parts) == 1 && len(parts[0]) <= piece {
		return c.ws.WriteMessage(websocket.TextMessage, parts[0])
	}
	w, err := c.ws.NextWriter(websocket.TextMessage)
	if err != nil {
		return err
	}
	for _, p := range parts {
		for len(p) > 0 {
			k := min(len(p), piece)
			if _, err := w.Write(p[:k]); err != nil {
				_ = w.Close()
				return err
			}
			p = p[k:]
		}
	}
	return w.Close()
}

// endTurn is called when a pushed operation's writer ends its turn. A
// message still held then (writeText) is one of an operation stopped
// meanwhile, and is dropped, as a message written after the stop would
// be (another message on the socket may have taken it out first); while
// the socket closes it is left for the close frame, which takes it out
// before itself.
func (c *Conn) endTurn() {
	if !c.closing.Load() {
		c.net.releaseHeld()
	}
}

func (i *Implementation) onMessage(sent bool) {
	if i.OnMessage != nil {
		i.OnMessage(sent)
	}
}

// WriteClose sends a close frame with code and reason (cut to 123 bytes)
// unless one was sent already, whose code then stands.
func (c *Conn) WriteClose(code int, reason string) error {
	if !c.closing.CompareAndSwap(false, true) {
		return nil
	}
	return c.writeCloseFrame(code, reason, closeGrace)
}

// closeWith starts closing the socket with code and reason unless a close
// frame was sent already: data writes stop at once; in the background the
// close frame is written, waiting at most wait for a data frame being
// written, and the connection is dropped when the peer answers (NextReader
// sees its close frame) or after closeGrace.
func (c *Conn) closeWith(code int, reason string, wait time.Duration) {
	if !c.closing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		if err := c.writeCloseFrame(code, reason, wait); err != nil {
			c.closeNetwork()
			return
		}
		time.AfterFunc(closeGrace, c.closeNetwork)
	}()
}

func (c *Conn) writeCloseFrame(code int, reason string, wait time.Duration) error {
	reason = closeReason(reason)
	c.stopInitTimer()
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	return c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(wait))
}

func (c *Conn) stopInitTimer() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.initTimer != nil {
		c.initTimer.Stop()
	}
}

// Subprotocol is the negotiated subprotocol ("" when none).
func (c *Conn) Subprotocol() string { return c.ws.Subprotocol() }

// Close is gqlgen's end of the socket, called after it cancelled the
// socket's operations: it lets a close frame being written go out, drops
// the network connection and removes the socket from the open set (unless
// Transport serves it, which does that once its operations ended).
func (c *Conn) Close() error {
	c.closeMu.Lock()
	c.closeNetwork()
	c.closeMu.Unlock()
	if !c.untrackLater {
		c.impl.forget(c)
	}
	return nil
}

// untrack removes the socket from the open set that Shutdown waits on;
// safe to call more than once.
func (c *Conn) untrack() { c.impl.forget(c) }

// isTimeout reports a deadline that passed; gorilla hands it on as an
// error of its own, a net.Error.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// dropped logs that the socket is dropped because its peer seemed gone,
// for why.
func (c *Conn) dropped(why string) {
	if l := c.impl.Logger; l != nil {
		l.Info("websocket dropped: peer gone", slog.String("reason", why),
			slog.String("remote", c.ws.RemoteAddr().String()), slog.String("subprotocol", c.ws.Subprotocol()))
	}
}

// closeNetwork closes the network connection, which fails every read and
// write in progress; safe to call more than once.
func (c *Conn) closeNetwork() {
	c.netCloseOnce.Do(func() {
		c.netClosed.Store(true)
		c.stopInitTimer()
		c.mu.Lock()
		if c.pingTimer != nil {
			c.pingTimer.Stop()
		}
		c.mu.Unlock()
		_ = c.ws.Close()
		c.release()
	})
}

// release lets the handshake's net/http goroutine return (see Handler).
func (c *Conn) release() {
	if c.handle != nil {
		c.handle.release(nil)
	}
}

// SetReadLimit caps an incoming message at limit bytes; a larger one
// closes the socket with 1009.
func (c *Conn) SetReadLimit(limit int64) { c.ws.SetReadLimit(limit) }

// alive moves the read deadline two ping intervals ahead; called for every
// frame from the peer. checkReading moves it too while the peer reads
// what the socket sent.
func (c *Conn) alive() {
	if p := c.impl.PingInterval; p > 0 {
		_ = c.ws.SetReadDeadline(time.Now().Add(2 * p))
	}
}

// ping runs every PingInterval on the timer's goroutine (an idle socket
// has no goroutine for its pings). It moves the deadlines on while the
// peer reads what the socket sent (checkReading), then sends a ping frame,
// and the subprotocol's keepalive message when ProtocolKeepAlive is set,
// between data messages, unless the previous ones are still being
// written: behind a full send buffer they wait for the peer to read, and
// the next interval's check must not wait with them. Every websocket
// client answers pings with pongs on its own (browsers, Node's ws), so
// this detects a vanished peer on both subprotocols.
func (c *Conn) ping() {
	if c.netClosed.Load() || c.closing.Load() {
		return
	}
	c.checkReading()
	c.mu.Lock()
	if !c.netClosed.Load() { // else closeNetwork stopped the timer before this Reset
		c.pingTimer.Reset(c.impl.PingInterval)
	}
	c.mu.Unlock()
	if !c.pinging.CompareAndSwap(false, true) {
		return
	}
	defer c.pinging.Store(false)
	// The ping waits its turn among the data messages: in gorilla's lock
	// it would wait behind a data write under a deadline that no reading
	// moves on (checkReading moves the writes'), and fail there while the
	// peer reads a long catch-up slowly, which must still get its pings
	// and keepalive messages (a legacy client closes after 30 s without
	// a "ka").
	c.writeMu.Lock()
	err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.impl.writeTimeout()))
	c.writeMu.Unlock()
	if err != nil {
		if !c.closing.Load() {
			if isTimeout(err) && !c.netClosed.Load() {
				c.dropped("a write waited the write timeout while the peer read nothing")
			}
			c.closeNetwork()
		}
		return
	}
	if c.impl.ProtocolKeepAlive && c.acked.Load() {
		msg := keepAliveTransportWS
		if c.ws.Subprotocol() != "graphql-transport-ws" {
			msg = keepAliveGraphQLWS
		}
		_ = c.writeText(false, msg) // a failed write closes the socket
	}
}

// checkReading looks whether the peer read what the socket sent since the
// last look (peerReading) and, when it did, notes when (LastRead) and
// moves the socket's deadlines on, as a frame from the peer would: the
// read deadline, which its pongs, behind what it has yet to read, would
// miss, and the write deadline of a write waiting for its reading to free
// the send buffer (the kernel lets a writer on only once a third of the
// buffer is free: hundreds of kilobytes for a slow reader to take).
func (c *Conn) checkReading() {
	if !c.peerReading() {
		return
	}
	now := time.Now()
	c.readSeen.Store(uint32(now.Sub(readEpoch).Milliseconds()) | 1)
	if p := c.impl.PingInterval; p > 0 {
		// At a ping the reading shows up to an interval after it
		// happened: the deadline leaves the ping two intervals on, which
		// sees any reading since this one, room to run before it.
		_ = c.ws.SetReadDeadline(now.Add(2*p + p/4))
	}
	if !c.closing.Load() {
		// The next look is a ping interval away: the floor leaves it a
		// quarter of one to run, as the read deadline does, within a
		// quarter more than WriteTimeout, so that a peer that stopped
		// is not kept for long past it when pings are far apart.
		w := c.impl.writeTimeout()
		room := w
		if p := c.impl.PingInterval; p > 0 {
			room = max(w, min(p+p/4, w+w/4))
		}
		c.net.extendWrite(now.Add(room))
	}
}

// readEpoch is the origin of Conn.readSeen.
var readEpoch = time.Now()

// lastRead is when checkReading last saw the peer reading; zero when it
// never did.
func (c *Conn) lastRead() time.Time {
	seen := c.readSeen.Load()
	if seen == 0 {
		return time.Time{}
	}
	// Modulo 2³² ms (49 days); seen has its lowest bit set, so the clock's
	// too, or a look within its millisecond would be a negative age.
	age := uint32(time.Since(readEpoch).Milliseconds()) | 1 - seen
	return time.Now().Add(-time.Duration(age) * time.Millisecond)
}

// LastRead is when the client of ctx's socket was last seen reading what
// the socket sent (on Linux, its TCP receive window moving on while data
// waited for it), looking once more now; zero outside a socket, where it
// cannot be told, or when it was never seen. A writer waiting on a full
// socket has handed nothing on for seconds while a client reads slowly;
// this tells that client from one that stopped reading. Seeing it read
// moves the socket's deadlines on, as its pings do.
func LastRead(ctx context.Context) time.Time {
	h, ok := ctx.Value(handleKey{}).(*handle)
	if !ok {
		return time.Time{}
	}
	c := h.conn.Load()
	if c == nil || c.netClosed.Load() {
		return time.Time{}
	}
	c.checkReading()
	return c.lastRead()
}

// minPeerProgress is how far the peer's receive window must have moved
// since the last look for the peer to count as reading.
const minPeerProgress = 1024

// peerReading reports whether the right edge of the peer's receive window
// (receiveEdge) moved by at least minPeerProgress bytes since the last
// look (a ping's or LastRead's) while data waited for that window (at
// that look or at this one): its program read that much of what the
// socket sent. A client reading a long stream slowly (a catch-up from the
// journal) answers pings only once it has read everything sent before
// them, which takes longer than two ping intervals when the buffers
// between us hold megabytes; its window, which then holds the stream
// back, shows it is there and reading. Without data waiting the edge proves nothing: the kernel of a
// peer that reads nothing moves it for every message of a live feed. The
// window of a peer that stopped reading with data waiting moves at most
// while it fills; a vanished peer's not at all.
func (c *Conn) peerReading() bool {
	edge, waiting, ok := receiveEdge(c.net.raw)
	if !ok {
		return false
	}
	// peerEdge keeps the edge's low 32 bits, but for the lowest, which
	// says whether data was waiting.
	now := uint32(edge) &^ 1
	if waiting {
		now |= 1
	}
	last := c.peerEdge.Swap(now)
	// Modulo 2³² (one interval never moves 2 GiB), signed: a window the
	// peer shrank moved back, which is no reading.
	progress := int32(now&^1 - last&^1)
	return (waiting || last&1 != 0) && progress >= minPeerProgress
}

// The keepalive messages of the two subprotocols.
var (
	keepAliveTransportWS = []byte(`{"type":"ping"}`)
	keepAliveGraphQLWS   = []byte(`{"type":"ka"}`)
)

// closeReason makes reason fit a close frame: valid UTF-8 (a browser
// fails a close frame that is not, and its client sees 1006) of at most
// maxCloseReason bytes, cut between characters. The reason may quote a
// client's operation id.
func closeReason(reason string) string {
	return cutUTF8(strings.ToValidUTF8(reason, "\uFFFD"), maxCloseReason)
}

// cutUTF8 cuts s to at most n bytes, between characters.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
