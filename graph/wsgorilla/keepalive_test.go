package wsgorilla

import (
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
