package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Polling of the journal: the replay waits up to drainTimeout, polling every
// pollInterval, for the server to process every event. A fresh server
// processes the day in well under a second; the timeout is for a busy one.
const (
	drainTimeout = 30 * time.Second
	pollInterval = 100 * time.Millisecond
)

// Event is a journal event (table events) as the API's events query returns
// it. Object is "<table> #<row id>"; Actor is nil for events the system
// journals itself (the planning chain's documents).
type Event struct {
	ID          string          `json:"id"`
	Type        string          `json:"type"`
	Entity      string          `json:"entity"`
	EntityID    string          `json:"entityId"`
	Object      string          `json:"object"`
	Payload     json.RawMessage `json:"payload"`
	CreatedAt   time.Time       `json:"createdAt"`
	ProcessedAt *time.Time      `json:"processedAt"`
	Actor       *Actor          `json:"actor"`
}

// Actor is the user who caused an event.
type Actor struct {
	DisplayName string `json:"displayName"`
}

type eventsData struct {
	Events struct {
		Edges []struct {
			Node Event `json:"node"`
		} `json:"edges"`
		PageInfo struct {
			HasNextPage bool    `json:"hasNextPage"`
			EndCursor   *string `json:"endCursor"`
		} `json:"pageInfo"`
	} `json:"events"`
}

// nodes are the page's events, newest first as the API orders them.
func (d eventsData) nodes() []Event {
	out := make([]Event, len(d.Events.Edges))
	for i, e := range d.Events.Edges {
		out[i] = e.Node
	}
	return out
}

const eventsQuery = `query($first: Int, $after: String, $filter: EventFilter) {
  events(first: $first, after: $after, filter: $filter) {
    edges { node { id type entity entityId object payload createdAt processedAt actor { displayName } } }
    pageInfo { hasNextPage endCursor }
  }
}`

// newest returns up to n of the newest journal events, newest first.
func (c *client) newest(ctx context.Context, n int) ([]Event, error) {
	res, err := call[eventsData](ctx, c, eventsQuery, map[string]any{"first": n})
	if err != nil {
		return nil, err
	}
	return res.nodes(), nil
}

// newestEventID is the id of the newest journal event, 0 for none. Event ids
// grow with time, so the events after it are the ones a replay wrote.
func (c *client) newestEventID(ctx context.Context) (int64, error) {
	evs, err := c.newest(ctx, 1)
	if err != nil || len(evs) == 0 {
		return 0, err
	}
	return strconv.ParseInt(evs[0].ID, 10, 64)
}

// eventsAfter returns every journal event with an id greater than id,
// newest first, paging through the events query.
func (c *client) eventsAfter(ctx context.Context, id int64) ([]Event, error) {
	var all []Event
	vars := map[string]any{"first": 500}
	for {
		res, err := call[eventsData](ctx, c, eventsQuery, vars)
		if err != nil {
			return nil, err
		}
		for _, ev := range res.nodes() {
			n, err := strconv.ParseInt(ev.ID, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("parse event id %q: %w", ev.ID, err)
			}
			if n <= id {
				return all, nil
			}
			all = append(all, ev)
		}
		if !res.Events.PageInfo.HasNextPage || res.Events.PageInfo.EndCursor == nil {
			return all, nil
		}
		vars["after"] = *res.Events.PageInfo.EndCursor
	}
}

// waitProcessed polls every pollInterval until no event is unprocessed, for
// at most drainTimeout. The planning chain journals its documents from the
// subscribers of earlier events, so "nothing unprocessed" also means the
// chain has finished.
func (c *client) waitProcessed(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, drainTimeout)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		res, err := call[eventsData](ctx, c, eventsQuery,
			map[string]any{"first": 1, "filter": map[string]any{"processed": false}})
		if err == nil && len(res.Events.Edges) == 0 {
			return nil
		}
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("wait for processing: %w", err)
		}
		select {
		case <-ctx.Done():
			if len(res.Events.Edges) > 0 {
				ev := res.Events.Edges[0].Node
				return fmt.Errorf("wait for processing: event %s (%s, %s) still unprocessed after %s: %w",
					ev.ID, ev.Type, ev.Object, drainTimeout, ctx.Err())
			}
			return fmt.Errorf("wait for processing: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// verifyEvents returns an error for the first event that is unprocessed or
// processed before it was created: the seed's journal shows such CRM rows
// (their created time came from the CRM's clock), and this system must never.
func verifyEvents(events []Event) error {
	for _, ev := range events {
		if ev.ProcessedAt == nil {
			return fmt.Errorf("event %s (%s, %s) is not processed", ev.ID, ev.Type, ev.Object)
		}
		if ev.ProcessedAt.Before(ev.CreatedAt) {
			return fmt.Errorf("event %s (%s, %s) processed at %s before it was created at %s",
				ev.ID, ev.Type, ev.Object, ev.ProcessedAt.Format(time.RFC3339Nano), ev.CreatedAt.Format(time.RFC3339Nano))
		}
	}
	return nil
}
