package apptest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// SSE is one GraphQL over SSE stream (graphql-sse, distinct connections
// mode) of a test: its events arrive on Events, which is closed when the
// server ends the response.
type SSE struct {
	// Status and Header are the response's.
	Status int
	Header http.Header
	// Body is the whole body of a response that is not a stream (401,
	// 429).
	Body   []byte
	Events <-chan SSEEvent
	// Pings counts the keepalive comments (": ping") read so far.
	Pings  atomic.Int64
	cancel context.CancelFunc
	done   chan struct{}
}

// SSEEvent is one event of a stream: Name "next" with Data, or
// "complete".
type SSEEvent struct {
	Name string
	Data Response
}

// OpenSSE posts query with vars and token ("" for none) to /graphql with
// Accept: text/event-stream and returns the stream; Close (also at the
// test's cleanup) hangs up.
func OpenSSE(t testing.TB, s *Server, token, query string, vars map[string]any) *SSE {
	t.Helper()
	body, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/graphql", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req) //nolint:bodyclose // closed below, or by the reader at the end of the stream
	if err != nil {
		cancel()
		require.NoError(t, err)
	}
	events := make(chan SSEEvent, 64)
	st := &SSE{Status: res.StatusCode, Header: res.Header, Events: events, cancel: cancel, done: make(chan struct{})}
	t.Cleanup(st.Close)
	if !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		st.Body, _ = io.ReadAll(res.Body)
		_ = res.Body.Close()
		close(events)
		close(st.done)
		return st
	}
	go func() {
		defer close(st.done)
		defer close(events)
		defer func() { _ = res.Body.Close() }()
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(nil, 1<<20)
		var ev SSEEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == ": ping":
				st.Pings.Add(1)
			case strings.HasPrefix(line, "event: "):
				ev.Name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev.Data)
			case line == "" && ev.Name != "":
				events <- ev
				ev = SSEEvent{}
			}
		}
	}()
	return st
}

// Next returns the next event, failing the test when none comes within
// timeout; ok is false when the stream ended.
func (st *SSE) Next(t testing.TB, timeout time.Duration) (ev SSEEvent, ok bool) {
	t.Helper()
	select {
	case ev, ok = <-st.Events:
		return ev, ok
	case <-time.After(timeout):
		require.FailNow(t, "no SSE event in time", "waited %s", timeout)
		return SSEEvent{}, false
	}
}

// Close hangs up and waits for the reader to stop.
func (st *SSE) Close() {
	st.cancel()
	<-st.done
}
