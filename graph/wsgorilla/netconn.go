package wsgorilla

import (
	"bufio"
	"net"
	"net/http"
	"sync"
	"time"
)

// netConn is a socket's network connection as gorilla's Conn writes it. A
// whole text frame written while the connection holds (hold, armed by the
// socket's data writer) stays in memory, and goes out with the next write
// that is not held, in one system call. A writer with several messages
// ready for one socket (a burst the socket is behind on, a catch-up from
// the journal) so writes them with one call rather than one each: on a
// busy feed that call is most of the server's CPU, and the receiving
// client is woken once for them.
//
// Control frames (ping, pong, close) are never held, and take the held
// frames out with them, in order. A write holds the connection's lock
// while it waits on the network, as gorilla's own lock does. Reads do not
// pass here (forGorilla).
type netConn struct {
	raw net.Conn

	// mu is held through a write to raw, so that bytes leave in the
	// order they came, and guards the fields below.
	mu       sync.Mutex
	hold     bool    // the next whole text frame is held
	held     *[]byte // frames held, oldest first, from heldBuffers; nil when none
	deadline int64   // the write deadline gorilla set last (Unix ns, 0: none), applied at the write
}

// forGorilla returns the net.Conn gorilla's Conn gets: raw for reads and
// everything else, n for writes and write deadlines. For a TCP
// connection, the wrapper's Read is a jump to the TCPConn's, not a call:
// an idle socket waits in that read, and one more frame there would
// double its goroutine's stack (the runtime keeps it at 4 KiB only while
// less than a quarter of 8 is in use).
func (n *netConn) forGorilla() net.Conn {
	if tc, ok := n.raw.(*net.TCPConn); ok {
		return &tcpConn{TCPConn: tc, n: n}
	}
	return &anyConn{Conn: n.raw, n: n}
}

type tcpConn struct {
	*net.TCPConn
	n *netConn
}

func (c *tcpConn) Write(p []byte) (int, error)        { return c.n.Write(p) }
func (c *tcpConn) SetWriteDeadline(t time.Time) error { return c.n.SetWriteDeadline(t) }
func (c *tcpConn) SetDeadline(t time.Time) error      { return c.n.SetDeadline(t) }

type anyConn struct {
	net.Conn
	n *netConn
}

func (c *anyConn) Write(p []byte) (int, error)        { return c.n.Write(p) }
func (c *anyConn) SetWriteDeadline(t time.Time) error { return c.n.SetWriteDeadline(t) }
func (c *anyConn) SetDeadline(t time.Time) error      { return c.n.SetDeadline(t) }

// heldBuffers keeps the buffers of held frames between bursts: an idle
// socket has none.
var heldBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// maxHeld bounds the bytes held for one socket: past it, the frames go out.
const maxHeld = 64 << 10

// wholeTextFrame reports whether p starts a server's text frame that is a
// whole message (FIN set, no continuation): a message gorilla writes in
// several frames is never held.
func wholeTextFrame(p []byte) bool {
	const fin, text = 0x80, 0x1
	return len(p) > 0 && p[0] == fin|text
}

// holdNext makes the next whole text frame wait for the write after it;
// releaseHold takes that back if the frame was not written. The socket's
// data writer calls both, under Conn.writeMu.
func (n *netConn) holdNext() {
	n.mu.Lock()
	n.hold = true
	n.mu.Unlock()
}

func (n *netConn) releaseHold() {
	n.mu.Lock()
	n.hold = false
	n.mu.Unlock()
}

// Write writes p, or holds it (holdNext).
func (n *netConn) Write(p []byte) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.hold && wholeTextFrame(p) && (n.held == nil || len(*n.held)+len(p) <= maxHeld) {
		n.hold = false
		if n.held == nil {
			n.held = heldBuffers.Get().(*[]byte)
		}
		*n.held = append(*n.held, p...)
		return len(p), nil
	}
	return n.writeLocked(p)
}

// flush writes the frames held, if any.
func (n *netConn) flush() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, err := n.writeLocked(nil)
	return err
}

// writeLocked writes the frames held, then p, in one call.
func (n *netConn) writeLocked(p []byte) (int, error) {
	held := n.held
	if held == nil && len(p) == 0 {
		return 0, nil
	}
	var deadline time.Time
	if n.deadline != 0 {
		deadline = time.Unix(0, n.deadline)
	}
	if err := n.raw.SetWriteDeadline(deadline); err != nil {
		return 0, err
	}
	if held == nil {
		return n.raw.Write(p)
	}
	n.held = nil
	defer heldBuffers.Put(held)
	*held = append(*held, p...)
	w, err := n.raw.Write(*held)
	// What gorilla counts is what went out of p: the held frames it took
	// as written already.
	w = max(0, w-(len(*held)-len(p)))
	*held = (*held)[:0]
	return w, err
}

// SetWriteDeadline sets the deadline of the next write that reaches the
// network.
func (n *netConn) SetWriteDeadline(t time.Time) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.deadline = 0
	if !t.IsZero() {
		n.deadline = t.UnixNano()
	}
	return nil
}

// SetDeadline sets the read deadline and the next write's.
func (n *netConn) SetDeadline(t time.Time) error {
	_ = n.SetWriteDeadline(t)
	return n.raw.SetReadDeadline(t)
}

// hijacker gives gorilla's Upgrader the hijacked connection, with its
// writes through conn.
type hijacker struct {
	http.ResponseWriter
	conn *netConn
}

// Hijack implements http.Hijacker.
func (h hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	h.conn.raw = c
	return h.conn.forGorilla(), brw, nil
}
