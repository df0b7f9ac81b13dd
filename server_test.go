package main

import (
	"cmp"
	"encoding/json"
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

// wsClient is a GraphQL websocket client over a real socket, speaking either
// subprotocol.
type wsClient struct {
	t     *testing.T
	conn  *websocket.Conn
	proto string
}

const (
	protoTransportWS = "graphql-transport-ws"
	protoLegacyWS    = "graphql-ws"
)

type wsMessage struct {
	ID      string          `json:"id,omitempty"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

func dialWS(t *testing.T, s *testServer, proto string) *wsClient {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{proto}, HandshakeTimeout: 5 * time.Second}
	conn, res, err := d.Dial("ws"+strings.TrimPrefix(s.URL, "http")+"/graphql", nil)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, proto, conn.Subprotocol())
	t.Cleanup(func() { conn.Close() })
	return &wsClient{t: t, conn: conn, proto: proto}
}

func (c *wsClient) send(m any) {
	c.t.Helper()
	require.NoError(c.t, c.conn.WriteJSON(m))
}

// read returns the next message that is not a keepalive.
func (c *wsClient) read(timeout time.Duration) (wsMessage, error) {
	for {
		require.NoError(c.t, c.conn.SetReadDeadline(time.Now().Add(timeout)))
		var m wsMessage
		if err := c.conn.ReadJSON(&m); err != nil {
			return m, err
		}
		switch m.Type {
		case "ka", "pong":
			continue
		case "ping":
			c.send(wsMessage{Type: "pong"})
			continue
		}
		return m, nil
	}
}

func (c *wsClient) init(token string) {
	c.t.Helper()
	c.send(wsMessage{Type: "connection_init", Payload: json.RawMessage(fmt.Sprintf(`{"Authorization": "Bearer %s"}`, token))})
	m, err := c.read(5 * time.Second)
	require.NoError(c.t, err)
	require.Equal(c.t, "connection_ack", m.Type)
}

func (c *wsClient) subscribe(id, query string, vars map[string]any) {
	c.t.Helper()
	typ := "subscribe"
	if c.proto == protoLegacyWS {
		typ = "start"
	}
	payload, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	require.NoError(c.t, err)
	c.send(wsMessage{ID: id, Type: typ, Payload: payload})
}

type feedEvent struct {
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

// nextEvent reads the next eventProcessed result of subscription id.
func (c *wsClient) nextEvent(id string) feedEvent {
	c.t.Helper()
	m, err := c.read(10 * time.Second)
	require.NoError(c.t, err)
	want := "next"
	if c.proto == protoLegacyWS {
		want = "data"
	}
	require.Equal(c.t, want, m.Type, "payload: %s", m.Payload)
	require.Equal(c.t, id, m.ID)
	var p struct {
		Data struct {
			EventProcessed feedEvent `json:"eventProcessed"`
		} `json:"data"`
		Errors []gqlError `json:"errors"`
	}
	require.NoError(c.t, json.Unmarshal(m.Payload, &p))
	require.Empty(c.t, p.Errors)
	return p.Data.EventProcessed
}

const feedSubscription = `subscription($filter: EventFilter, $after: String) {
	eventProcessed(filter: $filter, after: $after) {
		id type object payload createdAt processedAt cursor actor { displayName }
	}
}`

const createSalesOrder = `mutation($customer: String!) {
	createSalesOrder(input: {customer: $customer, lines: [{sku: "A1", quantity: "2.500", price: "10"}]}) {
		id number status lines { lineNo sku quantity price }
	}
}`

func seedItem(t *testing.T, s *testServer) {
	t.Helper()
	gql[map[string]any](t, s, `mutation { createItem(input: {sku: "A1", name: "Стол", unit: "шт"}) { id } }`, nil)
	gql[map[string]any](t, s, `mutation { createWarehouse(input: {code: "MAIN", name: "Основной склад"}) { id } }`, nil)
}

func TestLiveFeedDeliversProcessedEvents(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, serverOpts{})
	seedItem(t, s)
	for _, proto := range []string{protoTransportWS, protoLegacyWS} {
		t.Run(proto, func(t *testing.T) {
			c := dialWS(t, s, proto)
			c.init(s.Token)
			// The previous subtest's socket is closed; its subscription ends.
			waitFor(t, 5*time.Second, "no live subscription", func() bool { return s.app.feed.Subscribers() == 0 })
			c.subscribe("1", feedSubscription, map[string]any{"filter": map[string]any{"types": []string{"doc.created"}, "entity": "sales_orders"}})
			waitFor(t, 5*time.Second, "the subscription to register", func() bool { return s.app.feed.Subscribers() == 1 })
			so := gql[struct {
				CreateSalesOrder struct{ ID, Number string } `json:"createSalesOrder"`
			}](t, s, createSalesOrder, map[string]any{"customer": "Иванов " + proto})
			ev := c.nextEvent("1")
			require.Equal(t, "doc.created", ev.Type)
			require.Equal(t, "sales_orders #"+so.CreateSalesOrder.ID, ev.Object)
			require.JSONEq(t, fmt.Sprintf(`{"id": %s, "no": %q, "entity": "sales_order"}`, so.CreateSalesOrder.ID, so.CreateSalesOrder.Number), string(ev.Payload))
			require.NotNil(t, ev.ProcessedAt)
			require.False(t, ev.ProcessedAt.Before(ev.CreatedAt))
			require.Equal(t, "Администратор", ev.Actor.DisplayName)
			require.NoError(t, c.conn.Close())
		})
	}
}

func TestLiveFeedResumesFromCursor(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, serverOpts{})
	seedItem(t, s)
	type page struct {
		Events struct {
			Edges []struct{ Node feedEvent } `json:"edges"`
		} `json:"events"`
	}
	for i := range 3 {
		gql[map[string]any](t, s, createSalesOrder, map[string]any{"customer": fmt.Sprint("К", i)})
	}
	var first page
	waitFor(t, 10*time.Second, "3 processed events", func() bool {
		first = gql[page](t, s, `{ events(filter: {processed: true}) { edges { node { id cursor processedAt } } } }`, nil)
		return len(first.Events.Edges) == 3
	})
	// Resume after the first processed event: the two processed after it
	// come first, then live ones. Processing order is the feed's, which
	// concurrent dispatch workers need not keep in id order.
	byFeed := []feedEvent{first.Events.Edges[0].Node, first.Events.Edges[1].Node, first.Events.Edges[2].Node}
	slices.SortFunc(byFeed, func(a, b feedEvent) int { return cmp.Compare(feedSeq(t, a.Cursor), feedSeq(t, b.Cursor)) })
	c := dialWS(t, s, protoTransportWS)
	c.init(s.Token)
	c.subscribe("r", feedSubscription, map[string]any{"after": byFeed[0].Cursor})
	e1, e2 := c.nextEvent("r"), c.nextEvent("r")
	require.Equal(t, byFeed[1].ID, e1.ID)
	require.Equal(t, byFeed[2].ID, e2.ID)
	waitFor(t, 5*time.Second, "the subscription to go live", func() bool { return s.app.feed.Subscribers() == 1 })
	gql[map[string]any](t, s, createSalesOrder, map[string]any{"customer": "живой"})
	e3 := c.nextEvent("r")
	require.Equal(t, "doc.created", e3.Type)
	require.NotEqual(t, e2.ID, e3.ID)
}

func TestWebsocketBadTokenClosed4403(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, serverOpts{})
	for _, proto := range []string{protoTransportWS, protoLegacyWS} {
		t.Run(proto, func(t *testing.T) {
			c := dialWS(t, s, proto)
			c.send(wsMessage{Type: "connection_init", Payload: json.RawMessage(`{"Authorization": "Bearer erp_wrong"}`)})
			for {
				m, err := c.read(5 * time.Second)
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
	s := newTestServer(t, serverOpts{})
	for _, token := range []string{"", "erp_wrong"} {
		status, res := s.do(t, token, `{ items { id } }`, nil)
		require.Equal(t, http.StatusUnauthorized, status)
		require.Len(t, res.Errors, 1)
		require.Equal(t, "UNAUTHENTICATED", res.Errors[0].Extensions["code"])
		require.NotEmpty(t, res.Errors[0].Extensions["requestId"], "a refusal carries the request id too")
	}
	status, _ := s.do(t, s.Token, `{ items { id } }`, nil)
	require.Equal(t, http.StatusOK, status)

	res, err := http.Get(s.URL + "/healthz")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
}

func TestMutationErrorsAreCodedAndWriteNothing(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, serverOpts{})
	seedItem(t, s)
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
		e := gqlErr(t, s, tt.query, tt.vars)
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
	require.Empty(t, gql[counts](t, s, `{ events { edges { cursor } } }`, nil).Events.Edges, "a refused mutation must journal nothing")
	var n int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM river_job WHERE kind = 'dispatch_event') + (SELECT count(*) FROM number_series)`).Scan(&n))
	require.Zero(t, n, "a refused mutation must enqueue nothing and take no number")
}

func TestReceiveOrderConcurrentOverHTTP(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, serverOpts{})
	seedItem(t, s)
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
		wg.Go(func() { results[i] = gql[result](t, s, q, nil) })
	}
	wg.Wait()
	require.Equal(t, results[0].ReceiveOrder.Order, results[1].ReceiveOrder.Order, "both deliveries see the same order")
	require.NotEqual(t, results[0].ReceiveOrder.Duplicate, results[1].ReceiveOrder.Duplicate, "exactly one is the first")
	type events struct {
		Events struct {
			Edges []struct{ Node feedEvent } `json:"edges"`
		} `json:"events"`
	}
	got := gql[events](t, s, `{ events(filter: {types: ["order.received"]}) { edges { node { id payload } } } }`, nil)
	require.Len(t, got.Events.Edges, 1)
}

func TestInputEdgeCases(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, serverOpts{})
	seedItem(t, s)
	type received struct {
		ReceiveOrder struct {
			Duplicate bool
			Order     struct{ ID string }
		} `json:"receiveOrder"`
	}
	const crm = `mutation($id: String!) { receiveOrder(input: {source: CRM, externalId: $id, customer: "X", lines: [{sku: "A1", quantity: "1"}]}) { duplicate order { id } } }`
	first := gql[received](t, s, crm, map[string]any{"id": "51015"})
	again := gql[received](t, s, crm, map[string]any{"id": "051015"})
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
		e := gqlErr(t, s, tt.query, tt.vars)
		require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"], "%s: %s", tt.name, e.Message)
		if tt.field != "" {
			require.Equal(t, tt.field, e.Extensions["field"], tt.name)
		}
		require.Less(t, len(e.Message), 200, "%s: the error repeats the input in full: %.300s", tt.name, e.Message)
	}
}
