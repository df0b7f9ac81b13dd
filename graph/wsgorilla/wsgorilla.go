// Package wsgorilla plugs github.com/gorilla/websocket into gqlgen's
// websocket transport (transport.WebsocketImplementation), which otherwise
// uses coder/websocket. Both GraphQL subprotocols run over it unchanged:
// gqlgen speaks them, this package only moves frames.
package wsgorilla

import (
	"errors"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/gorilla/websocket"
)

// writeWait bounds one frame write (data or close), so a peer that stopped
// reading cannot hold a writer forever.
const writeWait = 10 * time.Second

// Implementation accepts websockets with gorilla's Upgrader.
type Implementation struct {
	// CheckOrigin decides whether a browser's Origin may open a socket; nil
	// keeps gorilla's default, which refuses cross-origin requests.
	CheckOrigin func(r *http.Request) bool
	// ReadBufferSize and WriteBufferSize are the I/O buffer sizes in bytes;
	// 0 means gorilla's default (4096).
	ReadBufferSize, WriteBufferSize int
}

var _ transport.WebsocketImplementation = Implementation{}

// Accept implements transport.WebsocketImplementation: it upgrades the
// request, negotiating one of the GraphQL subprotocols gqlgen offers.
func (i Implementation) Accept(w http.ResponseWriter, r *http.Request, opts transport.WebsocketAcceptOptions) (transport.WebsocketConn, error) {
	up := websocket.Upgrader{
		Subprotocols:    slices.Clone(opts.Subprotocols),
		CheckOrigin:     i.CheckOrigin,
		ReadBufferSize:  i.ReadBufferSize,
		WriteBufferSize: i.WriteBufferSize,
	}
	conn, err := up.Upgrade(w, r, opts.ResponseHeader)
	if err != nil {
		// Upgrade has already answered the request with an HTTP error.
		return nil, err
	}
	return &Conn{ws: conn}, nil
}

// Conn is one accepted socket. gorilla allows one concurrent writer; gqlgen
// writes from several goroutines (results, keepalives, close), so writes
// are serialised here.
type Conn struct {
	ws      *websocket.Conn
	writeMu sync.Mutex
}

var (
	_ transport.WebsocketConn          = (*Conn)(nil)
	_ transport.WebsocketReadLimiter   = (*Conn)(nil)
	_ transport.WebsocketReadDeadliner = (*Conn)(nil)
)

// NextReader returns the next data message; a normal close by the peer is
// transport.ErrWebsocketClosed, as gqlgen expects.
func (c *Conn) NextReader() (int, io.Reader, error) {
	mt, r, err := c.ws.NextReader()
	if err != nil {
		var ce *websocket.CloseError
		if errors.As(err, &ce) && (ce.Code == websocket.CloseNormalClosure || ce.Code == websocket.CloseNoStatusReceived) {
			return mt, nil, transport.ErrWebsocketClosed
		}
		return mt, nil, err
	}
	return mt, r, nil
}

// WriteJSON writes v as one text message.
func (c *Conn) WriteJSON(v any) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(writeWait))
	return c.ws.WriteJSON(v)
}

// WriteClose sends a close frame with code and reason (at most 123 bytes,
// as the protocol allows; longer reasons are cut).
func (c *Conn) WriteClose(code int, reason string) error {
	if len(reason) > 123 {
		reason = reason[:123]
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	return c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(writeWait))
}

// Subprotocol is the negotiated subprotocol ("" when none).
func (c *Conn) Subprotocol() string { return c.ws.Subprotocol() }

// Close closes the network connection without a close frame.
func (c *Conn) Close() error { return c.ws.Close() }

// SetReadLimit caps an incoming message at limit bytes; a larger one
// closes the socket with 1009.
func (c *Conn) SetReadLimit(limit int64) { c.ws.SetReadLimit(limit) }

// SetReadDeadline fails reads after t; gqlgen uses it to detect a peer that
// stopped answering pings.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.ws.SetReadDeadline(t) }
