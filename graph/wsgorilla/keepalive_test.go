package wsgorilla

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/gorilla/websocket"
)

// keepaliveServer serves sockets with pings every interval, on a 64 KiB
// send buffer unless configure changes impl; each socket's writer calls
// write until it fails. closed gets the time its reader failed (the
// keepalive's read deadline, or the network gone).
func keepaliveServer(t *testing.T, interval time.Duration, write func(*Conn) error, configure ...func(*Implementation)) (url string, closed <-chan time.Time) {
	t.Helper()
	impl := &Implementation{PingInterval: interval, SendBuffer: 64 << 10}
	for _, c := range configure {
		c(impl)
	}
	ch := make(chan time.Time, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wc, err := impl.Accept(w, r, transport.WebsocketAcceptOptions{Subprotocols: []string{"graphql-transport-ws"}})
		if err != nil {
			t.Errorf("accept: %v", err)
			return
		}
		c := wc.(*Conn)
		go func() {
			for write(c) == nil {
			}
		}()
		for {
			if _, _, err := c.NextReader(); err != nil {
				ch <- time.Now()
				_ = c.Close()
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http"), ch
}

// readEvery reads size bytes from raw every interval, from a goroutine
// that ends with the test.
func readEvery(t *testing.T, raw net.Conn, size int, every time.Duration) {
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		buf := make([]byte, size)
		for {
			select {
			case <-done:
				return
			case <-time.After(every):
			}
			if _, err := io.ReadFull(raw, buf); err != nil {
				return
			}
		}
	}()
}

// dialRaw opens a socket to url and returns its TCP connection, which the
// test reads (or not) itself: it never answers a ping.
func dialRaw(t *testing.T, url string) net.Conn {
	t.Helper()
	var raw net.Conn
	d := websocket.Dialer{
		Subprotocols:     []string{"graphql-transport-ws"},
		HandshakeTimeout: 5 * time.Second,
		NetDial: func(network, addr string) (net.Conn, error) {
			c, err := net.Dial(network, addr)
			raw = c
			return c, err
		},
	}
	_, res, err := d.Dial(url, nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	_ = res.Body.Close()
	t.Cleanup(func() { _ = raw.Close() })
	return raw
}

// A client that reads nothing while a live feed trickles small messages to
// it is taken for gone after two ping intervals. Its kernel takes the
// messages and keeps its receive window open (it grows its buffer for
// them, up to megabytes), so the window's edge moves with each message
// though the client reads nothing: that is no sign of reading while no
// data waits for the window.
func TestKeepaliveClosesAPeerThatReadsNothingOfATrickle(t *testing.T) {
	t.Parallel()
	const interval = 200 * time.Millisecond
	msg := []byte(`{"type":"next","id":"1","payload":{"data":{"eventProcessed":{"cursor":"` + strings.Repeat("c", 230) + `"}}}}`)
	url, closed := keepaliveServer(t, interval, func(c *Conn) error {
		time.Sleep(20 * time.Millisecond) // about 15 KB/s
		return c.writeText(false, msg)
	})
	dialRaw(t, url) // never read
	start := time.Now()
	select {
	case at := <-closed:
		t.Logf("closed %s after the handshake (ping interval %s)", at.Sub(start).Round(time.Millisecond), interval)
	case <-time.After(10 * interval):
		t.Fatalf("a client that reads nothing is still open after %d ping intervals", 10)
	}
}

// A client that reads a slow stream in bursts, never two ping intervals
// apart, keeps its socket though it answers no ping: each burst shows as
// its receive window moving on. That shows at the next ping only, up to
// an interval after the burst, and the read deadline must not pass
// before the ping that sees the next burst.
func TestKeepaliveKeepsAPeerReadingInBursts(t *testing.T) {
	t.Parallel()
	const interval = 200 * time.Millisecond
	msg := []byte(`"` + strings.Repeat("x", 16<<10) + `"`)
	url, closed := keepaliveServer(t, interval, func(c *Conn) error { return c.writeText(false, msg) })
	raw := dialRaw(t, url)
	// Each burst reads more than the client's buffer holds, so its window
	// opens at each: Linux opens a window only by a sixteenth of the
	// buffer (autotuned to megabytes for this reader) and by at least the
	// MSS (64 KiB on loopback).
	_ = raw.(*net.TCPConn).SetReadBuffer(64 << 10)
	readEvery(t, raw, 256<<10, 5*interval/4)
	start := time.Now()
	select {
	case at := <-closed:
		t.Fatalf("closed %s after the handshake, reading every %s (ping interval %s)",
			at.Sub(start).Round(time.Millisecond), 5*interval/4, interval)
	case <-time.After(25 * interval):
	}
}

// A client reading slowly keeps its socket though one write waits longer
// than WriteTimeout: the kernel lets a writer on only once a third of the
// send buffer is free (170 KB of the 512 KiB a 256 KiB SO_SNDBUF
// reserves), which a client reading 80 KB/s takes 2 s to free. Its receive
// window moving on, every time it has read half its small buffer, moves
// the write's deadline on.
func TestWriteWaitingForASlowReaderIsNotTimedOut(t *testing.T) {
	t.Parallel()
	const interval = 400 * time.Millisecond
	msg := []byte(`"` + strings.Repeat("x", 16<<10) + `"`)
	url, closed := keepaliveServer(t, interval, func(c *Conn) error { return c.writeText(false, msg) },
		func(i *Implementation) { i.SendBuffer, i.WriteTimeout = 256<<10, time.Second })
	raw := dialRaw(t, url)
	_ = raw.(*net.TCPConn).SetReadBuffer(32 << 10)
	readEvery(t, raw, 4<<10, 50*time.Millisecond) // 80 KB/s
	start := time.Now()
	select {
	case at := <-closed:
		t.Fatalf("closed %s after the handshake while the client read 80 KB/s", at.Sub(start).Round(time.Millisecond))
	case <-time.After(6 * time.Second):
	}
}

// A reading seen within the current millisecond, or a moment ago, is that
// old, never weeks (the clock's lowest bit against the stored one's).
func TestLastReadIsWhenItWasSeen(t *testing.T) {
	var c Conn
	if !c.lastRead().IsZero() {
		t.Fatal("a peer never seen reading has a last read")
	}
	for range 50 {
		c.readSeen.Store(uint32(time.Since(readEpoch).Milliseconds()) | 1)
		if age := time.Since(c.lastRead()); age < -2*time.Millisecond || age > time.Second {
			t.Fatalf("seen just now, last read %s ago", age)
		}
		time.Sleep(time.Millisecond / 2)
	}
}

// A socket dropped because a write waited WriteTimeout on a peer that
// reads nothing is logged with why, for the operator the client's 1006
// does not reach.
func TestWriteTimeoutDropIsLogged(t *testing.T) {
	t.Parallel()
	logger, logged := testLogger()
	msg := []byte(`"` + strings.Repeat("x", 16<<10) + `"`)
	url, closed := keepaliveServer(t, 0, func(c *Conn) error { return c.writeText(false, msg) },
		func(i *Implementation) { i.WriteTimeout, i.Logger = 300*time.Millisecond, logger })
	dialRaw(t, url) // never read
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("a write to a peer that reads nothing did not time out")
	}
	if got := logged(); !strings.Contains(got, `msg="websocket dropped: peer gone" reason="a write waited the write timeout while the peer read nothing"`) {
		t.Fatalf("log: %q", got)
	}
}

// testLogger is a text logger and what it wrote so far.
func testLogger() (*slog.Logger, func() string) {
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil))
	return logger, func() string {
		mu.Lock()
		defer mu.Unlock()
		return logs.String()
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// A socket dropped because its ping waited WriteTimeout on a peer that
// reads nothing, between data messages, is logged as a data write's
// timeout is: the ping now waits its turn there and may be the write
// that times out.
func TestPingWriteTimeoutDropIsLogged(t *testing.T) {
	t.Parallel()
	logger, logged := testLogger()
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	var filled sync.Once
	// The writer fills the socket's buffers, then writes nothing: the
	// ping at the first interval is the write that waits.
	url, closed := keepaliveServer(t, time.Second, func(c *Conn) error {
		filled.Do(func() {
			time.Sleep(200 * time.Millisecond) // the client's buffer set
			chunk := make([]byte, 64<<10)
			for {
				_ = c.net.raw.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
				if _, err := c.net.raw.Write(chunk); err != nil {
					break
				}
			}
			for {
				_ = c.net.raw.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
				if _, err := c.net.raw.Write(chunk[:2]); err != nil {
					break
				}
			}
		})
		<-done
		return io.EOF
	}, func(i *Implementation) { i.WriteTimeout, i.Logger = 300*time.Millisecond, logger })
	raw := dialRaw(t, url) // never read
	// A fixed receive buffer, which the kernel does not grow for the data
	// arriving: the fill stays full.
	_ = raw.(*net.TCPConn).SetReadBuffer(32 << 10)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("a ping to a peer that reads nothing did not time out")
	}
	if got := logged(); !strings.Contains(got, `msg="websocket dropped: peer gone" reason="a write waited the write timeout while the peer read nothing"`) {
		t.Fatalf("log: %q", got)
	}
}
