package resolvers_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pgx "github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"erp/app/apptest"
	"erp/db"
	"erp/db/pgtest"
)

func TestEventPageDeliveriesMatchEachEvent(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	for i := range 3 {
		apptest.GQL[map[string]any](t, s, `mutation($id: String!) { receiveOrder(input: {source: CRM, externalId: $id, customer: "X", lines: [{sku: "A1", quantity: "1"}]}) { duplicate } }`,
			map[string]any{"id": fmt.Sprint(60000 + i)})
	}
	apptest.WaitAllProcessed(t, s)
	type dl struct {
		Status     string
		Subscriber struct{ Name string }
	}
	page := apptest.GQL[struct {
		Events struct {
			Edges []struct {
				Node struct {
					ID         string
					Type       string
					Deliveries []dl
				}
			}
		} `json:"events"`
	}](t, s, `{ events(first: 50) { edges { node { id type deliveries { status subscriber { name } } } } } }`, nil)
	require.Len(t, page.Events.Edges, 9, "doc.created, order.received and order_acceptance's doc.status_changed of each order")
	for _, e := range page.Events.Edges {
		one := apptest.GQL[struct {
			Event struct{ Deliveries []dl } `json:"event"`
		}](t, s, `query($id: ID!) { event(id: $id) { deliveries { status subscriber { name } } } }`, map[string]any{"id": e.Node.ID})
		require.Equal(t, one.Event.Deliveries, e.Node.Deliveries, "event %s: the batched page and the single event disagree", e.Node.ID)
		if e.Node.Type == "order.received" {
			require.Len(t, e.Node.Deliveries, 2, "order_acceptance and production_planning take it")
		} else {
			require.Empty(t, e.Node.Deliveries, "a sales order's %s: no subscriber takes it", e.Node.Type)
		}
	}
}

// statementLog records the SQL of every statement a pool runs.
type statementLog struct {
	mu   sync.Mutex
	sqls []string
}

func (l *statementLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	l.mu.Lock()
	l.sqls = append(l.sqls, data.SQL)
	l.mu.Unlock()
	return ctx
}

func (*statementLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// count returns how many statements run since mark contain all of parts.
func (l *statementLog) count(mark int, parts ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
next:
	for _, sql := range l.sqls[mark:] {
		for _, p := range parts {
			if !strings.Contains(sql, p) {
				continue next
			}
		}
		n++
	}
	return n
}

func (l *statementLog) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.sqls)
}

// A page of deliveries that shows each one's event, subscriber and
// attempt log reads them in one batch each, not one query per row.
func TestDeliveryPageBatchesEventsAndSubscribers(t *testing.T) {
	t.Parallel()
	statements := &statementLog{}
	pool, err := db.Connect(t.Context(), pgtest.NewDB(t), func(c *pgxpool.Config) { c.ConnConfig.Tracer = statements })
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := apptest.NewOn(t, pool)
	apptest.SeedItem(t, s)
	for i := range 4 {
		apptest.GQL[map[string]any](t, s, `mutation($id: String!) { receiveOrder(input: {source: CRM, externalId: $id, customer: "X", lines: [{sku: "A1", quantity: "1"}]}) { duplicate } }`,
			map[string]any{"id": fmt.Sprint(61000 + i)})
	}
	apptest.WaitAllProcessed(t, s)

	type row struct {
		Event      struct{ ID, Type string }
		Subscriber struct{ Name string }
		AttemptLog []struct{ Attempt int }
	}
	mark := statements.mark()
	page := apptest.GQL[struct {
		Deliveries struct{ Edges []struct{ Node row } } `json:"deliveries"`
	}](t, s, `{ deliveries(first: 50) { edges { node { event { id type } subscriber { name } attemptLog { attempt } } } } }`, nil)
	require.Equal(t, 1, statements.count(mark, "FROM subscribers s WHERE s.id"), "subscribers of the page")
	require.Equal(t, 1, statements.count(mark, "FROM delivery_attempts a"), "attempt logs of the page")
	// The pool also serves the dispatch, whose late jobs (events another
	// batch already took) still run their statements; match the loader's
	// own statement, not any that filters events by id.
	require.Equal(t, 1, statements.count(mark, "FROM event_rows e WHERE e.id"), "events of the page")

	// 4 orders × (order.received → order_acceptance, production_planning),
	// each row with its own event; a sales order's doc.created has no
	// record: material_issue takes only production orders'.
	require.Len(t, page.Deliveries.Edges, 8)
	type delivery struct{ Subscriber struct{ Name string } }
	for _, e := range page.Deliveries.Edges {
		single := apptest.GQL[struct {
			Event struct {
				Type       string
				Deliveries []delivery
			} `json:"event"`
		}](t, s, `query($id: ID!) { event(id: $id) { type deliveries { subscriber { name } } } }`, map[string]any{"id": e.Node.Event.ID})
		require.Equal(t, single.Event.Type, e.Node.Event.Type, "event %s", e.Node.Event.ID)
		require.Contains(t, single.Event.Deliveries, delivery{e.Node.Subscriber}, "event %s has no delivery to %s", e.Node.Event.ID, e.Node.Subscriber.Name)
		require.Equal(t, "order.received", e.Node.Event.Type)
		require.Empty(t, e.Node.AttemptLog, "a built-in subscriber's delivery logs no attempts")
	}
}

// The subscribers list asking for each one's lag reads all of them in one
// statement, not one per subscriber, and each figure is the one a single
// subscriber's read gives.
func TestSubscriberListBatchesLag(t *testing.T) {
	t.Parallel()
	statements := &statementLog{}
	pool, err := db.Connect(t.Context(), pgtest.NewDB(t), func(c *pgxpool.Config) { c.ConnConfig.Tracer = statements })
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := apptest.NewOn(t, pool)
	apptest.SeedItem(t, s)
	apptest.GQL[map[string]any](t, s, `mutation { receiveOrder(input: {source: CRM, externalId: "62000", customer: "X", lines: [{sku: "A1", quantity: "1"}]}) { duplicate } }`, nil)
	apptest.WaitAllProcessed(t, s)

	type lag struct {
		Pending, Failing, Dead int
		LastDeliveredAt        *time.Time
	}
	mark := statements.mark()
	list := apptest.GQL[struct {
		Subscribers []struct {
			ID, Name string
			Lag      lag
		}
	}](t, s, `{ subscribers { id name lag { pending failing dead lastDeliveredAt } } }`, nil)
	require.Equal(t, 1, statements.count(mark, "WHERE s.id = ANY"), "the lag of the whole list")
	require.Len(t, list.Subscribers, 3, "the built-ins")
	delivered := map[string]bool{}
	for _, sub := range list.Subscribers {
		id, err := strconv.ParseInt(sub.ID, 10, 64)
		require.NoError(t, err)
		lags, err := db.SubscriberLagsByIDs(t.Context(), pool, []int64{id})
		require.NoError(t, err)
		require.Len(t, lags, 1)
		want := lags[0]
		require.Equal(t, []int{int(want.Pending), int(want.Failing), int(want.Dead)},
			[]int{sub.Lag.Pending, sub.Lag.Failing, sub.Lag.Dead}, sub.Name)
		require.Zero(t, sub.Lag.Pending+sub.Lag.Failing+sub.Lag.Dead, "%s: everything processed", sub.Name)
		require.Equal(t, want.LastDeliveredAt != nil, sub.Lag.LastDeliveredAt != nil, sub.Name)
		if want.LastDeliveredAt != nil {
			require.True(t, want.LastDeliveredAt.Equal(*sub.Lag.LastDeliveredAt), sub.Name)
			delivered[sub.Name] = true
		}
	}
	require.Equal(t, map[string]bool{"order_acceptance": true, "production_planning": true}, delivered,
		"order.received went to both; no production order, so material_issue got nothing")
}
