package app_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"erp/app"
	"erp/app/apptest"
	"erp/app/config"
	"erp/graph/wsgorilla"
)

func TestWebsocketCloseCodes(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, func(c *config.Config) { c.InitTimeout = 300 * time.Millisecond })
	initMsg := func(token string) apptest.Message {
		return apptest.Message{Type: "connection_init", Payload: json.RawMessage(fmt.Sprintf(`{"Authorization": "Bearer %s"}`, token))}
	}
	tests := []struct {
		name   string
		protos []string
		// run drives the client until the server should close the socket.
		run  func(c *apptest.WS)
		want int
	}{
		{"silent after upgrade: init timeout", []string{apptest.ProtoTransportWS, apptest.ProtoLegacyWS}, func(*apptest.WS) {}, wsgorilla.CloseInitTimeout},
		{"bad token: refused without ack", []string{apptest.ProtoTransportWS, apptest.ProtoLegacyWS}, func(c *apptest.WS) {
			c.Send(initMsg("erp_wrong"))
		}, 4403},
		{"duplicate subscription id", []string{apptest.ProtoTransportWS, apptest.ProtoLegacyWS}, func(c *apptest.WS) {
			c.Init(s.Token)
			c.Subscribe("dup", apptest.FeedSubscription, nil)
			c.Subscribe("dup", apptest.FeedSubscription, nil)
		}, wsgorilla.CloseSubscriberExists},
		{"second connection_init", []string{apptest.ProtoTransportWS}, func(c *apptest.WS) {
			c.Init(s.Token)
			c.Send(initMsg(s.Token))
		}, wsgorilla.CloseTooManyInit},
		{"connection_init payload not an object", []string{apptest.ProtoTransportWS, apptest.ProtoLegacyWS}, func(c *apptest.WS) {
			c.Send(apptest.Message{Type: "connection_init", Payload: json.RawMessage(`"Bearer x"`)})
		}, wsgorilla.CloseBadRequest},
		{"subscribe before connection_init", []string{apptest.ProtoTransportWS}, func(c *apptest.WS) {
			c.Subscribe("early", apptest.FeedSubscription, nil)
		}, wsgorilla.CloseNotInitialised},
		{"start before connection_init", []string{apptest.ProtoLegacyWS}, func(c *apptest.WS) {
			c.Subscribe("early", apptest.FeedSubscription, nil)
		}, websocket.CloseProtocolError},
		{"malformed JSON before connection_init", []string{apptest.ProtoLegacyWS}, func(c *apptest.WS) {
			require.NoError(t, c.Conn.WriteMessage(websocket.TextMessage, []byte(`{"type":`)))
		}, websocket.CloseProtocolError},
		{"malformed JSON after the ack", []string{apptest.ProtoLegacyWS}, func(c *apptest.WS) {
			c.Init(s.Token)
			require.NoError(t, c.Conn.WriteMessage(websocket.TextMessage, []byte(`{"type":`)))
		}, websocket.CloseNormalClosure},
		{"message not valid UTF-8", []string{apptest.ProtoTransportWS, apptest.ProtoLegacyWS}, func(c *apptest.WS) {
			c.Init(s.Token)
			for _, kind := range []int{websocket.TextMessage, websocket.BinaryMessage} {
				msg := `{"id":"u","type":"` + map[string]string{apptest.ProtoTransportWS: "subscribe", apptest.ProtoLegacyWS: "start"}[c.Proto()] +
					`","payload":{"query":"mutation { createItem(input: {sku: \"WSU-` + "\xff" + `\", name: \"x\", unit: \"шт\"}) { id } }"}}`
				if c.Conn.WriteMessage(kind, []byte(msg)) != nil {
					return // closed after the first
				}
			}
		}, websocket.CloseInvalidFramePayloadData},
		{"message over 64 KiB", []string{apptest.ProtoTransportWS, apptest.ProtoLegacyWS}, func(c *apptest.WS) {
			c.Init(s.Token)
			c.Subscribe("big", "subscription { eventProcessed { id } } #"+strings.Repeat("x", app.WSReadLimit), nil)
		}, websocket.CloseMessageTooBig},
	}
	for _, tt := range tests {
		for _, proto := range tt.protos {
			t.Run(tt.name+"/"+proto, func(t *testing.T) {
				t.Parallel()
				c := apptest.DialWS(t, s, proto)
				tt.run(c)
				require.Equal(t, tt.want, c.CloseCode(5*time.Second, tt.want == 4403))
			})
		}
	}
}

// graphql-transport-ws lets a client ping before connection_init: the
// server answers pong and waits for the init.
func TestWebsocketPingBeforeInit(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	c := apptest.DialWS(t, s, apptest.ProtoTransportWS)
	c.Send(apptest.Message{Type: "ping", Payload: json.RawMessage(`{"n":1}`)})
	// Read skips pongs: read the frame itself.
	require.NoError(t, c.Conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	var m apptest.Message
	require.NoError(t, c.Conn.ReadJSON(&m))
	require.Equal(t, "pong", m.Type)
	require.JSONEq(t, `{"n":1}`, string(m.Payload))
	c.Init(s.Token)
	c.Subscribe("q", `{ __typename }`, nil)
	m, err := c.Read(5 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "next", m.Type, "the socket serves operations after the init")
}

// One socket runs at most MaxOperations operations at once: a subscribe
// past the cap gets an error for its id, the socket and the running
// operations carry on, and a freed slot takes a new operation.
func TestWebsocketOperationsPerSocketCapped(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	for _, proto := range []string{apptest.ProtoTransportWS, apptest.ProtoLegacyWS} {
		t.Run(proto, func(t *testing.T) {
			c := apptest.DialWS(t, s, proto)
			c.Init(s.Token)
			base := s.App.Feed().Subscribers()
			for i := range app.WSMaxOperations {
				c.Subscribe(fmt.Sprint(i), apptest.FeedSubscription, nil)
			}
			apptest.WaitFor(t, 10*time.Second, "every subscription", func() bool {
				return s.App.Feed().Subscribers() == base+app.WSMaxOperations
			})
			c.Subscribe("over", apptest.FeedSubscription, nil)
			m, err := c.Read(5 * time.Second)
			require.NoError(t, err)
			require.Equal(t, apptest.Message{ID: "over", Type: "error"}, apptest.Message{ID: m.ID, Type: m.Type})
			require.Contains(t, string(m.Payload), "TOO_MANY_OPERATIONS")
			require.Equal(t, base+app.WSMaxOperations, s.App.Feed().Subscribers(), "the refused one never ran")

			stop := map[string]string{apptest.ProtoTransportWS: "complete", apptest.ProtoLegacyWS: "stop"}[proto]
			c.Send(apptest.Message{ID: "0", Type: stop})
			apptest.WaitFor(t, 5*time.Second, "the slot freed", func() bool {
				return s.App.Feed().Subscribers() == base+app.WSMaxOperations-1
			})
			c.Subscribe("over", apptest.FeedSubscription, nil)
			apptest.WaitFor(t, 5*time.Second, "the new one running", func() bool {
				return s.App.Feed().Subscribers() == base+app.WSMaxOperations
			})
			require.NoError(t, c.Conn.Close())
			apptest.WaitFor(t, 5*time.Second, "the socket's subscriptions ended", func() bool {
				return s.App.Feed().Subscribers() == base
			})
		})
	}
}

// A subscription id may be used again once its operation ended; only a
// running one is a duplicate.
func TestWebsocketIDReusableAfterComplete(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	for _, proto := range []string{apptest.ProtoTransportWS, apptest.ProtoLegacyWS} {
		t.Run(proto, func(t *testing.T) {
			c := apptest.DialWS(t, s, proto)
			c.Init(s.Token)
			stop := map[string]string{apptest.ProtoTransportWS: "complete", apptest.ProtoLegacyWS: "stop"}[proto]
			filter := map[string]any{"filter": map[string]any{"entity": "sales_orders", "types": []string{"doc.created"}}}
			c.Subscribe("1", apptest.FeedSubscription, filter)
			c.Send(apptest.Message{ID: "1", Type: stop})
			if proto == apptest.ProtoLegacyWS {
				// graphql-ws answers stop with complete;
				// graphql-transport-ws sends nothing more.
				m, err := c.Read(5 * time.Second)
				require.NoError(t, err)
				require.Equal(t, "complete", m.Type)
			}
			apptest.WaitFor(t, 5*time.Second, "no subscription", func() bool { return s.App.Feed().Subscribers() == 0 })
			c.Subscribe("1", apptest.FeedSubscription, filter)
			apptest.WaitFor(t, 5*time.Second, "the subscription", func() bool { return s.App.Feed().Subscribers() == 1 })
			apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": proto})
			require.Equal(t, "doc.created", c.NextEvent("1").Type)
			require.NoError(t, c.Conn.Close())
			apptest.WaitFor(t, 5*time.Second, "no subscription", func() bool { return s.App.Feed().Subscribers() == 0 })
		})
	}
}

// A client may reuse an operation's id as soon as it sent complete for
// it, before the server's answer: the new operation runs with the id (no
// 4409), the stopped one ends without a message that would end the new
// one for the client, and a complete then stops the new one. Whatever
// the timing, nothing is left running.
func TestWebsocketIDReusedRightAfterCompleteRunsAndStops(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	filter := map[string]any{"filter": map[string]any{"entity": "sales_orders"}}
	// sync starts a query with id and reads up to its complete: the
	// socket reads in order, so the messages sent before it were taken.
	sync := func(c *apptest.WS, id string) []apptest.Message {
		c.Subscribe(id, `{ __typename }`, nil)
		var got []apptest.Message
		for {
			m, err := c.Read(5 * time.Second)
			require.NoError(t, err, "the socket stays open")
			if m.ID == id {
				if m.Type == "complete" {
					return got
				}
				continue
			}
			got = append(got, m)
		}
	}
	for i := range 20 {
		c := apptest.DialWS(t, s, apptest.ProtoTransportWS)
		c.Init(s.Token)
		c.Subscribe("1", apptest.FeedSubscription, filter)
		apptest.WaitFor(t, 5*time.Second, "the subscription", func() bool { return s.App.Feed().Subscribers() == 1 })
		c.Send(apptest.Message{ID: "1", Type: "complete"})
		c.Subscribe("1", apptest.FeedSubscription, filter)
		for _, m := range sync(c, fmt.Sprintf("q%d", i)) {
			// The first's complete, when it went out before the reuse.
			require.Equal(t, apptest.Message{ID: "1", Type: "complete"}, apptest.Message{ID: m.ID, Type: m.Type})
		}
		apptest.WaitFor(t, 5*time.Second, "the second subscription alone", func() bool { return s.App.Feed().Subscribers() == 1 })
		apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": fmt.Sprintf("reuse %d", i)})
		require.Equal(t, "doc.created", c.NextEvent("1").Type, "the second subscription runs as 1")
		c.Send(apptest.Message{ID: "1", Type: "complete"})
		apptest.WaitFor(t, 5*time.Second, "no subscription running", func() bool { return s.App.Feed().Subscribers() == 0 })
		require.NoError(t, c.Conn.Close())
	}
}

func TestWebsocketOriginCheck(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, func(c *config.Config) { c.AllowedOrigins = []string{"https://erp.example.com"} })
	host := strings.TrimPrefix(s.URL, "http://")
	tests := []struct {
		origin string
		ok     bool
	}{
		{"", true}, // not a browser
		{"http://" + host, true},
		{"https://erp.example.com", true},
		{"https://ERP.example.com:443", true},
		{"https://evil.example.com", false},
		{"http://erp.example.com", false}, // another scheme is another origin
		{"null", false},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.origin != "" {
			h.Set("Origin", tt.origin)
		}
		d := websocket.Dialer{Subprotocols: []string{apptest.ProtoTransportWS}, HandshakeTimeout: 5 * time.Second}
		conn, res, err := d.Dial(apptest.WSURL(s), h)
		if tt.ok {
			require.NoError(t, err, "origin %q", tt.origin)
			_ = res.Body.Close()
			_ = conn.Close()
			continue
		}
		require.ErrorIs(t, err, websocket.ErrBadHandshake, "origin %q", tt.origin)
		require.Equal(t, http.StatusForbidden, res.StatusCode, "origin %q", tt.origin)
		_ = res.Body.Close()
	}
	apptest.WaitFor(t, 5*time.Second, "no open socket", func() bool { return s.App.Websockets().Open() == 0 })
}

// socketGoroutines counts the goroutines serving websockets: the adapter's,
// gqlgen's websocket transport and the resolvers'.
func socketGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "WatchTokens") {
			continue // one per server, not per socket
		}
		if strings.Contains(g, "erp/graph/wsgorilla.") ||
			strings.Contains(g, "gqlgen/graphql/handler/transport.") ||
			strings.Contains(g, "erp/resolvers.") {
			count++
		}
	}
	return count
}

// freezeProxy forwards TCP to target until freeze; from then on it
// forwards nothing either way and keeps both connections open: a peer gone
// without a close frame (a dead NAT entry, a laptop lid shut).
type freezeProxy struct {
	ln     net.Listener
	frozen atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func newFreezeProxy(t *testing.T, target string) *freezeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &freezeProxy{ln: ln}
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				_ = client.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, client, server)
			p.mu.Unlock()
			go p.pipe(server, client)
			go p.pipe(client, server)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	return p
}

func (p *freezeProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil || p.frozen.Load() {
			return // frozen: stop reading, drop what came
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

// Not parallel: it counts the process's websocket goroutines.
func TestWebsocketHalfOpenSocketCleanedUp(t *testing.T) {
	// Long enough that the scheduling margin below (CI runs other
	// packages' tests beside this one) stays under one more interval.
	const interval = 400 * time.Millisecond
	s := apptest.New(t, func(c *config.Config) { c.KeepAlive = interval })
	for _, proto := range []string{apptest.ProtoTransportWS, apptest.ProtoLegacyWS} {
		t.Run(proto, func(t *testing.T) {
			apptest.WaitFor(t, 5*time.Second, "no websocket goroutines", func() bool { return socketGoroutines() == 0 })
			baseline := socketGoroutines()
			p := newFreezeProxy(t, strings.TrimPrefix(s.URL, "http://"))
			d := websocket.Dialer{Subprotocols: []string{proto}, HandshakeTimeout: 5 * time.Second}
			conn, res, err := d.Dial("ws://"+p.ln.Addr().String()+"/graphql", nil)
			require.NoError(t, err)
			_ = res.Body.Close()
			t.Cleanup(func() { _ = conn.Close() })
			c := apptest.NewWS(t, conn, proto)
			c.Init(s.Token)
			c.Subscribe("1", apptest.FeedSubscription, nil)
			apptest.WaitFor(t, 5*time.Second, "the subscription", func() bool { return s.App.Feed().Subscribers() == 1 })
			// Keep reading, which answers the server's pings, until the
			// proxy freezes; then this goroutine blocks until cleanup.
			go func() {
				for {
					if _, _, err := conn.ReadMessage(); err != nil {
						return
					}
				}
			}()
			time.Sleep(3 * interval) // the keepalive runs across the proxy
			require.Equal(t, 1, s.App.Websockets().Open(), "a live peer must not be dropped")

			p.frozen.Store(true)
			frozenAt := time.Now()
			apptest.WaitFor(t, 5*time.Second, "the resolver to end", func() bool { return s.App.Feed().Subscribers() == 0 })
			cancelled := time.Since(frozenAt)
			apptest.WaitFor(t, 5*time.Second, "websocket goroutines back to the baseline", func() bool { return socketGoroutines() <= baseline })
			cleaned := time.Since(frozenAt)
			t.Logf("%s: resolver ended %s and goroutines back to %d %s after the peer vanished (ping interval %s)",
				proto, cancelled.Round(time.Millisecond), baseline, cleaned.Round(time.Millisecond), interval)
			require.Zero(t, s.App.Websockets().Open())
			// Two intervals without a frame from the peer, plus scheduling:
			// less than the third interval a missed check would take.
			require.Less(t, cleaned, 2*interval+300*time.Millisecond)
		})
	}
}

// A socket lets go of what it registered, however it ends: its feed
// subscriptions and its place among the sockets the token watch would close.
// The close reason tells a revoked token's socket from one the client
// terminated, though both get 1000.
func TestWebsocketEndsLetGoOfTheirRegistrations(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	other := apptest.RoleToken(t, s, "watcher", "VIEWER")
	open := func(proto, token string) *apptest.WS {
		c := apptest.DialWS(t, s, proto)
		c.Init(token)
		c.Subscribe("1", apptest.FeedSubscription, nil)
		return c
	}
	byClient := open(apptest.ProtoTransportWS, s.Token)
	terminated := open(apptest.ProtoLegacyWS, s.Token)
	stopped := open(apptest.ProtoTransportWS, s.Token)
	revoked := open(apptest.ProtoLegacyWS, other)
	apptest.WaitFor(t, 5*time.Second, "4 subscriptions", func() bool { return s.App.Feed().Subscribers() == 4 })
	require.Equal(t, 4, s.App.WatchedSockets())

	// A stopped subscription ends its feed subscription; its socket stays.
	stopped.Send(map[string]any{"type": "complete", "id": "1"})
	apptest.WaitFor(t, 5*time.Second, "the stopped subscription released", func() bool { return s.App.Feed().Subscribers() == 3 })
	require.Equal(t, 4, s.App.WatchedSockets(), "a socket stays watched while open")

	require.NoError(t, byClient.Conn.Close())
	terminated.Send(map[string]any{"type": "connection_terminate"})
	_, code, reason := frames(t, terminated, 5*time.Second)
	require.Equal(t, websocket.CloseNormalClosure, code, "a socket the client terminated")
	require.Equal(t, "terminated", reason, "a socket the client terminated")
	toks := apptest.GQL[struct {
		Tokens []struct{ ID string } `json:"tokens"`
	}](t, s, `{ tokens(login: "watcher") { id } }`, nil)
	require.Len(t, toks.Tokens, 1)
	apptest.GQL[map[string]any](t, s, `mutation($id: ID!) { revokeToken(id: $id) { revokedAt } }`, map[string]any{"id": toks.Tokens[0].ID})
	_, code, reason = frames(t, revoked, 10*time.Second)
	require.Equal(t, websocket.CloseNormalClosure, code, "a revoked token's socket")
	require.Equal(t, "token revoked or expired", reason, "a revoked token's socket")

	apptest.WaitFor(t, 5*time.Second, "the ended sockets' subscriptions released", func() bool { return s.App.Feed().Subscribers() == 0 })
	apptest.WaitFor(t, 5*time.Second, "only the open socket watched", func() bool { return s.App.WatchedSockets() == 1 })
	require.NoError(t, stopped.Conn.Close())
	apptest.WaitFor(t, 5*time.Second, "no socket watched", func() bool { return s.App.WatchedSockets() == 0 })
}

func TestWebsocketShutdownClosesEverySocketWith1001(t *testing.T) {
	t.Parallel()
	const sockets = 50
	s := apptest.New(t, func(c *config.Config) { c.ShutdownTimeout = 5 * time.Second })
	clients := make([]*apptest.WS, sockets)
	for i := range clients {
		proto := []string{apptest.ProtoTransportWS, apptest.ProtoLegacyWS}[i%2]
		clients[i] = apptest.DialWS(t, s, proto)
		clients[i].Init(s.Token)
		clients[i].Subscribe(fmt.Sprint("s", i), apptest.FeedSubscription, nil)
	}
	apptest.WaitFor(t, 10*time.Second, "every subscription", func() bool { return s.App.Feed().Subscribers() == sockets })

	codes := make([]int, sockets)
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			_ = c.Conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			for {
				if _, _, err := c.Conn.ReadMessage(); err != nil {
					var ce *websocket.CloseError
					if errors.As(err, &ce) {
						codes[i] = ce.Code
					}
					return
				}
			}
		})
	}
	start := time.Now()
	require.NoError(t, s.Shutdown())
	took := time.Since(start)
	wg.Wait()
	t.Logf("shutdown with %d live subscriptions took %s", sockets, took.Round(time.Millisecond))
	require.Less(t, took, 5*time.Second, "shutdown must end within its deadline")
	for i, code := range codes {
		require.Equal(t, websocket.CloseGoingAway, code, "socket %d", i)
	}
	require.Zero(t, s.App.Websockets().Open())
	// The resolvers ended with their sockets, before the feed stops.
	apptest.WaitFor(t, 2*time.Second, "every resolver to end", func() bool { return s.App.Feed().Subscribers() == 0 })

	// No new socket after shutdown.
	d := websocket.Dialer{Subprotocols: []string{apptest.ProtoTransportWS}, HandshakeTimeout: time.Second}
	_, res, err := d.Dial(apptest.WSURL(s), nil)
	require.Error(t, err)
	if res != nil {
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
	}
}

// Each subprotocol gets its own keepalive message, and both get websocket
// ping frames.
func TestWebsocketKeepalivePerSubprotocol(t *testing.T) {
	t.Parallel()
	// The server drops a peer silent for two intervals: long enough that
	// this client, answering pings while CI runs other packages beside it,
	// is never that late.
	const interval = 400 * time.Millisecond
	s := apptest.New(t, func(c *config.Config) { c.KeepAlive = interval })
	for proto, want := range map[string]string{apptest.ProtoTransportWS: "ping", apptest.ProtoLegacyWS: "ka"} {
		t.Run(proto, func(t *testing.T) {
			c := apptest.DialWS(t, s, proto)
			var pings atomic.Int32
			c.Conn.SetPingHandler(func(data string) error {
				pings.Add(1)
				return c.Conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
			})
			c.Init(s.Token)
			seen := 0
			// Two of each arrive within about three intervals; the generous
			// deadline only keeps a busy machine from failing the test.
			for deadline := time.Now().Add(25 * interval); time.Now().Before(deadline) && (seen < 2 || pings.Load() < 2); {
				require.NoError(t, c.Conn.SetReadDeadline(deadline))
				var m apptest.Message
				if err := c.Conn.ReadJSON(&m); err != nil {
					var ne net.Error
					require.True(t, errors.As(err, &ne) && ne.Timeout(), "read: %v", err)
					break
				}
				if m.Type == want {
					seen++
				}
				if m.Type == "ping" {
					c.Send(apptest.Message{Type: "pong"})
				}
			}
			require.GreaterOrEqual(t, seen, 2, "%q messages", want)
			require.GreaterOrEqual(t, pings.Load(), int32(2), "ping frames")
		})
	}
}

// An idle socket with a live subscription is two goroutines on the server:
// its reader and its operation's, waiting on the feed. Closing the sockets
// ends those goroutines and their subscriptions. Not parallel: it counts
// the process's goroutines.
func TestWebsocketIdleSubscriptionRunsTwoGoroutines(t *testing.T) {
	s := apptest.New(t)
	warm := apptest.DialWS(t, s, apptest.ProtoTransportWS)
	warm.Init(s.Token)
	warm.Subscribe("1", apptest.FeedSubscription, nil)
	apptest.WaitFor(t, 5*time.Second, "the first subscription", func() bool { return s.App.Feed().Subscribers() == 1 })
	settled := func(bound int) func() bool {
		return func() bool { return runtime.NumGoroutine() <= bound }
	}
	time.Sleep(100 * time.Millisecond) // let the handshake's goroutines end
	before := runtime.NumGoroutine()

	const sockets = 40
	var socks []*apptest.WS
	for i := range sockets {
		proto := []string{apptest.ProtoTransportWS, apptest.ProtoLegacyWS}[i%2]
		c := apptest.DialWS(t, s, proto)
		c.Init(s.Token)
		c.Subscribe("1", apptest.FeedSubscription, map[string]any{"filter": salesOrdersCreated})
		socks = append(socks, c)
	}
	apptest.WaitFor(t, 5*time.Second, "every subscription", func() bool { return s.App.Feed().Subscribers() == sockets+1 })
	// A few goroutines of the process come and go (River, the pool).
	const slack = 8
	apptest.WaitFor(t, 5*time.Second, fmt.Sprintf("at most %d goroutines for %d sockets", 2*sockets+slack, sockets), settled(before+2*sockets+slack))
	t.Logf("%d idle subscribed sockets: %d goroutines more", sockets, runtime.NumGoroutine()-before)

	for _, c := range socks {
		require.NoError(t, c.Conn.Close())
	}
	apptest.WaitFor(t, 5*time.Second, "the subscriptions ended", func() bool { return s.App.Feed().Subscribers() == 1 })
	apptest.WaitFor(t, 5*time.Second, "the sockets' goroutines ended", settled(before+slack))
}
