// Package wsgorilla serves GraphQL over websockets on
// github.com/gorilla/websocket: Transport is the gqlgen transport that
// speaks graphql-transport-ws and the legacy graphql-ws; Implementation
// accepts the sockets and applies the same rules to both: the origin
// check (403), the init timeout (4408), a websocket ping every
// PingInterval with the subprotocol's own keepalive message, a peer silent
// for two intervals dropped, and one plain rule for slow clients: a write
// that cannot complete within WriteTimeout drops the socket. A live-feed
// client then resumes from its last cursor and loses nothing.
package wsgorilla

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"
)

// Close codes this package sends, the 44xx ones graphql-transport-ws's.
// graphql-ws gets 4400 (for a connection_init payload only), 4408 and 4409
// too; for the other cases it gets 1002 or 1000, as with gqlgen.
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
	// ReadBufferSize is 0, in bytes: a larger message is read past it.
	defaultReadBufferSize = 256
	// defaultWriteTimeout bounds one message write when WriteTimeout is 0.
	defaultWriteTimeout = 10 * time.Second
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
// open ones for Shutdown. Use it by pointer, its Handler in front of the
// gqlgen handler, Transport in it; the zero value works (no pings).
type Implementation struct {
	// CheckOrigin decides whether a handshake's Origin may open a socket;
	// nil allows requests without Origin and same-origin ones (see
	// AllowOrigins).
	CheckOrigin func(r *http.Request) bool
	// ReadBufferSize and WriteBufferSize are the I/O buffer sizes in
	// bytes; 0 means 256 and 4096. Write buffers come from a pool shared
	// by every socket.
	ReadBufferSize, WriteBufferSize int
	// SendBuffer caps the kernel's send buffer of each socket (SO_SNDBUF),
	// in bytes: what a client that stopped reading can pin in the kernel
	// (Linux reserves twice the value). 0 keeps the system's autotuning.
	SendBuffer int
	// PingInterval is the period of websocket ping frames; a peer from
	// which nothing arrived for two intervals is dropped. 0 disables both.
	PingInterval time.Duration
	// ProtocolKeepAlive sends, with every ping frame once the connection
	// is acknowledged, the subprotocol's keepalive message: {"type":"ka"}
	// on graphql-ws, {"type":"ping"} on graphql-transport-ws (the client
	// answers "pong").
	ProtocolKeepAlive bool
	// InitTimeout is how long a socket may stay open without sending
	// connection_init before it is closed with CloseInitTimeout; 0 disables.
	InitTimeout time.Duration
	// WriteTimeout bounds the write of one message or close frame; a write
	// not done in time drops the connection (the client sees 1006). 0
	// means 10 s.
	WriteTimeout time.Duration
	// OnMessage, when set, is told of every message: sent true once
	// written, false when dropped (closing socket, failed write).
	OnMessage func(sent bool)
	// Logger, when set, gets one line (info) for each socket dropped by
	// WriteTimeout or by the missing pongs of PingInterval.
	Logger *slog.Logger

	writePool sync.Pool // write buffers shared by every socket

	mu           sync.Mutex
	conns        map[*Conn]struct{}
	shuttingDown bool
	drained      chan struct{} // closed when conns empties during Shutdown
}

// Handler guards next, the gqlgen handler, for websocket handshakes (any
// request with an Upgrade header): a disallowed Origin gets 403 and a
// handshake during Shutdown 503, before next's middleware runs.
func (i *Implementation) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "" {
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
		}
		next.ServeHTTP(w, r)
	})
}

func (i *Implementation) originAllowed(r *http.Request) bool {
	if i.CheckOrigin != nil {
		return i.CheckOrigin(r)
	}
	return sameOriginOrNone(r)
}

func (i *Implementation) writeTimeout() time.Duration {
	return cmp.Or(i.WriteTimeout, defaultWriteTimeout)
}

// accept upgrades the request, negotiating one of subprotocols, and
// starts the socket's pings and init timer. On an error the Upgrader has
// answered the request with an HTTP error.
func (i *Implementation) accept(w http.ResponseWriter, r *http.Request, subprotocols []string) (*Conn, error) {
	up := websocket.Upgrader{
		Subprotocols:    subprotocols,
		CheckOrigin:     i.originAllowed,
		ReadBufferSize:  cmp.Or(i.ReadBufferSize, defaultReadBufferSize),
		WriteBufferSize: i.WriteBufferSize,
		WriteBufferPool: &i.writePool,
	}
	ws, err := up.Upgrade(w, r, nil)
	if err != nil {
		return nil, err
	}
	c := &Conn{ws: ws, impl: i}
	if tc, ok := ws.NetConn().(*net.TCPConn); ok && i.SendBuffer > 0 {
		_ = tc.SetWriteBuffer(i.SendBuffer)
	}
	i.mu.Lock()
	if i.conns == nil {
		i.conns = make(map[*Conn]struct{})
	}
	i.conns[c] = struct{}{}
	down := i.shuttingDown
	i.mu.Unlock()

	// Any frame from the peer proves it is there.
	ws.SetPongHandler(func(string) error { c.alive(); return nil })
	ping := ws.PingHandler()
	ws.SetPingHandler(func(data string) error { c.alive(); return ping(data) })
	c.alive()
	c.mu.Lock()
	if i.InitTimeout > 0 {
		c.initTimer = time.AfterFunc(i.InitTimeout, func() {
			c.closeWith(CloseInitTimeout, "Connection initialisation timeout")
		})
	}
	if i.PingInterval > 0 {
		c.pingTimer = time.AfterFunc(i.PingInterval, c.ping)
	}
	c.mu.Unlock()
	if down {
		c.closeWith(CloseGoingAway, "server shutting down")
	}
	return c, nil
}

// Open is the number of sockets accepted and not yet ended.
func (i *Implementation) Open() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return len(i.conns)
}

// Shutdown refuses new handshakes (503), closes every open socket with
// 1001 (going away) and waits until each has ended, its operations with
// it. When ctx ends first, the remaining sockets are dropped without
// waiting and ctx's error is returned.
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
		c.closeWith(CloseGoingAway, "server shutting down")
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

// forget removes c from the open set that Shutdown waits on.
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

// connKey is the context key of the *Conn a socket's contexts carry.
type connKey struct{}

// CloseSocket closes the websocket that carries ctx (InitFunc's context
// or an operation's) with code and reason (cut to 123 bytes), without
// waiting: data writes stop at once, the close frame follows the message
// being written within WriteTimeout, and the connection is dropped when
// the peer answers or a second later; the socket's operations then end.
// It reports false when ctx belongs to no socket.
func CloseSocket(ctx context.Context, code int, reason string) bool {
	c, ok := ctx.Value(connKey{}).(*Conn)
	if ok {
		c.closeWith(code, reason)
	}
	return ok
}

// Conn is one accepted socket. gorilla allows one data writer at a time,
// so data writes are serialised here; control frames (pings, close) may
// be written concurrently with them.
type Conn struct {
	ws   *websocket.Conn
	impl *Implementation

	writeMu sync.Mutex // serialises data writes

	// closing is set once a close frame is on its way: no data follows it.
	closing atomic.Bool
	// closeMu is held while a close frame is written, for Close to wait on.
	closeMu sync.Mutex

	netClosed    atomic.Bool // set with the network connection's close
	netCloseOnce sync.Once

	acked   atomic.Bool // connection_ack was written: keepalive messages follow
	pinging atomic.Bool // a ping frame and keepalive message are being written

	mu        sync.Mutex
	initTimer *time.Timer // closes with 4408; stopped by connection_init
	pingTimer *time.Timer // sends the next ping; stopped with the connection
}

// initSeen stops the init timer: connection_init arrived.
func (c *Conn) initSeen() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.initTimer != nil {
		c.initTimer.Stop()
	}
}

// writeText writes one text message, the concatenation of parts (a
// payload shared by many sockets is not copied), within WriteTimeout
// unless the socket is closing. A write that fails or times out drops the
// network connection: after a partial frame no close frame can follow.
func (c *Conn) writeText(parts ...[]byte) error {
	if c.closing.Load() {
		c.impl.onMessage(false)
		return errClosing
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(c.impl.writeTimeout()))
	err := c.writeParts(parts)
	if err != nil {
		c.impl.onMessage(false)
		c.failed(err, "a message could not be written within the write timeout")
		return err
	}
	c.impl.onMessage(true)
	return nil
}

func (c *Conn) writeParts(parts [][]byte) error {
	w, err := c.ws.NextWriter(websocket.TextMessage)
	if err != nil {
		return err
	}
	for _, p := range parts {
		if _, err := w.Write(p); err != nil {
			_ = w.Close()
			return err
		}
	}
	return w.Close()
}

// failed drops the network connection after an I/O error, logging a
// timeout, once, unless the socket was closing anyway.
func (c *Conn) failed(err error, why string) {
	var ne net.Error
	// Once: the ping and a message may time out together.
	if errors.As(err, &ne) && ne.Timeout() && !c.closing.Load() && c.netClosed.CompareAndSwap(false, true) && c.impl.Logger != nil {
		c.impl.Logger.Info("websocket dropped", slog.String("reason", why),
			slog.String("remote", c.ws.RemoteAddr().String()), slog.String("subprotocol", c.ws.Subprotocol()))
	}
	c.closeNetwork()
}

func (i *Implementation) onMessage(sent bool) {
	if i.OnMessage != nil {
		i.OnMessage(sent)
	}
}

// closeWith starts closing the socket with code and reason unless a close
// frame was sent already: data writes stop at once; the close frame goes
// out in the background (see CloseSocket).
func (c *Conn) closeWith(code int, reason string) {
	if !c.closing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		if err := c.writeCloseFrame(code, reason); err != nil {
			c.closeNetwork()
			return
		}
		time.AfterFunc(closeGrace, c.closeNetwork)
	}()
}

// writeClose sends a close frame unless one was sent already.
func (c *Conn) writeClose(code int, reason string) {
	if c.closing.CompareAndSwap(false, true) {
		_ = c.writeCloseFrame(code, reason)
	}
}

func (c *Conn) writeCloseFrame(code int, reason string) error {
	c.initSeen() // the timer has nothing left to close
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	msg := websocket.FormatCloseMessage(code, closeReason(reason))
	return c.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(c.impl.writeTimeout()))
}

// Close drops the network connection after a close frame being written.
func (c *Conn) Close() error {
	c.closeMu.Lock()
	c.closeNetwork()
	c.closeMu.Unlock()
	return nil
}

// closeNetwork closes the network connection; safe to call more than once.
func (c *Conn) closeNetwork() {
	c.netCloseOnce.Do(func() {
		c.netClosed.Store(true)
		c.mu.Lock()
		for _, t := range []*time.Timer{c.initTimer, c.pingTimer} {
			if t != nil {
				t.Stop()
			}
		}
		c.mu.Unlock()
		_ = c.ws.Close()
	})
}

// alive moves the read deadline two ping intervals ahead.
func (c *Conn) alive() {
	if p := c.impl.PingInterval; p > 0 {
		_ = c.ws.SetReadDeadline(time.Now().Add(2 * p))
	}
}

// ping runs every PingInterval on a timer: a ping frame, which every
// websocket client answers, then, with ProtocolKeepAlive, the
// subprotocol's keepalive message. A ping while the last still waits is
// skipped.
func (c *Conn) ping() {
	if c.netClosed.Load() || c.closing.Load() {
		return
	}
	c.mu.Lock()
	if !c.netClosed.Load() { // else closeNetwork stopped the timer before this Reset
		c.pingTimer.Reset(c.impl.PingInterval)
	}
	c.mu.Unlock()
	if !c.pinging.CompareAndSwap(false, true) {
		return
	}
	defer c.pinging.Store(false)
	if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.impl.writeTimeout())); err != nil {
		c.failed(err, "a ping could not be written within the write timeout")
		return
	}
	if c.impl.ProtocolKeepAlive && c.acked.Load() {
		msg := keepAliveTransportWS
		if c.ws.Subprotocol() != ProtoTransportWS {
			msg = keepAliveGraphQLWS
		}
		_ = c.writeText(msg) // a failed write drops the socket
	}
}

// The keepalive messages of the two subprotocols.
var (
	keepAliveTransportWS = []byte(`{"type":"ping"}`)
	keepAliveGraphQLWS   = []byte(`{"type":"ka"}`)
)

// closeReason makes reason fit a close frame: valid UTF-8 (browsers fail
// a close frame that is not) of at most maxCloseReason bytes.
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
