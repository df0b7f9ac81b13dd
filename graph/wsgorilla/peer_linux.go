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
// Linux 4.1 and 6.2 added them, an older kernel reports 0 for either),
// and whether data of ours waits for that window (waiting:
// tcpi_notsent_bytes, Linux 4.6). It moves when the peer's program reads:
// data arriving moves the acknowledgement ahead and shrinks the window by
// as much. But the kernel of a peer whose program reads nothing keeps its
// window open to small segments arriving now and then, growing its buffer
// for them up to net.ipv4.tcp_rmem's maximum (megabytes), and the edge
// moves with each; only while data waits does the window fill, and then
// it moves only as the program reads. c may be TLS over TCP. False when c
// is no socket.
func receiveEdge(c net.Conn) (edge uint64, waiting, ok bool) {
	if u, ok := c.(interface{ NetConn() net.Conn }); ok { // *tls.Conn
		c = u.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, false, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, false, false
	}
	var info *unix.TCPInfo
	var infoErr error
	if err := raw.Control(func(fd uintptr) {
		info, infoErr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || infoErr != nil {
		return 0, false, false
	}
	return info.Bytes_acked + uint64(info.Snd_wnd), info.Notsent_bytes > 0, true
}
