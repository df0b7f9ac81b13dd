package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// wsSub is one graphql-transport-ws subscription to eventProcessed.
type wsSub struct {
	conn *websocket.Conn
}

type wsMsg struct {
	ID      string          `json:"id,omitempty"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// subscribe opens a socket, authenticates and subscribes to processed
// events of the given types, selecting fields.
func (s *server) subscribe(ctx context.Context, types []string, fields string) (*wsSub, error) {
	tj, _ := json.Marshal(types)
	return s.subscribeQuery(ctx, fmt.Sprintf("subscription { eventProcessed(filter: {types: %s}) { %s } }", tj, fields), nil)
}

// subscribeQuery opens a socket, authenticates and starts the
// subscription query with vars.
func (s *server) subscribeQuery(ctx context.Context, query string, vars map[string]any) (*wsSub, error) {
	d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: 30 * time.Second,
		ReadBufferSize: 1024, WriteBufferSize: 1024}
	url := "ws" + strings.TrimPrefix(s.URL, "http") + "/graphql"
	c, _, err := d.DialContext(ctx, url, http.Header{}) //nolint:bodyclose // gorilla: a handshake response needs no closing
	if err != nil {
		return nil, err
	}
	init, _ := json.Marshal(map[string]any{"Authorization": "Bearer " + s.Token})
	if err := c.WriteJSON(wsMsg{Type: "connection_init", Payload: init}); err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	var ack wsMsg
	if err := c.ReadJSON(&ack); err != nil {
		c.Close()
		return nil, fmt.Errorf("connection_init: %w", err)
	}
	if ack.Type != "connection_ack" {
		c.Close()
		return nil, fmt.Errorf("connection_init: got %q, want connection_ack", ack.Type)
	}
	_ = c.SetReadDeadline(time.Time{})
	q, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err := c.WriteJSON(wsMsg{ID: "1", Type: "subscribe", Payload: q}); err != nil {
		c.Close()
		return nil, err
	}
	return &wsSub{conn: c}, nil
}

// read calls fn with each "next" payload's eventProcessed object until the
// socket closes; it answers graphql-transport-ws pings. Each message is
// decoded in one pass: at 5,000 sockets the tool's own JSON decoding
// competes with the server for the 2 cores.
func (w *wsSub) read(fn func(ev json.RawMessage)) error {
	for {
		_, b, err := w.conn.ReadMessage()
		if err != nil {
			return err
		}
		var m struct {
			Type    string `json:"type"`
			Payload struct {
				Data struct {
					EventProcessed json.RawMessage `json:"eventProcessed"`
				} `json:"data"`
				Errors []struct {
					Message string `json:"message"`
				} `json:"errors"`
			} `json:"payload"`
		}
		if err := json.Unmarshal(b, &m); err != nil {
			return err
		}
		switch m.Type {
		case "next":
			if len(m.Payload.Errors) > 0 {
				return fmt.Errorf("subscription: %s", m.Payload.Errors[0].Message)
			}
			fn(m.Payload.Data.EventProcessed)
		case "ping":
			if err := w.conn.WriteJSON(wsMsg{Type: "pong"}); err != nil {
				return err
			}
		case "error", "complete":
			return fmt.Errorf("subscription ended: %s %s", m.Type, b)
		}
	}
}

func (w *wsSub) close() { _ = w.conn.Close() }
