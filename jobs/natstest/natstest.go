// Package natstest gives a test its own NATS server with JetStream,
// in-process (github.com/nats-io/nats-server/v2), storing in the test's
// temporary directory on a loopback port:
//
//	srv := natstest.New(t)
//	cfg.NatsURL = srv.URL
//	js := srv.JetStream(t) // a client, for the test's assertions
//	srv.Stop(); srv.Start() // an outage: same port, same stored streams
//	srv.Stop(); srv.SetNKeys(pub); srv.Start() // and new credentials
//	slow := srv.Delaying(t, "$JS.API.STREAM.CREATE.", time.Second) // slow.URL: slow creations
//	p := srv.Proxy(t); p.HoldReplies.Store(true) // p.URL: acknowledgements withheld
//
// Everything stops at the test's cleanup.
package natstest

import (
	"bytes"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// Server is one test's NATS server.
type Server struct {
	// URL is nats://127.0.0.1:<port>, the same across Stop and Start.
	URL  string
	t    testing.TB
	opts *server.Options
	srv  *server.Server
}

// New starts a NATS server with JetStream for t.
func New(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, opts: &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true}}
	s.Start()
	s.opts.Port = s.srv.Addr().(*net.TCPAddr).Port
	s.URL = s.srv.ClientURL()
	t.Cleanup(s.Stop)
	return s
}

// Start starts the server (again, after Stop) on its port with the
// streams it stored.
func (s *Server) Start() {
	s.t.Helper()
	srv, err := server.NewServer(s.opts)
	require.NoError(s.t, err)
	srv.Start()
	require.True(s.t, srv.ReadyForConnections(10*time.Second), "nats server not ready")
	s.srv = srv
}

// SetNKeys makes the server admit only clients with these NKey public
// keys (none: anyone), from its next Start.
func (s *Server) SetNKeys(pubs ...string) {
	s.opts.Nkeys = nil
	for _, p := range pubs {
		s.opts.Nkeys = append(s.opts.Nkeys, &server.NkeyUser{Nkey: p})
	}
}

// Stop stops the server; its clients see it gone until Start.
func (s *Server) Stop() {
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
		s.srv = nil
	}
}

// JetStream is a client of the server for the test's own assertions,
// closed at cleanup; it reconnects across Stop and Start.
func (s *Server) JetStream(t testing.TB) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(s.URL, nats.MaxReconnects(-1))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// Proxy is a TCP proxy to a Server, closed at the test's cleanup, that
// plays a NATS answering late or not at all (Server.Proxy, Server.Delaying).
type Proxy struct {
	// URL is the proxy's nats:// URL.
	URL string
	// HoldReplies, while true, keeps what the server sends from reaching
	// the clients: a publish reaches the stream, and its acknowledgement
	// waits.
	HoldReplies atomic.Bool
	marker      []byte
	delay       time.Duration
	held        atomic.Int32
}

// Held is how many client writes the proxy has begun to hold (Delaying).
func (p *Proxy) Held() int { return int(p.held.Load()) }

// Proxy starts a proxy that passes everything on until HoldReplies is set.
func (s *Server) Proxy(t testing.TB) *Proxy { return s.Delaying(t, "", 0) }

// Delaying starts a proxy that holds every client write containing
// marker (e.g. "$JS.API.STREAM.CREATE.") for d before the server gets it,
// as from a NATS too busy to answer at once; "" holds none.
func (s *Server) Delaying(t testing.TB, marker string, d time.Duration) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &Proxy{URL: "nats://" + ln.Addr().String(), marker: []byte(marker), delay: d}
	var (
		mu     sync.Mutex
		conns  []net.Conn
		closed bool
	)
	track := func(c ...net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		conns = append(conns, c...)
		return !closed
	}
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		closed = true
		for _, c := range conns {
			_ = c.Close()
		}
	})
	upstream := s.srv.Addr().String()
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", upstream)
			if err != nil {
				_ = client.Close()
				continue
			}
			if !track(client, server) {
				_, _ = client.Close(), server.Close()
				return
			}
			go func() {
				defer func() { _, _ = client.Close(), server.Close() }()
				p.forward(server, client, p.holdReplies)
			}()
			go func() {
				defer func() { _, _ = client.Close(), server.Close() }()
				p.forward(client, server, p.delayMarked())
			}()
		}
	}()
	return p
}

// forward copies from to to until either fails, calling hold(b) before it
// passes b on.
func (p *Proxy) forward(from, to net.Conn, hold func(b []byte)) {
	buf := make([]byte, 64<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			hold(buf[:n])
			if _, err := to.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) holdReplies([]byte) {
	for p.HoldReplies.Load() {
		time.Sleep(10 * time.Millisecond)
	}
}

// delayMarked is one connection's hold of client writes: it keeps the end
// of the last write, so that a marker split across two is seen.
func (p *Proxy) delayMarked() func(b []byte) {
	var tail []byte
	return func(b []byte) {
		if len(p.marker) == 0 {
			return
		}
		seen := append(tail, b...)
		if bytes.Contains(seen, p.marker) {
			p.held.Add(1)
			time.Sleep(p.delay)
		}
		tail = slices.Clone(seen[max(0, len(seen)-len(p.marker)+1):])
	}
}
