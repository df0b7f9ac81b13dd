package wsgorilla

import (
	"bytes"
	"net"
	"testing"
	"time"
)

// recordingConn is the network under a netConn: it keeps each Write it
// got and the write deadline in force at it.
type recordingConn struct {
	net.Conn
	writes    [][]byte
	deadlines []time.Time
	deadline  time.Time
}

func (c *recordingConn) Write(p []byte) (int, error) {
	c.writes = append(c.writes, bytes.Clone(p))
	c.deadlines = append(c.deadlines, c.deadline)
	return len(p), nil
}

func (c *recordingConn) SetWriteDeadline(t time.Time) error {
	c.deadline = t
	return nil
}

// Frames as gorilla writes them from a server: one Write per frame,
// header first, unmasked.
var (
	textFrame1   = []byte("\x81\x03one")
	textFrame2   = []byte("\x81\x03two")
	textFrame3   = []byte("\x81\x05three")
	firstOfTwo   = []byte("\x01\x03par") // a text message's first frame, more to come
	pingFrame    = []byte("\x89\x00")
	pongFrame    = []byte("\x8a\x00")
	closeFrame   = []byte("\x88\x02\x03\xe8")
	deadlineBase = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
)

func TestHeldFramesGoOutWithTheNextWrite(t *testing.T) {
	t.Parallel()
	rec := &recordingConn{}
	n := &netConn{raw: rec}

	_ = n.SetWriteDeadline(deadlineBase)
	n.holdNext()
	mustWrite(t, n, textFrame1)
	n.releaseHold()
	_ = n.SetWriteDeadline(deadlineBase.Add(time.Second))
	n.holdNext()
	mustWrite(t, n, textFrame2)
	n.releaseHold()
	if len(rec.writes) != 0 {
		t.Fatalf("held frames reached the network: %q", rec.writes)
	}
	_ = n.SetWriteDeadline(deadlineBase.Add(2 * time.Second))
	mustWrite(t, n, textFrame3)

	want := [][]byte{join(textFrame1, textFrame2, textFrame3)}
	if !equalWrites(rec.writes, want) {
		t.Fatalf("writes %q, want %q", rec.writes, want)
	}
	if got := rec.deadlines[0]; !got.Equal(deadlineBase.Add(2 * time.Second)) {
		t.Errorf("the write went out under deadline %v, want the last one set", got)
	}
	if n.held != nil {
		t.Error("the buffer of held frames was kept after they went out")
	}
}

// A ping or pong goes out at once, even while a hold is armed, alone: the
// frames held stay held, and the hold stays for the data frame it was
// armed for. A close frame takes the frames held out before it.
func TestControlFramesAreNotHeld(t *testing.T) {
	t.Parallel()
	rec := &recordingConn{}
	n := &netConn{raw: rec}

	n.holdNext()
	mustWrite(t, n, textFrame1)
	n.releaseHold()
	n.holdNext()
	mustWrite(t, n, pingFrame)
	mustWrite(t, n, pongFrame)
	mustWrite(t, n, textFrame2)
	n.releaseHold()
	mustWrite(t, n, closeFrame)

	want := [][]byte{pingFrame, pongFrame, join(textFrame1, textFrame2, closeFrame)}
	if !equalWrites(rec.writes, want) {
		t.Fatalf("writes %q, want %q", rec.writes, want)
	}
}

// A message gorilla splits into frames is never held, nor is anything once
// the hold is released or past maxHeld.
func TestWhatIsNotHeld(t *testing.T) {
	t.Parallel()
	rec := &recordingConn{}
	n := &netConn{raw: rec}

	n.holdNext()
	mustWrite(t, n, firstOfTwo)
	mustWrite(t, n, textFrame1) // the hold was the first frame's
	n.releaseHold()
	if want := [][]byte{firstOfTwo, textFrame1}; !equalWrites(rec.writes, want) {
		t.Fatalf("writes %q, want %q", rec.writes, want)
	}

	rec.writes = nil
	big := textFrame(make([]byte, maxHeld-100))
	n.holdNext()
	mustWrite(t, n, big)
	n.releaseHold()
	n.holdNext()
	mustWrite(t, n, big) // would pass maxHeld: goes out, with the first
	n.releaseHold()
	if len(rec.writes) != 1 || len(rec.writes[0]) != 2*len(big) {
		t.Fatalf("past maxHeld: %d writes, want one of both frames", len(rec.writes))
	}
}

// releaseHeld drops what is held: nothing of it reaches the network.
func TestReleaseHeldDropsTheHeldFrames(t *testing.T) {
	t.Parallel()
	rec := &recordingConn{}
	n := &netConn{raw: rec}

	n.releaseHeld() // nothing held
	n.holdNext()
	mustWrite(t, n, textFrame1)
	n.releaseHold()
	n.releaseHeld()
	mustWrite(t, n, textFrame2)
	if want := [][]byte{textFrame2}; !equalWrites(rec.writes, want) {
		t.Fatalf("writes %q, want %q", rec.writes, want)
	}
}

func mustWrite(t *testing.T, n *netConn, p []byte) {
	t.Helper()
	if w, err := n.Write(p); err != nil || w != len(p) {
		t.Fatalf("Write(%q) = %d, %v", p, w, err)
	}
}

func join(ps ...[]byte) []byte { return bytes.Join(ps, nil) }

// textFrame is a whole text message of payload (at most 64 KiB) as a
// server frames it.
func textFrame(payload []byte) []byte {
	b := []byte{0x81, 126, byte(len(payload) >> 8), byte(len(payload))}
	return append(b, payload...)
}

// Anything but one frame (the handshake's response; a frame's payload
// written apart from its header) is written as it is, with the frames
// held before it, and never held.
func TestWhatIsNotAFrameIsWrittenThrough(t *testing.T) {
	t.Parallel()
	rec := &recordingConn{}
	n := &netConn{raw: rec}

	handshake := []byte("HTTP/1.1 101 Switching Protocols\r\n\r\n")
	mustWrite(t, n, handshake)
	n.holdNext()
	mustWrite(t, n, textFrame1)
	n.releaseHold()
	header, payload := textFrame(make([]byte, 300))[:4], textFrame(make([]byte, 300))[4:]
	payload[0] = 0x81 // what a payload may start with
	n.holdNext()
	mustWrite(t, n, header)
	mustWrite(t, n, payload)
	n.releaseHold()

	want := [][]byte{handshake, join(textFrame1, header), payload}
	if !equalWrites(rec.writes, want) {
		t.Fatalf("writes %q, want %q", rec.writes, want)
	}
}

func equalWrites(got, want [][]byte) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			return false
		}
	}
	return true
}

// A close frame goes out under its own deadline, not under the floor a
// reading seen before set for data writes: a socket closed for a stalled
// peer, or at shutdown, gets closeGrace for it, not WriteTimeout more.
func TestCloseFrameIsNotExtendedByReading(t *testing.T) {
	t.Parallel()
	rec := &recordingConn{}
	n := &netConn{raw: rec}
	now := time.Now()
	n.extendWrite(now.Add(10 * time.Second)) // the peer was seen reading

	_ = n.SetWriteDeadline(now.Add(time.Second))
	mustWrite(t, n, textFrame1)
	if got := rec.deadlines[0]; got.Before(now.Add(10 * time.Second)) {
		t.Fatalf("a data frame went out under %v, before the floor", got.Sub(now))
	}
	_ = n.SetWriteDeadline(now.Add(time.Second))
	mustWrite(t, n, closeFrame)
	if got := rec.deadlines[1]; !got.Equal(now.Add(time.Second)) {
		t.Fatalf("the close frame went out under %v, want its own 1s", got.Sub(now).Round(time.Millisecond))
	}
	n.extendWrite(now.Add(20 * time.Second)) // a look while it is written
	if !rec.deadline.Equal(now.Add(time.Second)) {
		t.Fatalf("a reading seen moved the close frame's deadline to %v", rec.deadline.Sub(now).Round(time.Millisecond))
	}
}
