//go:build linux

package wsgorilla

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// receiveEdge is the right edge of the peer's receive window, in bytes of
// the connection's stream: what its TCP acknowledged of ours plus the
// window it last advertised (TCP_INFO's tcpi_bytes_acked + tcpi_snd_wnd;
// Linux 4.1 and 6.2 added them, an older kernel reports 0 for either). It
// moves when the peer's program reads: data arriving moves the
// acknowledgement ahead and shrinks the window by as much. c may be TLS
// over TCP. False when c is no socket.
func receiveEdge(c net.Conn) (uint64, bool) {
	if u, ok := c.(interface{ NetConn() net.Conn }); ok { // *tls.Conn
		c = u.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var info *unix.TCPInfo
	var infoErr error
	if err := raw.Control(func(fd uintptr) {
		info, infoErr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || infoErr != nil {
		return 0, false
	}
	return info.Bytes_acked + uint64(info.Snd_wnd), true
}
