// Package natstest gives a test its own NATS server with JetStream,
// in-process (github.com/nats-io/nats-server/v2), storing in the test's
// temporary directory on a loopback port:
//
//	srv := natstest.New(t)
//	cfg.NatsURL = srv.URL
//	js := srv.JetStream(t) // a client, for the test's assertions
//	srv.Stop(); srv.Start() // an outage: same port, same stored streams
//	srv.Stop(); srv.SetNKeys(pub); srv.Start() // and new credentials
//
// Everything stops at the test's cleanup.
package natstest

import (
	"net"
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
