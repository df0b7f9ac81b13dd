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
// no more than a websocket's.
func TestStreamConnectionSendBufferIsCapped(t *testing.T) {
	t.Parallel()
	streams := &sse.Streams{SendBuffer: 64 << 10}
	got := make(chan int, 1)
	srv := httptest.NewUnstartedServer(streams.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := r.Context().Value(sse.ConnKey).(*net.TCPConn)
		if !ok {
			got <- 0
			return
		}
		raw, err := c.SyscallConn()
		require.NoError(t, err)
		var n int
		var serr error
		require.NoError(t, raw.Control(func(fd uintptr) { n, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF) }))
		require.NoError(t, serr)
		got <- n
	})))
	srv.Config.ConnContext = sse.ConnContext
	srv.Start()
	t.Cleanup(srv.Close)
	code, _ := post(t, srv.URL)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, 2*64<<10, <-got)
}
