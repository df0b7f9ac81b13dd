package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// follower reads one subscriber's processed events of types as a client
// of the feed does: when the server drops its socket (a reader that fell
// behind, FEED_WRITE_TIMEOUT) it subscribes again after the last cursor it
// got, so that a drop costs time and not events.
type follower struct {
	s       *server
	types   []string
	stopped atomic.Bool
	mu      sync.Mutex
	sub     *wsSub // the current socket
	resumes int
}

// followQuery selects what a follower needs: the event and where to resume.
const followQuery = `subscription($types: [String!], $after: String) { eventProcessed(filter: {types: $types}, after: $after) { id cursor } }`

// follow subscribes and then calls fn with each event's id until stop,
// resuming after each drop; the first subscription's error is returned.
func (s *server) follow(ctx context.Context, types []string, fn func(id int64)) (*follower, error) {
	f := &follower{s: s, types: types}
	sub, err := s.subscribeQuery(ctx, followQuery, map[string]any{"types": types})
	if err != nil {
		return nil, err
	}
	f.sub = sub
	go f.run(ctx, fn)
	return f, nil
}

func (f *follower) run(ctx context.Context, fn func(id int64)) {
	var after string
	for {
		f.mu.Lock()
		sub := f.sub
		f.mu.Unlock()
		_ = sub.read(func(raw json.RawMessage) {
			var ev struct{ ID, Cursor string }
			_ = json.Unmarshal(raw, &ev)
			id, _ := strconv.ParseInt(ev.ID, 10, 64)
			after = ev.Cursor
			fn(id)
		})
		sub.close()
		if f.stopped.Load() || ctx.Err() != nil {
			return
		}
		vars := map[string]any{"types": f.types}
		if after != "" {
			vars["after"] = after
		}
		next, err := f.s.subscribeQuery(ctx, followQuery, vars)
		if err != nil {
			return // the server is going away: what was not read counts as lost
		}
		f.mu.Lock()
		f.sub = next
		f.resumes++
		stopped := f.stopped.Load()
		f.mu.Unlock()
		if stopped {
			next.close()
			return
		}
	}
}

// stop ends the follower and returns how often it resumed.
func (f *follower) stop() int {
	f.stopped.Store(true)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sub.close()
	return f.resumes
}
