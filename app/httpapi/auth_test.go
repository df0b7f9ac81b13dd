package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"erp/app/apptest"
	"erp/app/httpapi"
	"erp/graph"
)

// footprint counts every row a mutation could write.
func footprint(t *testing.T, s *apptest.Server) string {
	t.Helper()
	var out string
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT concat_ws(',',
		(SELECT count(*) FROM events), (SELECT count(*) FROM sales_orders), (SELECT count(*) FROM plan_prod_orders),
		(SELECT count(*) FROM wh_moves), (SELECT count(*) FROM wh_purchase_orders), (SELECT count(*) FROM items),
		(SELECT count(*) FROM warehouses), (SELECT count(*) FROM users), (SELECT count(*) FROM api_tokens WHERE revoked_at IS NULL),
		(SELECT count(*) FROM subscribers WHERE NOT paused), (SELECT coalesce(sum(last_value), 0) FROM number_series),
		(SELECT count(*) FROM deliveries), (SELECT string_agg(role, '' ORDER BY id) FROM users),
		(SELECT count(*) FROM replays WHERE status = 'running'), (SELECT count(*) FROM delivery_attempts))`).Scan(&out))
	return out
}

func TestEveryRootFieldDeclaresRoles(t *testing.T) {
	t.Parallel()
	schema := graph.NewExecutableSchema(graph.Config{}).Schema()
	for _, root := range []string{"Query", "Mutation", "Subscription"} {
		for _, f := range schema.Types[root].Fields {
			if strings.HasPrefix(f.Name, "__") {
				continue
			}
			require.NotNil(t, f.Directives.ForName("allow"), "%s.%s has no @allow: it must say who may call it", root, f.Name)
		}
	}
}

func TestEveryMutationByEveryRole(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	// A webhook that takes nothing.
	hook := apptest.GQL[struct {
		CreateWebhookSubscriber struct{ ID string } `json:"createWebhookSubscriber"`
	}](t, s, `mutation { createWebhookSubscriber(input: {name: "probe", url: "http://127.0.0.1:1/", condition: "false"}) { id } }`, nil).CreateWebhookSubscriber.ID
	so := apptest.GQL[struct {
		CreateSalesOrder struct{ ID string } `json:"createSalesOrder"`
	}](t, s, apptest.CreateSalesOrder, map[string]any{"customer": "seed"}).CreateSalesOrder.ID
	apptest.WaitAllProcessed(t, s)

	// Allowed roles besides ADMIN, who may do everything (the schema's @allow).
	mutations := []struct {
		name, query string
		vars        map[string]any
		allowed     []string
	}{
		{"createItem", `mutation { createItem(input: {sku: "R1", name: "n", unit: "шт"}) { id } }`, nil, []string{"PLANNER", "WAREHOUSE"}},
		{"createWarehouse", `mutation { createWarehouse(input: {code: "R1", name: "n"}) { id } }`, nil, []string{"WAREHOUSE"}},
		{"setBillOfMaterials", `mutation { setBillOfMaterials(sku: "A1", components: []) { id } }`, nil, []string{"PLANNER"}},
		{"setProductionWarehouse", `mutation { setProductionWarehouse(code: "MAIN") { id } }`, nil, []string{"WAREHOUSE"}},
		{"setNumberSeriesStart", `mutation { setNumberSeriesStart(prefix: "ЗП", year: 2030, start: 5) }`, nil, nil},
		{"createSalesOrder", apptest.CreateSalesOrder, map[string]any{"customer": "r"}, []string{"SALES"}},
		{"receiveOrder", `mutation { receiveOrder(input: {source: SHOP, externalId: "shop-role", customer: "r", lines: [{sku: "A1", quantity: "1"}]}) { duplicate } }`, nil, []string{"INTEGRATION", "SALES"}},
		{"receiveOrders", `mutation { receiveOrders(inputs: [{source: SHOP, externalId: "shop-roles", customer: "r", lines: [{sku: "A1", quantity: "1"}]}]) { duplicate } }`, nil, []string{"INTEGRATION", "SALES"}},
		{"createProductionOrder", `mutation { createProductionOrder(input: {sku: "A1", quantity: "1"}) { id } }`, nil, []string{"PLANNER"}},
		{"createWarehouseMove", `mutation { createWarehouseMove(input: {kind: RECEIPT, toWarehouse: "MAIN", lines: [{sku: "A1", quantity: "1"}]}) { id } }`, nil, []string{"WAREHOUSE"}},
		{"createPurchaseOrder", `mutation { createPurchaseOrder(input: {supplier: "s", lines: [{sku: "A1", quantity: "1"}]}) { id } }`, nil, []string{"WAREHOUSE"}},
		{"cancelSalesOrder", `mutation($id: ID!) { cancelSalesOrder(id: $id, version: 1, reason: "r") { id } }`, map[string]any{"id": so}, []string{"SALES"}},
		{"releaseProductionOrder", `mutation { releaseProductionOrder(id: "999", version: 1) { id } }`, nil, []string{"PLANNER"}},
		{"cancelProductionOrder", `mutation { cancelProductionOrder(id: "999", version: 1, reason: "r") { id } }`, nil, []string{"PLANNER"}},
		{"closePurchaseOrder", `mutation { closePurchaseOrder(id: "999", version: 1) { id } }`, nil, []string{"WAREHOUSE"}},
		{"cancelPurchaseOrder", `mutation { cancelPurchaseOrder(id: "999", version: 1, reason: "r") { id } }`, nil, []string{"WAREHOUSE"}},
		{"createWebhookSubscriber", `mutation { createWebhookSubscriber(input: {name: "role-hook", url: "http://127.0.0.1:1/"}) { id } }`, nil, nil},
		{"updateWebhookSubscriber", `mutation($id: ID!) { updateWebhookSubscriber(id: $id, input: {maxAttempts: 2}) { id } }`, map[string]any{"id": hook}, nil},
		// Without NATS_URL an admin's answer is BAD_USER_INPUT; others are refused first.
		{"createNatsSubscriber", `mutation { createNatsSubscriber(input: {name: "j", stream: "ERP", subjectPrefix: "erp"}) { id } }`, nil, nil},
		{"updateNatsSubscriber", `mutation($id: ID!) { updateNatsSubscriber(id: $id, input: {maxAttempts: 2}) { id } }`, map[string]any{"id": hook}, nil},
		{"pauseSubscriber", `mutation($id: ID!) { pauseSubscriber(id: $id) { id } }`, map[string]any{"id": hook}, nil},
		{"resumeSubscriber", `mutation($id: ID!) { resumeSubscriber(id: $id) { id } }`, map[string]any{"id": hook}, nil},
		{"redeliver", `mutation($id: ID!) { redeliver(eventId: $id, subscriber: "order_acceptance") { status } }`, map[string]any{"id": so}, nil},
		{"redeliverAll", `mutation { redeliverAll(filter: {subscriber: "order_acceptance"}) }`, nil, nil},
		{"createUser", `mutation { createUser(input: {login: "made-by-role", displayName: "x", role: VIEWER}) { id } }`, nil, nil},
		{"setUserRole", `mutation { setUserRole(login: "viewer", role: ADMIN) { id } }`, nil, nil},
		{"setUserSources", `mutation { setUserSources(login: "integration", sources: [SHOP, CRM]) { id } }`, nil, nil},
		{"issueToken", `mutation { issueToken(login: "viewer") { token } }`, nil, nil},
		{"revokeToken", `mutation { revokeToken(id: "1") { id } }`, nil, nil},
		{"purgeDeadDeliveries", `mutation { purgeDeadDeliveries(olderThan: "2000-01-01T00:00:00Z") }`, nil, nil},
		{"replaySubscriber", `mutation { replaySubscriber(subscriber: "probe") { id } }`, nil, nil},
		{"cancelReplay", `mutation { cancelReplay(id: "1") { id } }`, nil, nil},
		{"rotateWebhookSecret", `mutation($id: ID!) { rotateWebhookSecret(id: $id, graceSeconds: 0) { secret } }`, map[string]any{"id": hook}, nil},
		{"sendExampleEvent", `mutation { sendExampleEvent(subscriber: "probe", type: "doc.created") { webhookId } }`, nil, nil},
		// Moves and completion of an unknown document: NOT_FOUND when allowed, so they write nothing either way.
		{"completeProductionOrder", `mutation { completeProductionOrder(id: "999999", version: 1, toWarehouse: "MAIN") { id } }`, nil, []string{"PLANNER", "WAREHOUSE"}},
		{"postWarehouseMove", `mutation { postWarehouseMove(id: "999999", version: 1) { id } }`, nil, []string{"WAREHOUSE"}},
		{"cancelWarehouseMove", `mutation { cancelWarehouseMove(id: "999999", version: 1, reason: "r") { id } }`, nil, []string{"WAREHOUSE"}},
		{"reverseWarehouseMove", `mutation { reverseWarehouseMove(id: "999999", version: 1, reason: "r") { id } }`, nil, []string{"WAREHOUSE"}},
	}
	schema := graph.NewExecutableSchema(graph.Config{}).Schema()
	covered := map[string]bool{}
	for _, m := range mutations {
		covered[m.name] = true
	}
	for _, f := range schema.Mutation.Fields {
		require.True(t, covered[f.Name], "mutation %s is missing from the role table", f.Name)
	}

	roles := []string{"SALES", "WAREHOUSE", "PLANNER", "INTEGRATION", "VIEWER"}
	tokens := map[string]string{}
	for _, role := range roles {
		tokens[role] = apptest.RoleToken(t, s, strings.ToLower(role), role)
	}
	for _, m := range mutations {
		for _, role := range roles {
			before := footprint(t, s)
			_, res := s.Do(t, tokens[role], m.query, m.vars)
			forbidden := len(res.Errors) > 0 && res.Errors[0].Extensions["code"] == "FORBIDDEN"
			want := false
			for _, a := range m.allowed {
				want = want || a == role
			}
			if want {
				require.False(t, forbidden, "%s must be allowed for %s: %v", m.name, role, res.Errors)
				apptest.WaitAllProcessed(t, s) // its deliveries settle before the next footprint
				continue
			}
			require.True(t, forbidden, "%s must be FORBIDDEN for %s, got %+v", m.name, role, res.Errors)
			require.Equal(t, before, footprint(t, s), "a refused %s by %s wrote something", m.name, role)
		}
	}
	// Reads: everyone but the integration account.
	for _, role := range roles {
		_, res := s.Do(t, tokens[role], `{ events(first: 1) { edges { cursor } } }`, nil)
		if role == "INTEGRATION" {
			require.Equal(t, "FORBIDDEN", res.Errors[0].Extensions["code"])
		} else {
			require.Empty(t, res.Errors, role)
		}
	}
}

func TestExpiredAndRevokedTokensRefused(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.GQL[map[string]any](t, s, `mutation { createUser(input: {login: "clerk", displayName: "Клерк", role: SALES}) { id } }`, nil)
	issue := func(expires *time.Time) (string, string) {
		vars := map[string]any{}
		if expires != nil {
			vars["exp"] = expires.Format(time.RFC3339Nano)
		}
		res := apptest.GQL[struct {
			IssueToken struct {
				Token string
				Info  struct{ ID string }
			} `json:"issueToken"`
		}](t, s, `mutation($exp: DateTime) { issueToken(login: "clerk", expiresAt: $exp) { token info { id } } }`, vars)
		return res.IssueToken.Token, res.IssueToken.Info.ID
	}
	exp := time.Now().Add(1500 * time.Millisecond)
	expiring, _ := issue(&exp)
	revoked, revokedID := issue(nil)

	wsRefused := func(token string) {
		t.Helper()
		c := apptest.DialWS(t, s, apptest.ProtoTransportWS)
		c.Send(apptest.Message{Type: "connection_init", Payload: json.RawMessage(fmt.Sprintf(`{"Authorization": "Bearer %s"}`, token))})
		_, err := c.Read(5 * time.Second)
		var ce *websocket.CloseError
		require.True(t, errors.As(err, &ce), "want close 4403, got %v", err)
		require.Equal(t, 4403, ce.Code)
	}
	// Both work at first.
	for _, tok := range []string{expiring, revoked} {
		status, res := s.Do(t, tok, `{ me { login role } }`, nil)
		require.Equal(t, http.StatusOK, status)
		require.Empty(t, res.Errors)
	}
	apptest.GQL[map[string]any](t, s, `mutation($id: ID!) { revokeToken(id: $id) { revokedAt } }`, map[string]any{"id": revokedID})
	time.Sleep(time.Until(exp) + 100*time.Millisecond)
	for _, tok := range []string{expiring, revoked} {
		status, res := s.Do(t, tok, `{ me { login } }`, nil)
		require.Equal(t, http.StatusUnauthorized, status)
		require.Equal(t, "UNAUTHENTICATED", res.Errors[0].Extensions["code"])
		wsRefused(tok)
	}
	type journal struct {
		Events struct {
			Edges []struct{ Node apptest.FeedEvent }
		} `json:"events"`
	}
	j := apptest.GQL[journal](t, s, `{ events(filter: {entity: "users"}, first: 10) { edges { node { type payload } } } }`, nil)
	var types []string
	for _, e := range j.Events.Edges {
		types = append(types, e.Node.Type)
		require.NotContains(t, string(e.Node.Payload), "erp_", "a token must never enter the journal")
	}
	require.Equal(t, []string{"token.revoked", "token.issued", "token.issued", "user.created"}, types)
}

func TestQueryLimitsOnHTTPAndWebsocket(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	aliases := func(n int, field string) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "a%d: %s ", i, field)
		}
		return b.String()
	}
	nested := func(levels int) string {
		q := "id"
		for range levels / 2 {
			q = "deliveries { event { " + q + " } }"
		}
		return q
	}
	queries := map[string]string{
		"100,000 directives":  `{ items ` + strings.Repeat("@include(if: true) ", 100000) + `{ id } }`,
		"1,000 aliases":       `{ ` + aliases(1000, "events { edges { cursor } }") + ` }`,
		"aliases in fragment": `{ ...F } fragment F on Query { ` + aliases(1000, "events { edges { cursor } }") + ` }`,
		"50 levels":           `{ event(id: "1") { ` + nested(50) + ` } }`,
	}
	for name, q := range queries {
		_, res := s.Do(t, s.Token, q, nil)
		require.NotEmpty(t, res.Errors, name)
		require.Contains(t, []string{"", "null"}, string(res.Data), "%s must be refused before running", name)
		require.Contains(t, []any{"GRAPHQL_PARSE_FAILED", "COMPLEXITY_LIMIT_EXCEEDED", "BAD_USER_INPUT"}, res.Errors[0].Extensions["code"], "%s: %s", name, res.Errors[0].Message)
	}
	// 10 MB of variables: refused at the door.
	big := map[string]any{"v": strings.Repeat("x", 10<<20)}
	status, res := s.Do(t, s.Token, `query($v: String) { items { id } }`, big)
	require.Equal(t, http.StatusRequestEntityTooLarge, status)
	require.Equal(t, "BAD_USER_INPUT", res.Errors[0].Extensions["code"])

	// The same over a websocket subscription.
	subs := map[string]string{
		"100,000 directives":  `subscription { eventProcessed ` + strings.Repeat("@include(if: true) ", 100000) + `{ id } }`,
		"1,000 aliases":       `subscription { eventProcessed { ` + aliases(1000, "id") + ` } }`,
		"aliases in fragment": `subscription { eventProcessed { ...F } } fragment F on Event { ` + aliases(1000, "id") + ` }`,
		"50 levels":           `subscription { eventProcessed { ` + nested(50) + ` } }`,
	}
	c := apptest.DialWS(t, s, apptest.ProtoTransportWS)
	c.Init(s.Token)
	i := 0
	for name, q := range subs {
		i++
		id := fmt.Sprint("q", i)
		payload, _ := json.Marshal(map[string]any{"query": q})
		err := c.Conn.WriteJSON(apptest.Message{ID: id, Type: "subscribe", Payload: payload})
		var m apptest.Message
		if err == nil {
			m, err = c.Read(10 * time.Second)
		}
		for err == nil && m.Type == "complete" && m.ID != id {
			m, err = c.Read(10 * time.Second) // the previous subscription's end
		}
		if err != nil {
			// The 100,000-directive query is larger than a websocket message
			// may be (64 KiB): the server closes the socket (1009) — while
			// we may still be writing — and keeps going.
			require.Contains(t, name, "directives", "%s: %v", name, err)
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				require.Equal(t, websocket.CloseMessageTooBig, ce.Code, name)
			}
			c = apptest.DialWS(t, s, apptest.ProtoTransportWS)
			c.Init(s.Token)
			continue
		}
		// graphql-transport-ws: an "error" message, or (gqlgen, for limits
		// checked after validation) a "next" carrying only errors.
		require.Contains(t, []string{"error", "next"}, m.Type, name)
		require.Equal(t, id, m.ID)
		require.Contains(t, string(m.Payload), `"errors"`, name)
		require.NotContains(t, string(m.Payload), `"eventProcessed"`, "%s must not run", name)
	}
	// And the server still answers.
	status, res = s.Do(t, s.Token, `{ items { id } }`, nil)
	require.Equal(t, http.StatusOK, status)
	require.Empty(t, res.Errors)
}

func TestInternalErrorsLeakNothing(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	ctx := context.Background()
	_, err := s.Pool.Exec(ctx, `ALTER TABLE items RENAME TO items_gone`)
	require.NoError(t, err)
	_, res := s.Do(t, s.Token, `{ items { id } }`, nil)
	require.Len(t, res.Errors, 1)
	e := res.Errors[0]
	require.Equal(t, "INTERNAL", e.Extensions["code"])
	require.NotEmpty(t, e.Extensions["requestId"])
	require.Equal(t, "internal error", e.Message)
	body, _ := json.Marshal(res)
	for _, leak := range []string{"items_gone", "relation", "SQLSTATE", "pgx", ".go"} {
		require.NotContains(t, string(body), leak)
	}

	// The database stops answering altogether. A token not used yet, so
	// that authentication itself needs the database (a used one answers
	// from the cache for a second).
	fresh := apptest.GQL[struct {
		IssueToken struct{ Token string } `json:"issueToken"`
	}](t, s, `mutation { issueToken(login: "admin") { token } }`, nil).IssueToken.Token
	var dbName string
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT current_database()`).Scan(&dbName))
	admin, err := apptest.ConnectAdmin(t.Context(), s)
	require.NoError(t, err)
	defer func() { _ = admin.Close(ctx) }()
	_, err = admin.Exec(ctx, `ALTER DATABASE "`+dbName+`" ALLOW_CONNECTIONS false`)
	require.NoError(t, err)
	// Before admin closes (defers run last in, first out): the journal is
	// read again at the server's cleanup.
	defer func() { _, _ = admin.Exec(ctx, `ALTER DATABASE "`+dbName+`" ALLOW_CONNECTIONS true`) }()
	_, err = admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, dbName)
	require.NoError(t, err)
	s.Pool.Reset()
	status, res := s.Do(t, fresh, `{ items { id } }`, nil)
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Equal(t, "INTERNAL", res.Errors[0].Extensions["code"])
	require.NotEmpty(t, res.Errors[0].Extensions["requestId"])
	body, _ = json.Marshal(res)
	require.NotContains(t, string(body), "SQLSTATE")
	require.NotContains(t, string(body), dbName)

	// A websocket whose token cannot be checked is told to try again
	// later (1013, which clients retry), not that its token is bad.
	for _, proto := range []string{apptest.ProtoTransportWS, apptest.ProtoLegacyWS} {
		c := apptest.DialWS(t, s, proto)
		c.Send(apptest.Message{Type: "connection_init", Payload: json.RawMessage(`{"Authorization": "Bearer ` + fresh + `"}`)})
		require.Equal(t, httpapi.CloseTryAgainLater, c.CloseCode(5*time.Second, true), proto)
	}
}

func TestRevokingATokenClosesItsOpenWebsocket(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	token := apptest.RoleToken(t, s, "watcher", "VIEWER")
	c := apptest.DialWS(t, s, apptest.ProtoTransportWS)
	c.Init(token)
	c.Subscribe("live", apptest.FeedSubscription, nil)
	apptest.WaitFor(t, 5*time.Second, "the subscription", func() bool { return s.App.Feed().Subscribers() == 1 })

	toks := apptest.GQL[struct {
		Tokens []struct{ ID, Name string } `json:"tokens"`
	}](t, s, `{ tokens(login: "watcher") { id name } }`, nil)
	require.Len(t, toks.Tokens, 1)
	apptest.GQL[map[string]any](t, s, `mutation($id: ID!) { revokeToken(id: $id) { revokedAt } }`, map[string]any{"id": toks.Tokens[0].ID})

	// The socket is closed within a couple of seconds, its subscription ended.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := c.Read(time.Until(deadline))
		if err != nil {
			require.False(t, time.Now().After(deadline), "socket still open 10 s after its token was revoked")
			break
		}
	}
	apptest.WaitFor(t, 5*time.Second, "no live subscription", func() bool { return s.App.Feed().Subscribers() == 0 })
}

func TestARefusedFieldStopsTheWholeMutation(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	clerk := apptest.RoleToken(t, s, "clerk", "SALES")
	before := footprint(t, s)
	_, res := s.Do(t, clerk, `mutation {
		a: createSalesOrder(input: {customer: "ok", lines: [{sku: "A1", quantity: "1"}]}) { id }
		b: createItem(input: {sku: "NO", name: "n", unit: "шт"}) { id }
	}`, nil)
	require.NotEmpty(t, res.Errors)
	require.Equal(t, "FORBIDDEN", res.Errors[0].Extensions["code"])
	require.Equal(t, before, footprint(t, s), "the allowed first field must not have run")
}

// A field below the root that is more restricted than the root field
// (DeliveryAttempt, admins only) is refused in a query at its path, in
// every row, with the rest of the answer intact and one log line, however
// it is reached; left out by @include or @skip, it is not asked for.
func TestARestrictedFieldBelowTheRootIsRefusedAtItsPath(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(rcv.Close)
	apptest.CreateWebhook(t, s, "receiver", rcv.URL, "", nil)
	apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": "c"})
	apptest.WaitAllProcessed(t, s)
	ev := apptest.GQL[struct {
		Events struct {
			Edges []struct{ Node struct{ ID string } }
		}
	}](t, s, `{ events(first: 1, filter: {types: ["doc.created"]}) { edges { node { id } } } }`, nil).Events.Edges[0].Node.ID
	viewer := apptest.RoleToken(t, s, "viewer", "VIEWER")
	refused := []struct {
		name, query string
		vars        map[string]any
	}{
		{"in a page", `{ deliveries { edges { node { status attemptLog { at } } } } }`, nil},
		{"aliased", `{ d: deliveries { edges { node { log: attemptLog { at } } } } }`, nil},
		{"in a fragment", `{ events(first: 5) { edges { node { ...D } } } } fragment D on Event { deliveries { attemptLog { at } } }`, nil},
		{"in an inline fragment", `query($id: ID!) { event(id: $id) { ... on Event { deliveries { attemptLog { error } } } } }`, map[string]any{"id": ev}},
		{"included", `query($a: Boolean!) { deliveries { edges { node { attemptLog @include(if: $a) { at } } } } }`, map[string]any{"a": true}},
	}
	for _, tt := range refused {
		logged := refusals(t, s)
		_, res := s.Do(t, viewer, tt.query, tt.vars)
		require.NotEmpty(t, res.Errors, tt.name)
		for _, e := range res.Errors {
			require.Equal(t, "FORBIDDEN", e.Extensions["code"], tt.name)
			require.Equal(t, "Delivery.attemptLog: your role may not do this", e.Message, tt.name)
			require.Contains(t, []any{"attemptLog", "log"}, e.Path[len(e.Path)-1], "%s: the error is at the field: %v", tt.name, e.Path)
		}
		require.Regexp(t, `"(attemptLog|log)":null`, string(res.Data), "%s: the rest of the answer is intact", tt.name)
		require.Equal(t, logged+1, refusals(t, s), "%s: one log line, not one per row", tt.name)
	}
	allowed := []struct {
		name, query string
		vars        map[string]any
	}{
		{"not asked", `{ deliveries { edges { node { status attempts } } } }`, nil},
		{"not included", `query($a: Boolean!) { deliveries { edges { node { status attemptLog @include(if: $a) { at } } } } }`, map[string]any{"a": false}},
		{"skipped", `{ events(first: 5) { edges { node { ...D } } } } fragment D on Event { deliveries { attemptLog @skip(if: true) { at } } }`, nil},
	}
	for _, tt := range allowed {
		_, res := s.Do(t, viewer, tt.query, tt.vars)
		require.Empty(t, res.Errors, tt.name)
	}
	_, res := s.Do(t, s.Token, refused[0].query, nil)
	require.Empty(t, res.Errors, "an admin reads attempt logs")
}

// refusals counts the "permission refused" lines s logged so far.
func refusals(t *testing.T, s *apptest.Server) int {
	n := 0
	for _, rec := range s.Logs(t) {
		if rec["msg"] == "permission refused" {
			n++
		}
	}
	return n
}

// Token owners are cached for a moment (httpapi's tokenCacheTTL), so a
// busy client does not pay a token lookup per request; a role change or a
// revocation must still take effect at once on the instance that made it,
// and within the TTL on another instance sharing the database.
func TestTokenChangesTakeEffectDespiteTheCache(t *testing.T) {
	t.Parallel()
	a := apptest.New(t)
	b := apptest.NewOn(t, a.Pool)
	apptest.GQL[map[string]any](t, a, `mutation { createUser(input: {login: "clerk", displayName: "Клерк", role: SALES}) { id } }`, nil)
	res := apptest.GQL[struct {
		IssueToken struct {
			Token string
			Info  struct{ ID string }
		} `json:"issueToken"`
	}](t, a, `mutation { issueToken(login: "clerk") { token info { id } } }`, nil)
	token, id := res.IssueToken.Token, res.IssueToken.Info.ID
	role := func(s *apptest.Server) (int, string) {
		t.Helper()
		status, res := s.Do(t, token, `{ me { role } }`, nil)
		if status != http.StatusOK {
			return status, ""
		}
		var me struct{ Me struct{ Role string } }
		require.NoError(t, json.Unmarshal(res.Data, &me))
		return status, me.Me.Role
	}
	for _, s := range []*apptest.Server{a, b} { // both instances have it cached
		_, r := role(s)
		require.Equal(t, "SALES", r)
	}

	apptest.GQL[map[string]any](t, a, `mutation { setUserRole(login: "clerk", role: VIEWER) { id } }`, nil)
	_, r := role(a)
	require.Equal(t, "VIEWER", r, "a role change takes effect at once where it was made")
	apptest.WaitFor(t, 3*time.Second, "the role change on the other instance", func() bool { _, r := role(b); return r == "VIEWER" })

	apptest.GQL[map[string]any](t, a, `mutation($id: ID!) { revokeToken(id: $id) { revokedAt } }`, map[string]any{"id": id})
	status, _ := role(a)
	require.Equal(t, http.StatusUnauthorized, status, "a revocation takes effect at once where it was made")
	apptest.WaitFor(t, 3*time.Second, "the revocation on the other instance", func() bool { s, _ := role(b); return s == http.StatusUnauthorized })
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
	_ = res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
}
