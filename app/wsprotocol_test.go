package app_test

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

	"erp/app/apptest"
	"erp/graph/wsgorilla"
)

// frames reads c until the socket ends or nothing arrives for quiet, and
// returns the messages on the way (keepalives left out, pings answered)
// and the close frame's code and reason; code is 0 when the socket stayed
// open, websocket.CloseAbnormalClosure when it ended without a close
// frame.
func frames(t *testing.T, c *apptest.WS, quiet time.Duration) (msgs []apptest.Message, code int, reason string) {
	t.Helper()
	for {
		m, err := c.Read(quiet)
		if err == nil {
			msgs = append(msgs, m)
			continue
		}
		var ce *websocket.CloseError
		var ne net.Error
		switch {
		case errors.As(err, &ce):
			return msgs, ce.Code, ce.Text
		case errors.As(err, &ne) && ne.Timeout():
			return msgs, 0, ""
		}
		return msgs, websocket.CloseAbnormalClosure, err.Error()
	}
}

// syncOn runs a query with id on c and returns the messages that came
// before its result and complete; the socket reads in order, so every
// message sent before it was taken by then.
func syncOn(t *testing.T, c *apptest.WS, id string) []apptest.Message {
	t.Helper()
	c.Subscribe(id, `{ __typename }`, nil)
	var before []apptest.Message
	for {
		m, err := c.Read(5 * time.Second)
		require.NoError(t, err, "the socket stays open")
		if m.ID != id {
			before = append(before, m)
			continue
		}
		if m.Type == "complete" {
			return before
		}
	}
}

// kinds is msgs as "type id" strings, for comparisons that fail readably.
func kinds(msgs []apptest.Message) []string {
	out := []string{}
	for _, m := range msgs {
		out = append(out, strings.TrimSpace(m.Type+" "+m.ID))
	}
	return out
}

// A message that is not valid for its subprotocol gets what that
// protocol prescribes. graphql-transport-ws closes with 4400 and a reason
// that says what was wrong, and sends no message first (it has no
// connection_error). graphql-ws, whose reference server answers a bad
// operation with an error for its id, does so for a start whose payload
// is not an operation, and closes with 1002 after a connection_error for
// a start it cannot answer (no id), as for other messages it does not
// take.
func TestWebsocketInvalidMessages(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	init := func(token string) string {
		return fmt.Sprintf(`{"type":"connection_init","payload":{"Authorization":"Bearer %s"}}`, token)
	}
	tests := []struct {
		name   string
		proto  string
		noInit bool   // send the frames before connection_init
		frame  string // what the client sends
		want   []string
		code   int // 0: the socket stays open
		// graphql-transport-ws: the close reason; graphql-ws: in the
		// error or connection_error
		reason string
	}{
		// graphql-transport-ws: 4400, nothing before it.
		{name: "subscribe without an id", proto: apptest.ProtoTransportWS,
			frame: `{"type":"subscribe","payload":{"query":"{ __typename }"}}`, code: wsgorilla.CloseBadRequest, reason: "subscribe message without an id"},
		{name: "subscribe with an empty id", proto: apptest.ProtoTransportWS,
			frame: `{"type":"subscribe","id":"","payload":{"query":"{ __typename }"}}`, code: wsgorilla.CloseBadRequest, reason: "subscribe message without an id"},
		{name: "complete without an id", proto: apptest.ProtoTransportWS,
			frame: `{"type":"complete"}`, code: wsgorilla.CloseBadRequest, reason: "complete message without an id"},
		{name: "subscribe without a payload", proto: apptest.ProtoTransportWS,
			frame: `{"type":"subscribe","id":"1"}`, code: wsgorilla.CloseBadRequest, reason: "subscribe payload must be an object"},
		{name: "subscribe payload not an object", proto: apptest.ProtoTransportWS,
			frame: `{"type":"subscribe","id":"1","payload":"{ __typename }"}`, code: wsgorilla.CloseBadRequest, reason: "subscribe payload must be an object"},
		{name: "subscribe payload without a query", proto: apptest.ProtoTransportWS,
			frame: `{"type":"subscribe","id":"1","payload":{}}`, code: wsgorilla.CloseBadRequest, reason: `subscribe payload has no "query" string`},
		{name: "subscribe query not a string", proto: apptest.ProtoTransportWS,
			frame: `{"type":"subscribe","id":"1","payload":{"query":5}}`, code: wsgorilla.CloseBadRequest, reason: `subscribe payload: "query" must be a string`},
		{name: "subscribe variables not an object", proto: apptest.ProtoTransportWS,
			frame: `{"type":"subscribe","id":"1","payload":{"query":"{ __typename }","variables":[1]}}`, code: wsgorilla.CloseBadRequest, reason: `subscribe payload: "variables" must be an object`},
		{name: "malformed JSON", proto: apptest.ProtoTransportWS,
			frame: `{"type":`, code: wsgorilla.CloseBadRequest, reason: "malformed JSON message"},
		{name: "a message not an object", proto: apptest.ProtoTransportWS,
			frame: `["subscribe"]`, code: wsgorilla.CloseBadRequest, reason: "message must be a JSON object"},
		{name: "a type not a string", proto: apptest.ProtoTransportWS,
			frame: `{"type":5}`, code: wsgorilla.CloseBadRequest, reason: `message: "type" must be a string`},
		{name: "an id not a string", proto: apptest.ProtoTransportWS,
			frame: `{"type":"complete","id":1}`, code: wsgorilla.CloseBadRequest, reason: `message: "id" must be a string`},
		{name: "a message without a type", proto: apptest.ProtoTransportWS,
			frame: `{"id":"1"}`, code: wsgorilla.CloseBadRequest, reason: "message without a type"},
		{name: "an unknown message type", proto: apptest.ProtoTransportWS,
			frame: `{"type":"hello"}`, code: wsgorilla.CloseBadRequest, reason: `unknown message type "hello"`},
		// The type is quoted with its bytes escaped, and cut short.
		{name: "a long unknown message type", proto: apptest.ProtoTransportWS,
			frame: `{"type":"\u0001` + strings.Repeat("é", 1000) + `"}`, code: wsgorilla.CloseBadRequest,
			reason: `unknown message type "\x01` + strings.Repeat("é", 21) + `"…`},
		{name: "a server-only message type", proto: apptest.ProtoTransportWS,
			frame: `{"type":"next","id":"1","payload":{}}`, code: wsgorilla.CloseBadRequest, reason: `message type "next" is sent only by the server`},
		{name: "bad token", proto: apptest.ProtoTransportWS, noInit: true,
			frame: init("erp_wrong"), code: 4403, reason: "unauthorized"},
		{name: "connection_init payload not an object", proto: apptest.ProtoTransportWS, noInit: true,
			frame: `{"type":"connection_init","payload":"x"}`, code: wsgorilla.CloseBadRequest, reason: "connection_init payload must be an object"},
		{name: "subscribe before connection_init", proto: apptest.ProtoTransportWS, noInit: true,
			frame: `{"type":"subscribe","id":"1","payload":{"query":"{ __typename }"}}`, code: wsgorilla.CloseNotInitialised, reason: "Unauthorized"},
		{name: "complete before connection_init", proto: apptest.ProtoTransportWS, noInit: true,
			frame: `{"type":"complete","id":"1"}`, code: wsgorilla.CloseBadRequest, reason: "complete message before connection_init"},
		{name: "malformed JSON before connection_init", proto: apptest.ProtoTransportWS, noInit: true,
			frame: `{"type":`, code: wsgorilla.CloseBadRequest, reason: "malformed JSON message"},
		{name: "an unknown message type before connection_init", proto: apptest.ProtoTransportWS, noInit: true,
			frame: `{"type":"hello"}`, code: wsgorilla.CloseBadRequest, reason: `unknown message type "hello"`},
		{name: "a server-only message type before connection_init", proto: apptest.ProtoTransportWS, noInit: true,
			frame: `{"type":"connection_ack"}`, code: wsgorilla.CloseBadRequest, reason: `message type "connection_ack" is sent only by the server`},

		// graphql-ws: an error for the id, the socket stays open.
		{name: "start without a payload", proto: apptest.ProtoLegacyWS,
			frame: `{"type":"start","id":"1"}`, want: []string{"error 1"}, reason: "payload"},
		{name: "start payload not an object", proto: apptest.ProtoLegacyWS,
			frame: `{"type":"start","id":"1","payload":"{ __typename }"}`, want: []string{"error 1"}, reason: "payload"},
		{name: "start payload without a query", proto: apptest.ProtoLegacyWS,
			frame: `{"type":"start","id":"1","payload":{}}`, want: []string{"error 1"}, reason: "query"},
		{name: "start query not a string", proto: apptest.ProtoLegacyWS,
			frame: `{"type":"start","id":"1","payload":{"query":5}}`, want: []string{"error 1"}, reason: "query"},
		{name: "start variables not an object", proto: apptest.ProtoLegacyWS,
			frame: `{"type":"start","id":"1","payload":{"query":"{ __typename }","variables":[1]}}`, want: []string{"error 1"}, reason: "variables"},
		// graphql-ws: connection_error, then 1002.
		{name: "start without an id", proto: apptest.ProtoLegacyWS,
			frame: `{"type":"start","payload":{"query":"{ __typename }"}}`, want: []string{"connection_error"}, code: websocket.CloseProtocolError, reason: "id"},
		{name: "start with an empty id", proto: apptest.ProtoLegacyWS,
			frame: `{"type":"start","id":"","payload":{"query":"{ __typename }"}}`, want: []string{"connection_error"}, code: websocket.CloseProtocolError, reason: "id"},
		{name: "a server-only message type", proto: apptest.ProtoLegacyWS,
			frame: `{"type":"data","id":"1","payload":{}}`, want: []string{"connection_error"}, code: websocket.CloseProtocolError},
		{name: "complete from the client", proto: apptest.ProtoLegacyWS,
			frame: `{"type":"complete","id":"1"}`, want: []string{"connection_error"}, code: websocket.CloseProtocolError},
		{name: "second connection_init", proto: apptest.ProtoLegacyWS,
			frame: init(s.Token), want: []string{"connection_error"}, code: websocket.CloseProtocolError},
		{name: "an unknown message type", proto: apptest.ProtoLegacyWS,
			frame: `{"type":"hello"}`, code: websocket.CloseNormalClosure},
		{name: "bad token", proto: apptest.ProtoLegacyWS, noInit: true,
			frame: init("erp_wrong"), want: []string{"connection_error"}, code: 4403},
	}
	for _, tt := range tests {
		t.Run(tt.name+"/"+tt.proto, func(t *testing.T) {
			t.Parallel()
			c := apptest.DialWS(t, s, tt.proto)
			if !tt.noInit {
				c.Init(s.Token)
			}
			require.NoError(t, c.Conn.WriteMessage(websocket.TextMessage, []byte(tt.frame)))
			if tt.code == 0 {
				got := syncOn(t, c, "sync")
				require.Equal(t, tt.want, kinds(got), "then nothing more for the id: an error ends its operation")
				require.Contains(t, string(got[0].Payload), tt.reason)
				return
			}
			got, code, reason := frames(t, c, 5*time.Second)
			if tt.want == nil {
				tt.want = []string{}
			}
			require.Equal(t, tt.want, kinds(got))
			require.Equal(t, tt.code, code, "close reason %q", reason)
			switch {
			case tt.proto == apptest.ProtoTransportWS:
				require.Equal(t, tt.reason, reason, "the close reason says why")
			case len(got) > 0:
				require.Contains(t, string(got[0].Payload), tt.reason, "the connection_error says why")
			}
		})
	}
}

// An error message ends its operation in both subprotocols: no complete
// follows it.
func TestWebsocketErrorEndsOperation(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	for _, proto := range []string{apptest.ProtoTransportWS, apptest.ProtoLegacyWS} {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			c := apptest.DialWS(t, s, proto)
			c.Init(s.Token)
			c.Subscribe("bad", `{ nope }`, nil)
			m, err := c.Read(5 * time.Second)
			require.NoError(t, err)
			require.Equal(t, "error bad", m.Type+" "+m.ID)
			require.Contains(t, string(m.Payload), "GRAPHQL_VALIDATION_FAILED")
			require.Empty(t, kinds(syncOn(t, c, "sync")))
			c.RequireNoMoreEvents()
		})
	}
}

// An operation the client stopped (complete, stop) sends nothing more.
// On graphql-transport-ws that includes complete, which the server sends
// only for an operation it ended itself: one sent after the client had
// reused the id would end the new operation for the client. graphql-ws
// answers stop with complete, as its reference server does, before the
// server reads the next message. Nothing of the stopped operations shows
// after 300 stops and re-subscriptions of one id in a row, and the last
// subscription runs.
func TestWebsocketStoppedOperationSendsNothingMore(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	filter := map[string]any{"filter": salesOrdersCreated}
	const reuses = 300
	for _, proto := range []string{apptest.ProtoTransportWS, apptest.ProtoLegacyWS} {
		t.Run(proto, func(t *testing.T) {
			c := apptest.DialWS(t, s, proto)
			c.Init(s.Token)
			stop, want := "complete", []string{}
			if proto == apptest.ProtoLegacyWS {
				stop = "stop"
			}
			c.Subscribe("1", apptest.FeedSubscription, filter)
			apptest.WaitFor(t, 5*time.Second, "the subscription", func() bool { return s.App.Feed().Subscribers() == 1 })
			for range reuses {
				c.Send(apptest.Message{ID: "1", Type: stop})
				c.Subscribe("1", apptest.FeedSubscription, filter)
				if proto == apptest.ProtoLegacyWS {
					want = append(want, "complete 1")
				}
			}
			require.Equal(t, want, kinds(syncOn(t, c, "sync")))
			apptest.WaitFor(t, 5*time.Second, "the last subscription alone", func() bool { return s.App.Feed().Subscribers() == 1 })
			apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": "reuse " + proto})
			require.Equal(t, "doc.created", c.NextEvent("1").Type, "the last subscription runs as 1")

			c.Send(apptest.Message{ID: "1", Type: stop})
			got, code, _ := frames(t, c, 500*time.Millisecond)
			require.Zero(t, code)
			require.Equal(t, want[:min(len(want), 1)], kinds(got))
			apptest.WaitFor(t, 5*time.Second, "no subscription running", func() bool { return s.App.Feed().Subscribers() == 0 })
		})
	}
}

// Neither subprotocol defines binary frames; as both reference servers
// do, one is read as the text it holds.
func TestWebsocketBinaryFrameReadAsText(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	for proto, typ := range map[string]string{apptest.ProtoTransportWS: "subscribe", apptest.ProtoLegacyWS: "start"} {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			c := apptest.DialWS(t, s, proto)
			c.Init(s.Token)
			b, err := json.Marshal(apptest.Message{ID: "1", Type: typ, Payload: json.RawMessage(`{"query":"{ __typename }"}`)})
			require.NoError(t, err)
			require.NoError(t, c.Conn.WriteMessage(websocket.BinaryMessage, b))
			got, code, _ := frames(t, c, 500*time.Millisecond)
			require.Zero(t, code)
			require.Equal(t, []string{map[string]string{apptest.ProtoTransportWS: "next", apptest.ProtoLegacyWS: "data"}[proto] + " 1", "complete 1"}, kinds(got))
		})
	}
}

// A subscription selecting its stream under two response keys is refused
// by validation, over HTTP and on both subprotocols; a single stream, by
// an alias or a fragment, is not.
func TestSubscriptionOfTwoStreamsRefused(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	two := `subscription { a: eventProcessed { id } b: eventProcessed { id } }`
	_, resp := s.Do(t, s.Token, two, nil)
	require.Len(t, resp.Errors, 1)
	require.Equal(t, "GRAPHQL_VALIDATION_FAILED", resp.Errors[0].Extensions["code"])
	require.Contains(t, resp.Errors[0].Message, "must select only one top level field")
	for _, proto := range []string{apptest.ProtoTransportWS, apptest.ProtoLegacyWS} {
		t.Run(proto, func(t *testing.T) { // in turn: they count the feed's subscribers
			c := apptest.DialWS(t, s, proto)
			c.Init(s.Token)
			c.Subscribe("two", two, nil)
			m, err := c.Read(5 * time.Second)
			require.NoError(t, err)
			require.Equal(t, "error two", m.Type+" "+m.ID)
			require.Contains(t, string(m.Payload), "GRAPHQL_VALIDATION_FAILED")
			for _, one := range []string{
				`subscription { a: eventProcessed { id } }`,
				`subscription { ...f } fragment f on Subscription { eventProcessed { id } }`,
			} {
				c.Subscribe("one", one, nil)
				apptest.WaitFor(t, 5*time.Second, "the subscription", func() bool { return s.App.Feed().Subscribers() == 1 })
				c.Send(apptest.Message{ID: "one", Type: map[string]string{apptest.ProtoTransportWS: "complete", apptest.ProtoLegacyWS: "stop"}[proto]})
				apptest.WaitFor(t, 5*time.Second, "no subscription", func() bool { return s.App.Feed().Subscribers() == 0 })
			}
		})
	}
}
