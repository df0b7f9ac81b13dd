package wsgorilla

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// idlePusher is a socket's pusher with a writer due and nothing ready:
// its write returns at once.
func idlePusher() *pusher { return &pusher{writing: true} }

// heldPusher is a pusher whose write takes until release is closed: its
// one ready operation's stream blocks in Advance.
func heldPusher(release <-chan struct{}) *pusher {
	op := &operation{s: &socket{conn: &Conn{}}, stream: heldStream(release), queued: true}
	return &pusher{writing: true, ready: []*operation{op}}
}

type heldStream <-chan struct{}

func (s heldStream) Advance(context.Context) bool { <-s; return false }

// writersAre polls the pool until it has alive writer goroutines, parked
// of them parked, failing the test after 5 s.
func writersAre(t *testing.T, wp *writerPool, alive, parked int) {
	t.Helper()
	waitFor(t, "writers", func() bool {
		a, p := wp.counts()
		return a == alive && p == parked
	})
}

// A writer that finished a socket's frames writes the next socket's: no
// goroutine starts for a burst while one is parked.
func TestWriterPoolReusesAParkedWriter(t *testing.T) {
	t.Parallel()
	var wp writerPool
	t.Cleanup(wp.close)
	first := idlePusher()
	wp.start(first)
	writersAre(t, &wp, 1, 1)
	for range 3 {
		p := idlePusher()
		wp.start(p)
		waitFor(t, "the pusher's frames written", func() bool { return written(p) })
		alive, _ := wp.counts()
		require.Equal(t, 1, alive, "writer goroutines once the parked one wrote")
		writersAre(t, &wp, 1, 1)
	}
}

// written reports whether p's writer is done.
func written(p *pusher) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.writing
}

// Writers are reused most recently parked first, so a load that needs
// one writer keeps one: those a burst left parked end after idleTimeout
// even while the pool is in use.
func TestWriterPoolShrinksToTheLoad(t *testing.T) {
	t.Parallel()
	wp := writerPool{idleTimeout: 200 * time.Millisecond}
	t.Cleanup(wp.close)
	release := make(chan struct{})
	for range 3 {
		wp.start(heldPusher(release))
	}
	writersAre(t, &wp, 3, 0)
	close(release)
	writersAre(t, &wp, 3, 3)

	deadline := time.Now().Add(5 * time.Second)
	for {
		if alive, _ := wp.counts(); alive == 1 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the burst's writers outlived a one-writer load")
		wp.start(idlePusher())
		time.Sleep(20 * time.Millisecond)
	}
}

// Parked writers end once idle, and all of them at close; a writer
// started after close writes and ends.
func TestWriterPoolEnds(t *testing.T) {
	t.Parallel()
	t.Run("idle", func(t *testing.T) {
		t.Parallel()
		wp := writerPool{idleTimeout: 50 * time.Millisecond}
		wp.start(idlePusher())
		writersAre(t, &wp, 0, 0)
	})
	t.Run("close", func(t *testing.T) {
		t.Parallel()
		var wp writerPool
		release := make(chan struct{})
		wp.start(heldPusher(release))
		wp.start(idlePusher()) // the first writer is busy: a second one
		writersAre(t, &wp, 2, 1)
		wp.close()
		writersAre(t, &wp, 1, 0)
		close(release)
		writersAre(t, &wp, 0, 0)

		p := idlePusher()
		wp.start(p)
		writersAre(t, &wp, 0, 0)
		require.True(t, written(p), "a writer started after close wrote")
	})
}
