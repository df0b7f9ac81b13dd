package wsgorilla

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/gorilla/websocket"
)

// keepaliveServer serves sockets with pings every interval; each socket's
// writer calls write until it fails. closed gets the time its reader
// failed (the keepalive's read deadline, or the network gone).
func keepaliveServer(t *testing.T, interval time.Duration, write func(*Conn) error) (url string, closed <-chan time.Time) {
	t.Helper()
	impl := &Implementation{PingInterval: interval, SendBuffer: 64 << 10}
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
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		buf := make([]byte, 256<<10)
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * interval / 4):
			}
			if _, err := io.ReadFull(raw, buf); err != nil {
				return
			}
		}
	}()
	start := time.Now()
	select {
	case at := <-closed:
		t.Fatalf("closed %s after the handshake, reading every %s (ping interval %s)",
			at.Sub(start).Round(time.Millisecond), 5*interval/4, interval)
	case <-time.After(25 * interval):
	}
}
