//go:build linux

package sse_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"erp/graph/sse"
)

// A stream's connection gets SendBuffer as its kernel send buffer (Linux
// reports twice what was set), so that a client that stops reading pins
// no more than a websocket's; without ConnContext it keeps the kernel's.
func TestStreamConnectionSendBufferIsCapped(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name        string
		connContext bool
	}{{"capped", true}, {"without ConnContext", false}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			streams := &sse.Streams{SendBuffer: 64 << 10}
			got := make(chan int, 1)
			srv := httptest.NewUnstartedServer(streams.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got <- sendBuffer(t, r)
			})))
			if tt.connContext {
				srv.Config.ConnContext = sse.ConnContext
			}
			srv.Start()
			t.Cleanup(srv.Close)
			code, _ := post(t, srv.URL)
			require.Equal(t, http.StatusOK, code)
			if tt.connContext {
				require.Equal(t, 2*64<<10, <-got)
			} else {
				require.Zero(t, <-got, "the handler cannot reach the connection")
			}
		})
	}
}

// sendBuffer is SO_SNDBUF of r's connection as ConnContext keeps it; 0
// when it is not there.
func sendBuffer(t *testing.T, r *http.Request) int {
	c, ok := r.Context().Value(sse.ConnKey).(*net.TCPConn)
	if !ok {
		return 0
	}
	raw, err := c.SyscallConn()
	require.NoError(t, err)
	var n int
	var serr error
	require.NoError(t, raw.Control(func(fd uintptr) { n, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF) }))
	require.NoError(t, serr)
	return n
}
