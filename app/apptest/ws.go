package apptest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"
)

// The GraphQL websocket subprotocols the server speaks.
const (
	ProtoTransportWS = "graphql-transport-ws"
	ProtoLegacyWS    = "graphql-ws"
)

// WS is a GraphQL websocket client over a real socket, speaking either
// subprotocol. Conn is the socket itself, for tests that go below the
// protocol.
type WS struct {
	t     testing.TB
	Conn  *websocket.Conn
	proto string
}

// Message is one websocket message of either subprotocol.
type Message struct {
	ID      string          `json:"id,omitempty"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// FeedEvent is an eventProcessed result as FeedSubscription selects it.
type FeedEvent struct {
	ID          string          `json:"id"`
	Type        string          `json:"type"`
	Object      string          `json:"object"`
	Payload     json.RawMessage `json:"payload"`
	CreatedAt   time.Time       `json:"createdAt"`
	ProcessedAt *time.Time      `json:"processedAt"`
	Cursor      string          `json:"cursor"`
	Actor       *struct {
		DisplayName string `json:"displayName"`
	} `json:"actor"`
}

// FeedSubscription subscribes to processed events with an optional
// $filter and $after cursor, selecting what FeedEvent holds.
const FeedSubscription = `subscription($filter: EventFilter, $after: String) {
	eventProcessed(filter: $filter, after: $after) {
		id type object payload createdAt processedAt cursor actor { displayName }
	}
}`

// WSURL is the websocket endpoint of s.
func WSURL(s *Server) string { return "ws" + strings.TrimPrefix(s.URL, "http") + "/graphql" }

// DialWS opens a websocket to s with subprotocol proto, closed at cleanup.
func DialWS(t testing.TB, s *Server, proto string) *WS {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{proto}, HandshakeTimeout: 5 * time.Second}
	conn, res, err := d.Dial(WSURL(s), nil)
	require.NoError(t, err)
	_ = res.Body.Close()
	require.Equal(t, proto, conn.Subprotocol())
	t.Cleanup(func() { _ = conn.Close() })
	return NewWS(t, conn, proto)
}

// NewWS wraps a socket dialled by the test itself.
func NewWS(t testing.TB, conn *websocket.Conn, proto string) *WS {
	return &WS{t: t, Conn: conn, proto: proto}
}

// Proto is the socket's subprotocol.
func (c *WS) Proto() string { return c.proto }

// Send writes m as JSON.
func (c *WS) Send(m any) {
	c.t.Helper()
	require.NoError(c.t, c.Conn.WriteJSON(m))
}

// Read returns the next message that is not a keepalive, answering pings.
func (c *WS) Read(timeout time.Duration) (Message, error) {
	for {
		require.NoError(c.t, c.Conn.SetReadDeadline(time.Now().Add(timeout)))
		var m Message
		if err := c.Conn.ReadJSON(&m); err != nil {
			return m, err
		}
		switch m.Type {
		case "ka", "pong":
			continue
		case "ping":
			c.Send(Message{Type: "pong"})
			continue
		}
		return m, nil
	}
}

// Init sends connection_init with token and requires connection_ack.
func (c *WS) Init(token string) {
	c.t.Helper()
	c.Send(Message{Type: "connection_init", Payload: json.RawMessage(fmt.Sprintf(`{"Authorization": "Bearer %s"}`, token))})
	m, err := c.Read(5 * time.Second)
	require.NoError(c.t, err)
	require.Equal(c.t, "connection_ack", m.Type)
}

// Subscribe starts operation id with query and vars.
func (c *WS) Subscribe(id, query string, vars map[string]any) {
	c.t.Helper()
	typ := "subscribe"
	if c.proto == ProtoLegacyWS {
		typ = "start"
	}
	payload, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	require.NoError(c.t, err)
	c.Send(Message{ID: id, Type: typ, Payload: payload})
}

// NextEvent reads the next eventProcessed result of subscription id.
func (c *WS) NextEvent(id string) FeedEvent {
	c.t.Helper()
	m, err := c.Read(10 * time.Second)
	require.NoError(c.t, err)
	want := "next"
	if c.proto == ProtoLegacyWS {
		want = "data"
	}
	require.Equal(c.t, want, m.Type, "payload: %s", m.Payload)
	require.Equal(c.t, id, m.ID)
	var p struct {
		Data struct {
			EventProcessed FeedEvent `json:"eventProcessed"`
		} `json:"data"`
		Errors []Error `json:"errors"`
	}
	require.NoError(c.t, json.Unmarshal(m.Payload, &p))
	require.Empty(c.t, p.Errors)
	return p.Data.EventProcessed
}

// RequireNoMoreEvents fails if c receives a result within a short while.
func (c *WS) RequireNoMoreEvents() {
	c.t.Helper()
	m, err := c.Read(300 * time.Millisecond)
	var ne net.Error
	require.True(c.t, errors.As(err, &ne) && ne.Timeout(), "unexpected message %s %s (err %v)", m.Type, m.Payload, err)
}

// CloseCode reads from c until the socket ends and returns the close code
// the server sent (websocket.CloseAbnormalClosure, 1006, when the
// connection ended without a close frame). Messages on the way are
// ignored, except that a connection_ack fails the test when noAck is set.
func (c *WS) CloseCode(timeout time.Duration, noAck bool) int {
	c.t.Helper()
	require.NoError(c.t, c.Conn.SetReadDeadline(time.Now().Add(timeout)))
	for {
		_, b, err := c.Conn.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				return ce.Code
			}
			var ne net.Error
			require.False(c.t, errors.As(err, &ne) && ne.Timeout(), "socket still open after %s", timeout)
			return websocket.CloseAbnormalClosure
		}
		if noAck {
			require.NotContains(c.t, string(b), `"connection_ack"`)
		}
	}
}
