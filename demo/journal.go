package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Polling of the journal: the replay waits up to drainTimeout, polling every
// pollInterval, for the server to process every event it caused. A fresh
// server processes the day in well under a second; the timeout is for a
// busy one.
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

// waitProcessed polls every pollInterval, for at most timeout, until every
// event with an id greater than after (this run's: after is the journal
// head when the run began) is processed. Events from before are not waited
// for: a built-in subscriber paused since yesterday holds its own events,
// not this run's; webhooks hold none (an event is processed once their
// delivery records exist, whatever the receivers answer). The planning chain journals its documents from the subscribers of
// earlier events, so "nothing of this run unprocessed" also means the
// chain has finished. On timeout the error lists this run's unprocessed
// events and what each waits for (stuckReport).
func (c *client) waitProcessed(ctx context.Context, after int64, timeout time.Duration) error {
	waitCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		// Newest first: the newest unprocessed event is this run's if any is.
		res, err := call[eventsData](waitCtx, c, eventsQuery,
			map[string]any{"first": 1, "filter": map[string]any{"processed": false}})
		if err != nil && waitCtx.Err() == nil {
			return fmt.Errorf("wait for processing: %w", err)
		}
		if err == nil {
			nodes := res.nodes()
			if len(nodes) == 0 {
				return nil
			}
			id, err := strconv.ParseInt(nodes[0].ID, 10, 64)
			if err != nil {
				return fmt.Errorf("wait for processing: parse event id %q: %w", nodes[0].ID, err)
			}
			if id <= after {
				return nil
			}
		}
		select {
		case <-waitCtx.Done():
			if ctx.Err() != nil {
				return fmt.Errorf("wait for processing: %w", ctx.Err())
			}
			return fmt.Errorf("wait for processing: %s", c.stuckReport(ctx, after, timeout))
		case <-tick.C:
		}
	}
}

// Bounds of stuckReport: how long it may take, and how many of the stuck
// events it describes (the oldest, which usually hold up the others).
const (
	reportTimeout = 10 * time.Second
	reportEvents  = 5
)

// stuckEvent is an unprocessed event with its delivery records.
type stuckEvent struct {
	ID         string `json:"id"`
	Type       string `json:"type"`
	Object     string `json:"object"`
	Deliveries []struct {
		Subscriber struct {
			Name   string `json:"name"`
			Kind   string `json:"kind"`
			Paused bool   `json:"paused"`
		} `json:"subscriber"`
		Status        string     `json:"status"`
		Attempts      int        `json:"attempts"`
		LastError     *string    `json:"lastError"`
		NextAttemptAt *time.Time `json:"nextAttemptAt"`
	} `json:"deliveries"`
}

const stuckQuery = `query($first: Int, $after: String) {
  events(first: $first, after: $after, filter: {processed: false}) {
    edges { node { id type object
      deliveries { subscriber { name kind paused } status attempts lastError nextAttemptAt } } }
    pageInfo { hasNextPage endCursor }
  }
}`

// stuckReport says, for a wait that timed out, how many events with an
// id greater than after are still unprocessed and, for the oldest of them,
// which subscribers they wait for and why, as far as the delivery records
// show it: "event 120 (doc.created, wh_moves #7) waits for crm-hook
// (paused; pending, 0 attempts)". An event with no open delivery has not
// been dispatched yet. When the records cannot be read the report says so
// and why.
func (c *client) stuckReport(ctx context.Context, after int64, waited time.Duration) string {
	ctx, cancel := context.WithTimeout(ctx, reportTimeout)
	defer cancel()
	var stuck []stuckEvent // newest first
	vars := map[string]any{"first": 100}
	for {
		res, err := call[struct {
			Events struct {
				Edges []struct {
					Node stuckEvent `json:"node"`
				} `json:"edges"`
				PageInfo struct {
					HasNextPage bool    `json:"hasNextPage"`
					EndCursor   *string `json:"endCursor"`
				} `json:"pageInfo"`
			} `json:"events"`
		}](ctx, c, stuckQuery, vars)
		if err != nil {
			return fmt.Sprintf("events of this run still unprocessed after %s (reading their deliveries failed: %v)", waited, err)
		}
		done := !res.Events.PageInfo.HasNextPage || res.Events.PageInfo.EndCursor == nil
		for _, e := range res.Events.Edges {
			id, err := strconv.ParseInt(e.Node.ID, 10, 64)
			if err != nil || id <= after {
				done = true
				break
			}
			stuck = append(stuck, e.Node)
		}
		if done {
			break
		}
		vars["after"] = *res.Events.PageInfo.EndCursor
	}
	if len(stuck) == 0 {
		return fmt.Sprintf("this run's events were not all processed after %s, and are now", waited)
	}
	slices.Reverse(stuck)
	var b strings.Builder
	fmt.Fprintf(&b, "%d of this run's events still unprocessed after %s", len(stuck), waited)
	for i, ev := range stuck[:min(len(stuck), reportEvents)] {
		sep := ": "
		if i > 0 {
			sep = "; "
		}
		fmt.Fprintf(&b, "%sevent %s (%s, %s) %s", sep, ev.ID, ev.Type, ev.Object, ev.waitsFor())
	}
	if len(stuck) > reportEvents {
		fmt.Fprintf(&b, "; and %d more", len(stuck)-reportEvents)
	}
	return b.String()
}

// waitsFor says what an unprocessed event waits for: its built-in
// subscribers' deliveries that are neither delivered nor dead (a webhook's
// never holds an event), or that it has not been dispatched.
func (ev stuckEvent) waitsFor() string {
	var open []string
	for _, d := range ev.Deliveries {
		if d.Subscriber.Kind != "BUILTIN" || d.Status == "DELIVERED" || d.Status == "DEAD" {
			continue
		}
		var why []string
		if d.Subscriber.Paused {
			why = append(why, "paused")
		}
		why = append(why, fmt.Sprintf("%s, %d attempts", strings.ToLower(d.Status), d.Attempts))
		if d.LastError != nil && *d.LastError != "" {
			why = append(why, "last error: "+truncate(*d.LastError, 200))
		}
		// A pending delivery's due time says nothing while it is held.
		if d.Status == "FAILED" && d.NextAttemptAt != nil {
			why = append(why, "next attempt "+d.NextAttemptAt.Format(time.RFC3339))
		}
		open = append(open, fmt.Sprintf("%s (%s)", d.Subscriber.Name, strings.Join(why, "; ")))
	}
	if len(open) == 0 {
		return "has no open delivery: not dispatched yet"
	}
	return "waits for " + strings.Join(open, ", ")
}

// truncate shortens s to at most n runes, marking the cut with "…".
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
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
