package wsgorilla

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"
)

// writerGoroutines returns the ids of the goroutines running runWriter,
// writing or parked.
func writerGoroutines() map[string]bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	ids := map[string]bool{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "wsgorilla.runWriter(") {
			id, _, _ := strings.Cut(strings.TrimPrefix(g, "goroutine "), " ")
			ids[id] = true
		}
	}
	return ids
}

// The writer goroutine that wrote a socket's responses stays parked and
// writes the next socket's, rather than a goroutine starting for every
// burst; parked writers end once idle. Not parallel: it counts the
// package's writer goroutines.
func TestWritersAreReusedAndEndWhenIdle(t *testing.T) {
	waitFor(t, "the writers of earlier tests to end", func() bool { return len(writerGoroutines()) == 0 })
	b := setupTransport(t, false, func(b *testBundle) { b.seen = make(chan seenResponse, 64) })
	var subs []queuedSubscription
	var conns []*websocket.Conn
	for range 2 {
		conn := b.dial(t, ProtoTransportWS)
		subscribe(t, conn, ProtoTransportWS, "1", "subscription { queued }")
		subs = append(subs, receive(t, b.queued, "the queued subscription"))
		conns = append(conns, conn)
	}
	var writers map[string]bool
	for round := range 5 {
		for i, sub := range subs {
			want := fmt.Sprintf("round %d, socket %d", round, i)
			sub.stream.put(want)
			sub.wake()
			m := readMessage(t, conns[i])
			require.Equal(t, "next", m.Type)
			require.JSONEq(t, `{"data":{"queued":"`+want+`"}}`, string(m.Payload))
			if writers == nil {
				// The writers that ran the starts and the first response.
				waitFor(t, "a parked writer", func() bool { return len(writerGoroutines()) > 0 })
				writers = writerGoroutines()
				continue
			}
			require.Subset(t, slices.Collect(maps.Keys(writers)), slices.Collect(maps.Keys(writerGoroutines())),
				"%s: written by a parked writer, not a new goroutine", want)
		}
	}
	waitFor(t, "the parked writers to end", func() bool { return len(writerGoroutines()) == 0 })
}
