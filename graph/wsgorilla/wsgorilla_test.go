package wsgorilla

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"
)

// testMessage has the shape of gqlgen's messages (see envelope).
type testMessage struct {
	Payload json.RawMessage `json:"payload,omitempty"`
	ID      string          `json:"id,omitempty"`
	Type    string          `json:"type"`
}

// TestHandlerReturnsRequestGoroutineAtAck: once a socket is acknowledged,
// the handshake's net/http handler has returned (net/http has let go of
// the connection), while the socket keeps working on its own goroutine
// with a live context, and Shutdown still closes it with 1001.
func TestHandlerReturnsRequestGoroutineAtAck(t *testing.T) {
	t.Parallel()
	impl := &Implementation{}
	returned := make(chan struct{}) // the outer handler returned to net/http
	served := make(chan struct{})   // the socket's goroutine ended
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(served)
		c, err := impl.Accept(w, r, transport.WebsocketAcceptOptions{Subprotocols: []string{"graphql-transport-ws"}})
		if err != nil {
			t.Errorf("accept: %v", err)
			return
		}
		defer c.Close()
		if _, _, err := c.NextReader(); err != nil { // connection_init
			t.Errorf("read connection_init: %v", err)
			return
		}
		select {
		case <-returned:
			t.Error("the handler returned before connection_ack")
		default:
		}
		if err := c.WriteJSON(testMessage{Type: "connection_ack"}); err != nil {
			t.Errorf("write connection_ack: %v", err)
			return
		}
		select {
		case <-returned:
		case <-time.After(5 * time.Second):
			t.Error("the handler did not return after connection_ack")
			return
		}
		if err := r.Context().Err(); err != nil {
			t.Errorf("the socket's context ended with the request: %v", err)
		}
		// Writes after the hijack must not reach net/http's writer.
		if _, err := w.Write([]byte("x")); !errors.Is(err, http.ErrHijacked) {
			t.Errorf("write after hijack: got %v, want http.ErrHijacked", err)
		}
		if err := c.WriteJSON(testMessage{Type: "next", ID: "1", Payload: json.RawMessage(`{}`)}); err != nil {
			t.Errorf("write next: %v", err)
		}
		for {
			if _, _, err := c.NextReader(); err != nil {
				return
			}
		}
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		impl.Handler(inner).ServeHTTP(w, r)
		if r.Header.Get("Upgrade") != "" {
			close(returned)
		}
	}))
	t.Cleanup(srv.Close)

	d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: 5 * time.Second}
	conn, res, err := d.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	require.NoError(t, err)
	res.Body.Close()
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	require.NoError(t, conn.WriteMessage(websocket.TextMessage, []byte(`{"type":"connection_init"}`)))
	for _, want := range []string{"connection_ack", "next"} {
		var m testMessage
		require.NoError(t, conn.ReadJSON(&m))
		require.Equal(t, want, m.Type)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- impl.Shutdown(ctx) }()
	_, _, err = conn.ReadMessage()
	var ce *websocket.CloseError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, websocket.CloseGoingAway, ce.Code)
	_ = conn.Close()
	require.NoError(t, <-shut)
	select {
	case <-served:
	case <-time.After(5 * time.Second):
		t.Fatal("the socket's goroutine did not end")
	}
	require.Zero(t, impl.Open())
}

// TestHandlerReturnsWhenNoSocket: a handshake that fails before the
// upgrade is answered as before, on the request's goroutine's watch.
func TestHandlerReturnsWhenNoSocket(t *testing.T) {
	t.Parallel()
	impl := &Implementation{}
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := impl.Accept(w, r, transport.WebsocketAcceptOptions{Subprotocols: []string{"graphql-transport-ws"}}); err == nil {
			t.Error("accept of a request that is no websocket handshake succeeded")
		}
	})
	srv := httptest.NewServer(impl.Handler(inner))
	t.Cleanup(srv.Close)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	req.Header.Set("Upgrade", "websocket") // no Connection or key: gorilla refuses
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
}

// TestHandlerPanics: a handler that panics before the socket is
// acknowledged panics on the request's goroutine, where net/http recovers
// it; one that panics afterwards has its socket dropped. Neither takes the
// process down.
func TestHandlerPanics(t *testing.T) {
	t.Parallel()
	for _, afterAck := range []bool{false, true} {
		impl := &Implementation{}
		inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !afterAck {
				panic(http.ErrAbortHandler) // net/http drops the connection quietly
			}
			c, err := impl.Accept(w, r, transport.WebsocketAcceptOptions{Subprotocols: []string{"graphql-transport-ws"}})
			if err != nil {
				t.Errorf("accept: %v", err)
				return
			}
			if err := c.WriteJSON(testMessage{Type: "connection_ack"}); err != nil {
				t.Errorf("write connection_ack: %v", err)
			}
			panic(http.ErrAbortHandler)
		})
		srv := httptest.NewServer(impl.Handler(inner))
		d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: 5 * time.Second}
		conn, res, err := d.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
		if !afterAck {
			require.Error(t, err, "a handshake whose handler panicked")
			srv.Close()
			continue
		}
		require.NoError(t, err)
		res.Body.Close()
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		var m testMessage
		require.NoError(t, conn.ReadJSON(&m))
		require.Equal(t, "connection_ack", m.Type)
		_, _, err = conn.ReadMessage()
		require.Error(t, err, "the socket of a handler that panicked must be dropped")
		var ne interface{ Timeout() bool }
		require.False(t, errors.As(err, &ne) && ne.Timeout(), "dropped, not timed out: %v", err)
		conn.Close()
		waitFor(t, "the socket to leave the open set", func() bool { return impl.Open() == 0 })
		srv.Close()
	}
}

// A close reason quotes the client's operation id (4409): whatever the id,
// the reason is valid UTF-8 within a close frame's 123 bytes.
func TestCloseReasonIsValidUTF8WithinTheFrame(t *testing.T) {
	long := "Subscriber for x" + strings.Repeat("é", 100) + " already exists"
	for _, reason := range []string{"terminated", long, "Subscriber for \xff\xfe already exists"} {
		got := closeReason(reason)
		require.True(t, utf8.ValidString(got), "%q", got)
		require.LessOrEqual(t, len(got), maxCloseReason)
		require.True(t, strings.HasPrefix(reason, got) || !utf8.ValidString(reason), "%q cut from %q", got, reason)
	}
	require.Equal(t, "terminated", closeReason("terminated"))
	require.Len(t, closeReason(long), 122, "cut before the é that would straddle byte 123")
}

// A close reason quotes the client's message type (4400): whatever the
// type, however much its escapes grow it, the quote stays within
// maxQuotedType bytes and a cut one is marked, so the reason's own words
// are never cut off.
func TestQuotedTypeStaysShort(t *testing.T) {
	for _, typ := range []string{
		strings.Repeat("x", 10000),
		strings.Repeat("\x00", 10000),
		strings.Repeat("\u2028", 1000),
		strings.Repeat("é", 1000),
		"\xff\xfe" + strings.Repeat("y", 100),
	} {
		got := quoteType(typ)
		require.LessOrEqual(t, len(got), maxQuotedType+len("…"), "%q", got)
		require.True(t, strings.HasSuffix(got, `"…`), "%q", got)
		unquoted, err := strconv.Unquote(strings.TrimSuffix(got, "…"))
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(typ, unquoted), "%q cut from %q", unquoted, typ)
		reason := "unknown message type " + got
		require.Equal(t, reason, closeReason(reason), "the reason fits the frame")
	}
	require.Equal(t, `"hello"`, quoteType("hello"))
	require.Equal(t, `"a\tb"`, quoteType("a\tb"))
}
