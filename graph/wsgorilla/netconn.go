package wsgorilla

import (
	"bufio"
	"encoding/binary"
	"net"
	"net/http"
	"sync"
	"time"
)

// netConn is a socket's network connection as gorilla's Conn writes it. A
// whole text frame written while the connection holds (hold, armed by the
// socket's data writer) stays in memory, and goes out with the next data
// frame, in one system call. A writer with several messages ready for one
// socket (a burst the socket is behind on, a catch-up from the journal) so
// writes them with one call rather than one each: on a busy feed that call
// is most of the server's CPU, and the receiving client is woken once for
// them.
//
// Every Write but the handshake's response is one whole frame, header
// first: gorilla writes a frame with one call unless it is handed a part
// too large for its write buffer, which Conn.writeParts never does; a
// Write that is not one frame is written as it is, in order. Pings and
// pongs go out alone, under their own deadline, and leave the held frames
// held; a close frame takes them out before it. All writes come from
// gorilla, under its write lock, so they are never concurrent; mu guards
// the fields against the data writer's holdNext and releaseHeld and is
// never held through I/O. Reads do not pass here (forGorilla).
type netConn struct {
	raw net.Conn

	mu   sync.Mutex
	hold bool // the next data frame is held, if it is a whole text frame
	// readUntil is a floor under the write deadlines while the peer reads
	// (extendWrite): seconds after readEpoch, 0 for none. gorilla sets
	// its message's deadline again for every frame of it.
	readUntil uint32
	// closeSent is set once a close frame is being written: its deadline
	// is its own (closeGrace for a peer taken for stalled, or at
	// shutdown), never the floor of a reading seen before.
	closeSent bool
	held      *[]byte // frames held, oldest first, from heldBuffers; nil when none
	deadline  int64   // the write deadline gorilla set last (Unix ns, 0: none), applied at the write
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

// tcpConn also inherits TCPConn's unexported writeBuffers, through which
// net.Buffers would write straight to the socket, past n: gorilla uses
// net.Buffers only for a part too large for its write buffer, which
// Conn.writeParts never hands it (TestLargeMessagesAmongHeldOnesOnTCP).
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

// The first byte of the frames netConn tells apart.
const (
	finText  = 0x81 // a text message in one frame
	opClose  = 0x8
	opIsCtrl = 0x8 // bit of the opcodes of control frames
)

// isFrame reports whether p is exactly one frame as a server writes it
// (unmasked), header included.
func isFrame(p []byte) bool {
	if len(p) < 2 || p[1]&0x80 != 0 {
		return false
	}
	size, header := int(p[1]&0x7f), 2
	switch size {
	case 126:
		if len(p) < 4 {
			return false
		}
		size, header = int(binary.BigEndian.Uint16(p[2:])), 4
	case 127:
		if len(p) < 10 {
			return false
		}
		n := binary.BigEndian.Uint64(p[2:])
		if n > uint64(len(p)) {
			return false
		}
		size, header = int(n), 10
	}
	return header+size == len(p)
}

// holdNext makes the next data frame wait for the one after it, if it is a
// whole text frame; releaseHold takes that back if no frame was written.
// The socket's data writer calls both, under Conn.writeMu.
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

// releaseHeld drops the frames held, if any: a writer's turn ended with
// them unwritten, because their operation stopped meanwhile.
func (n *netConn) releaseHeld() {
	n.mu.Lock()
	held := n.held
	n.held = nil
	n.mu.Unlock()
	putHeld(held)
}

// Write writes the frame p, after the frames held unless p is a ping or
// pong, or holds it (holdNext).
func (n *netConn) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n.mu.Lock()
	if isFrame(p) && p[0]&0x0f == opClose {
		n.closeSent = true
	}
	deadline := n.deadlineLocked()
	if !isFrame(p) {
		// Not the one frame gorilla is expected to hand over (the
		// handshake's response, or a change in gorilla): written as it
		// is, in order.
		held := n.held
		n.held = nil
		n.mu.Unlock()
		return n.write(held, p, deadline)
	}
	op := p[0] & 0x0f
	if op&opIsCtrl != 0 && op != opClose {
		n.mu.Unlock()
		return n.write(nil, p, deadline)
	}
	if op&opIsCtrl == 0 && n.hold {
		n.hold = false // one frame for each holdNext
		size := len(p)
		if n.held != nil {
			size += len(*n.held)
		}
		if p[0] == finText && size <= maxHeld {
			if n.held == nil {
				n.held = heldBuffers.Get().(*[]byte)
			}
			*n.held = append(*n.held, p...)
			n.mu.Unlock()
			return len(p), nil
		}
	}
	held := n.held
	n.held = nil
	n.mu.Unlock()
	return n.write(held, p, deadline)
}

// write writes the frames held, then p, in one call, by deadline.
func (n *netConn) write(held *[]byte, p []byte, deadline int64) (int, error) {
	t := time.Time{}
	if deadline != 0 {
		t = time.Unix(0, deadline)
	}
	if err := n.raw.SetWriteDeadline(t); err != nil {
		putHeld(held)
		return 0, err
	}
	if held == nil {
		return n.raw.Write(p)
	}
	defer putHeld(held)
	*held = append(*held, p...)
	w, err := n.raw.Write(*held)
	// What gorilla counts is what went out of p: the held frames it took
	// as written already.
	return max(0, w-(len(*held)-len(p))), err
}

func putHeld(held *[]byte) {
	if held != nil {
		*held = (*held)[:0]
		heldBuffers.Put(held)
	}
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

// extendWrite moves the deadlines of the write in progress, if any, and of
// the writes until t on to t (rounded up to a second): the peer reads, and
// a write waits for its reading to free the send buffer.
func (n *netConn) extendWrite(t time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.readUntil = uint32((t.Sub(readEpoch) + time.Second - 1) / time.Second)
	if d := n.deadlineLocked(); d != 0 {
		_ = n.raw.SetWriteDeadline(time.Unix(0, d))
	}
}

// deadlineLocked is the deadline of the next write: gorilla's, or the
// floor extendWrite set when that is later, but for a close frame. Under
// mu.
func (n *netConn) deadlineLocked() int64 {
	d := n.deadline
	if d != 0 && n.readUntil != 0 && !n.closeSent {
		d = max(d, readEpoch.Add(time.Duration(n.readUntil)*time.Second).UnixNano())
	}
	return d
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
