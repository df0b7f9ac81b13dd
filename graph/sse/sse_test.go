package sse_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"erp/graph/sse"
)

// post opens a stream and returns its status and body, closed at the
// test's cleanup.
func post(t *testing.T, url string) (int, io.Reader) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(`{"query":"subscription { x }"}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.Body.Close() })
	return res.StatusCode, res.Body
}

// A client that stops reading is cut once a write cannot complete within
// WriteTimeout: the stream's context ends, so its operation ends, and the
// handler returns instead of waiting on the peer.
func TestStreamOfAReaderThatStoppedIsCut(t *testing.T) {
	t.Parallel()
	streams := &sse.Streams{WriteTimeout: 200 * time.Millisecond}
	returned := make(chan error, 1)
	srv := httptest.NewServer(streams.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := []byte("event: next\ndata: " + strings.Repeat("x", 64<<10) + "\n\n")
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				break
			}
			w.(http.Flusher).Flush()
		}
		returned <- r.Context().Err()
	})))
	t.Cleanup(srv.Close)

	status, _ := post(t, srv.URL) // and never read
	require.Equal(t, http.StatusOK, status)
	select {
	case err := <-returned:
		require.ErrorIs(t, err, context.Canceled, "the stream's context ended")
	case <-time.After(30 * time.Second):
		t.Fatal("the handler still writes to a client that stopped reading")
	}
	require.Eventually(t, func() bool { return streams.Open() == 0 }, 5*time.Second, 10*time.Millisecond)
}

// End sends the reason as a last next event and drops the complete that
// the operation writes as it ends: a cut stream is not a finished one.
// Shutdown cuts every stream and refuses new ones.
func TestEndAndShutdown(t *testing.T) {
	t.Parallel()
	streams := &sse.Streams{WriteTimeout: time.Second}
	started := make(chan context.Context, 2)
	srv := httptest.NewServer(streams.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, ":\n\n")
		w.(http.Flusher).Flush()
		started <- r.Context()
		<-r.Context().Done()
		_, _ = io.WriteString(w, "event: complete\n\n")
	})))
	t.Cleanup(srv.Close)
	rest := func(body io.Reader) string {
		b, err := io.ReadAll(bufio.NewReader(body))
		require.NoError(t, err)
		return string(b)
	}

	_, res := post(t, srv.URL)
	ctx := <-started
	require.True(t, sse.In(ctx))
	require.True(t, sse.End(ctx, &gqlerror.Error{Message: "token revoked or expired", Extensions: map[string]any{"code": "UNAUTHENTICATED"}}))
	require.Equal(t, ":\n\nevent: next\ndata: {\"errors\":[{\"message\":\"token revoked or expired\",\"extensions\":{\"code\":\"UNAUTHENTICATED\"}}],\"data\":null}\n\n", rest(res))
	require.False(t, sse.End(t.Context(), &gqlerror.Error{Message: "x"}), "not a stream's")

	_, res = post(t, srv.URL)
	<-started
	require.Equal(t, 1, streams.Shutdown(&gqlerror.Error{Message: "server shutting down"}))
	body := rest(res)
	require.Contains(t, body, "server shutting down")
	require.NotContains(t, body, "complete")
	status, refused := post(t, srv.URL)
	require.Equal(t, http.StatusServiceUnavailable, status, "no new stream once shutting down")
	require.Contains(t, rest(refused), `"code":"UNAVAILABLE"`, "an error with its code, as every error")
}
