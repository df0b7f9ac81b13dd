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
//
// Everything stops at the test's cleanup.
package natstest

import (
	"bytes"
	"io"
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

// Delay is a proxy to a Server that holds some of its clients' writes
// (Delaying).
type Delay struct {
	// URL is the proxy's nats:// URL.
	URL  string
	held atomic.Int32
}

// Held is how many writes the proxy has begun to hold.
func (p *Delay) Held() int { return int(p.held.Load()) }

// Delaying starts a proxy to the server, closed at t's cleanup: a client
// connected to its URL has every write that contains marker (e.g.
// "$JS.API.STREAM.CREATE.") held for d before the server gets it, as from
// a NATS too busy to answer at once.
func (s *Server) Delaying(t testing.TB, marker string, d time.Duration) *Delay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &Delay{URL: "nats://" + ln.Addr().String()}
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
	m := []byte(marker)
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
			hangUp := func() { _, _ = client.Close(), server.Close() }
			go func() {
				_, _ = io.Copy(client, server)
				hangUp()
			}()
			go func() {
				defer hangUp()
				buf := make([]byte, 64<<10)
				var tail []byte // the end of the last read, for a marker split across two
				for {
					n, err := client.Read(buf)
					if n > 0 {
						seen := append(tail, buf[:n]...)
						if bytes.Contains(seen, m) {
							p.held.Add(1)
							time.Sleep(d)
						}
						tail = slices.Clone(seen[max(0, len(seen)-len(m)+1):])
						if _, err := server.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return p
}
