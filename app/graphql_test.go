package app_test

import (
	"cmp"
	"encoding/json"
	"erp/app/apptest"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"
)

func TestLiveFeedDeliversProcessedEvents(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	for _, proto := range []string{apptest.ProtoTransportWS, apptest.ProtoLegacyWS} {
		t.Run(proto, func(t *testing.T) {
			c := apptest.DialWS(t, s, proto)
			c.Init(s.Token)
			// The previous subtest's socket is closed; its subscription ends.
			apptest.WaitFor(t, 5*time.Second, "no live subscription", func() bool { return s.App.Feed().Subscribers() == 0 })
			c.Subscribe("1", apptest.FeedSubscription, map[string]any{"filter": map[string]any{"types": []string{"doc.created"}, "entity": "sales_orders"}})
			apptest.WaitFor(t, 5*time.Second, "the subscription to register", func() bool { return s.App.Feed().Subscribers() == 1 })
			so := apptest.GQL[struct {
				CreateSalesOrder struct{ ID, Number string } `json:"createSalesOrder"`
			}](t, s, apptest.CreateSalesOrder, map[string]any{"customer": "Иванов " + proto})
			ev := c.NextEvent("1")
			require.Equal(t, "doc.created", ev.Type)
			require.Equal(t, "sales_orders #"+so.CreateSalesOrder.ID, ev.Object)
			require.JSONEq(t, fmt.Sprintf(`{"id": %s, "no": %q, "entity": "sales_order"}`, so.CreateSalesOrder.ID, so.CreateSalesOrder.Number), string(ev.Payload))
			require.NotNil(t, ev.ProcessedAt)
			require.False(t, ev.ProcessedAt.Before(ev.CreatedAt))
			require.Equal(t, "Администратор", ev.Actor.DisplayName)
			require.NoError(t, c.Conn.Close())
		})
	}
}

func TestLiveFeedResumesFromCursor(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	type page struct {
		Events struct {
			Edges []struct{ Node apptest.FeedEvent } `json:"edges"`
		} `json:"events"`
	}
	for i := range 3 {
		apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": fmt.Sprint("К", i)})
	}
	var first page
	apptest.WaitFor(t, 10*time.Second, "3 processed events", func() bool {
		first = apptest.GQL[page](t, s, `{ events(filter: {processed: true}) { edges { node { id cursor processedAt } } } }`, nil)
		return len(first.Events.Edges) == 3
	})
	// Resume after the first processed event: the two processed after it
	// come first, then live ones. Processing order is the feed's, which
	// concurrent dispatch workers need not keep in id order.
	byFeed := []apptest.FeedEvent{first.Events.Edges[0].Node, first.Events.Edges[1].Node, first.Events.Edges[2].Node}
	slices.SortFunc(byFeed, func(a, b apptest.FeedEvent) int {
		return cmp.Compare(apptest.FeedSeq(t, a.Cursor), apptest.FeedSeq(t, b.Cursor))
	})
	c := apptest.DialWS(t, s, apptest.ProtoTransportWS)
	c.Init(s.Token)
	c.Subscribe("r", apptest.FeedSubscription, map[string]any{"after": byFeed[0].Cursor})
	e1, e2 := c.NextEvent("r"), c.NextEvent("r")
	require.Equal(t, byFeed[1].ID, e1.ID)
	require.Equal(t, byFeed[2].ID, e2.ID)
	apptest.WaitFor(t, 5*time.Second, "the subscription to go live", func() bool { return s.App.Feed().Subscribers() == 1 })
	apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": "живой"})
	e3 := c.NextEvent("r")
	require.Equal(t, "doc.created", e3.Type)
	require.NotEqual(t, e2.ID, e3.ID)
}

func TestWebsocketBadTokenClosed4403(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	for _, proto := range []string{apptest.ProtoTransportWS, apptest.ProtoLegacyWS} {
		t.Run(proto, func(t *testing.T) {
			c := apptest.DialWS(t, s, proto)
			c.Send(apptest.Message{Type: "connection_init", Payload: json.RawMessage(`{"Authorization": "Bearer erp_wrong"}`)})
			for {
				m, err := c.Read(5 * time.Second)
				if err != nil {
					var ce *websocket.CloseError
					require.True(t, errors.As(err, &ce), "want a close frame, got %v", err)
					require.Equal(t, 4403, ce.Code)
					return
				}
				require.NotEqual(t, "connection_ack", m.Type, "a bad token must never be acknowledged")
			}
		})
	}
}

func TestHTTPAuthentication(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	for _, token := range []string{"", "erp_wrong"} {
		status, res := s.Do(t, token, `{ items { id } }`, nil)
		require.Equal(t, http.StatusUnauthorized, status)
		require.Len(t, res.Errors, 1)
		require.Equal(t, "UNAUTHENTICATED", res.Errors[0].Extensions["code"])
		require.NotEmpty(t, res.Errors[0].Extensions["requestId"], "a refusal carries the request id too")
	}
	status, _ := s.Do(t, s.Token, `{ items { id } }`, nil)
	require.Equal(t, http.StatusOK, status)

	res, err := http.Get(s.URL + "/healthz")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
}

func TestMutationErrorsAreCodedAndWriteNothing(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	tests := []struct {
		name, query string
		vars        map[string]any
		code, field string
	}{
		{"unknown sku", `mutation { createSalesOrder(input: {customer: "X", lines: [{sku: "NOPE", quantity: "1"}]}) { id } }`, nil, "BAD_USER_INPUT", "input.lines.0.sku"},
		{"empty lines", `mutation { createPurchaseOrder(input: {supplier: "X", lines: []}) { id } }`, nil, "BAD_USER_INPUT", "input.lines"},
		{"zero quantity", `mutation { createSalesOrder(input: {customer: "X", lines: [{sku: "A1", quantity: "0"}]}) { id } }`, nil, "BAD_USER_INPUT", "input.lines.0.quantity"},
		{"malformed decimal", `mutation($q: Decimal!) { createSalesOrder(input: {customer: "X", lines: [{sku: "A1", quantity: $q}]}) { id } }`, map[string]any{"q": "two"}, "BAD_USER_INPUT", ""},
		{"unknown production order", `mutation { createWarehouseMove(input: {kind: ISSUE_TO_PRODUCTION, fromWarehouse: "MAIN", productionOrderId: "999", lines: [{sku: "A1", quantity: "1"}]}) { id } }`, nil, "BAD_USER_INPUT", "input.productionOrderId"},
		{"bad crm id", `mutation { receiveOrder(input: {source: CRM, externalId: "abc", customer: "X", lines: [{sku: "A1", quantity: "1"}]}) { duplicate } }`, nil, "BAD_USER_INPUT", "input.externalId"},
		{"duplicate sku", `mutation { createItem(input: {sku: "A1", name: "again", unit: "шт"}) { id } }`, nil, "CONFLICT", "input.sku"},
		{"bad cursor", `{ events(after: "garbage") { edges { cursor } } }`, nil, "BAD_USER_INPUT", "after"},
	}
	for _, tt := range tests {
		e := apptest.GQLErr(t, s, tt.query, tt.vars)
		require.Equal(t, tt.code, e.Extensions["code"], "%s: %s", tt.name, e.Message)
		if tt.field != "" {
			require.Equal(t, tt.field, e.Extensions["field"], tt.name)
		}
	}
	type counts struct {
		Events struct {
			Edges []struct{ Cursor string } `json:"edges"`
		} `json:"events"`
	}
	require.Empty(t, apptest.GQL[counts](t, s, `{ events { edges { cursor } } }`, nil).Events.Edges, "a refused mutation must journal nothing")
	var n int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM river_job WHERE kind = 'dispatch_event') + (SELECT count(*) FROM number_series)`).Scan(&n))
	require.Zero(t, n, "a refused mutation must enqueue nothing and take no number")
}

func TestReceiveOrderConcurrentOverHTTP(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	const q = `mutation { receiveOrder(input: {source: SHOP, externalId: "shop-7826d8468b3d", customer: "Web", lines: [{sku: "A1", quantity: "1"}]}) { duplicate order { id number } } }`
	type result struct {
		ReceiveOrder struct {
			Duplicate bool
			Order     struct{ ID, Number string }
		} `json:"receiveOrder"`
	}
	var wg sync.WaitGroup
	results := make([]result, 2)
	for i := range results {
		wg.Go(func() { results[i] = apptest.GQL[result](t, s, q, nil) })
	}
	wg.Wait()
	require.Equal(t, results[0].ReceiveOrder.Order, results[1].ReceiveOrder.Order, "both deliveries see the same order")
	require.NotEqual(t, results[0].ReceiveOrder.Duplicate, results[1].ReceiveOrder.Duplicate, "exactly one is the first")
	type events struct {
		Events struct {
			Edges []struct{ Node apptest.FeedEvent } `json:"edges"`
		} `json:"events"`
	}
	got := apptest.GQL[events](t, s, `{ events(filter: {types: ["order.received"]}) { edges { node { id payload } } } }`, nil)
	require.Len(t, got.Events.Edges, 1)
}

func TestInputEdgeCases(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	type received struct {
		ReceiveOrder struct {
			Duplicate bool
			Order     struct{ ID string }
		} `json:"receiveOrder"`
	}
	const crm = `mutation($id: String!) { receiveOrder(input: {source: CRM, externalId: $id, customer: "X", lines: [{sku: "A1", quantity: "1"}]}) { duplicate order { id } } }`
	first := apptest.GQL[received](t, s, crm, map[string]any{"id": "51015"})
	again := apptest.GQL[received](t, s, crm, map[string]any{"id": "051015"})
	require.True(t, again.ReceiveOrder.Duplicate, "leading zeros name the same CRM order")
	require.Equal(t, first.ReceiveOrder.Order.ID, again.ReceiveOrder.Order.ID)

	tests := []struct {
		name, query string
		vars        map[string]any
		field       string
	}{
		{"NUL in text", `mutation($c: String!) { createSalesOrder(input: {customer: $c, lines: [{sku: "A1", quantity: "1"}]}) { id } }`, map[string]any{"c": "a\x00b"}, "input.customer"},
		{"NUL in a filter", `query($t: [String!]) { events(filter: {types: $t}) { edges { cursor } } }`, map[string]any{"t": []string{"a\x00"}}, ""},
		{"unknown prefix", `mutation { setNumberSeriesStart(prefix: "XX", year: 2026, start: 5) }`, nil, "prefix"},
		{"first 0", `{ events(first: 0) { edges { cursor } } }`, nil, "first"},
		{"crm zero", crm, map[string]any{"id": "0"}, "input.externalId"},
		{"bad decimal", `mutation { createSalesOrder(input: {customer: "X", lines: [{sku: "A1", quantity: "x"}]}) { id } }`, nil, "input.lines.0.quantity"},
		{"huge quantity", `mutation($q: Decimal!) { createSalesOrder(input: {customer: "X", lines: [{sku: "A1", quantity: $q}]}) { id } }`, map[string]any{"q": "9" + strings.Repeat("0", 5000)}, "input.lines.0.quantity"},
		{"long garbage", `mutation($q: Decimal!) { createSalesOrder(input: {customer: "X", lines: [{sku: "A1", quantity: $q}]}) { id } }`, map[string]any{"q": strings.Repeat("x", 5000)}, ""},
		{"long fraction", `mutation($p: Decimal!) { createSalesOrder(input: {customer: "X", lines: [{sku: "A1", quantity: "1", price: $p}]}) { id } }`, map[string]any{"p": "1." + strings.Repeat("1", 5000)}, "input.lines.0.price"},
	}
	for _, tt := range tests {
		e := apptest.GQLErr(t, s, tt.query, tt.vars)
		require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"], "%s: %s", tt.name, e.Message)
		if tt.field != "" {
			require.Equal(t, tt.field, e.Extensions["field"], tt.name)
		}
		require.Less(t, len(e.Message), 200, "%s: the error repeats the input in full: %.300s", tt.name, e.Message)
	}
}
