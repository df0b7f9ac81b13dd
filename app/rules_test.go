package app_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vektah/gqlparser/v2/ast"

	"erp/app/apptest"
	"erp/graph"
)

// What a leak would show: the receiver's credential in the webhook's URL
// and the receiver's answer, which lastError quotes.
const (
	urlCredential = "key=URL-CREDENTIAL-9c1e"
	receiverBody  = "RECEIVER-BODY-7f3a"
)

// nonAdmins are the roles the rules restrict; ADMIN reads everything.
var nonAdmins = []string{"VIEWER", "SALES", "WAREHOUSE", "PLANNER", "INTEGRATION"}

// rulesBundle is a server whose journal and delivery records hold every
// kind of restricted data: a webhook with a credential in its URL, dead
// deliveries with the receiver's answer, events of users and tokens
// delivered to it, a replay of it; and a token per role.
type rulesBundle struct {
	s          *apptest.Server
	tokens     map[string]string // role → token; ADMIN too
	docEvent   string            // a doc.created event the webhook took
	userEvent  string            // a user.created event the webhook took
	replay     string            // a replay of the webhook
	feedAfter  string            // cursor of an event processed before all of these
	usersTotal int               // events of entity users in the journal
}

func rulesSetup(t *testing.T) *rulesBundle {
	t.Helper()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(receiverBody))
	}))
	t.Cleanup(rcv.Close)
	b := &rulesBundle{s: s, tokens: map[string]string{"ADMIN": s.Token}}

	type page struct {
		Events struct {
			Edges []struct {
				Node struct{ ID, Type, Entity, Cursor string }
			}
		}
	}
	apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": "до всего"})
	apptest.WaitEventsProcessed(t, s)
	b.feedAfter = apptest.GQL[page](t, s, `{ events(first: 1) { edges { node { cursor } } } }`, nil).Events.Edges[0].Node.Cursor

	apptest.GQL[map[string]any](t, s, `mutation($in: WebhookSubscriberInput!) { createWebhookSubscriber(input: $in) { id } }`,
		map[string]any{"in": map[string]any{"name": "leaky", "url": rcv.URL + "/hook?" + urlCredential, "maxAttempts": 1}})
	apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": "после"})
	for _, role := range nonAdmins {
		b.tokens[role] = apptest.RoleToken(t, s, strings.ToLower(role), role)
	}
	apptest.WaitAllProcessed(t, s)
	b.replay = apptest.GQL[struct {
		ReplaySubscriber struct{ ID string } `json:"replaySubscriber"`
	}](t, s, `mutation { replaySubscriber(subscriber: "leaky") { id } }`, nil).ReplaySubscriber.ID
	apptest.WaitAllProcessed(t, s)

	for _, e := range apptest.GQL[page](t, s, `{ events(first: 500) { edges { node { id type entity } } } }`, nil).Events.Edges {
		switch {
		case e.Node.Entity == "users":
			b.usersTotal++
			if e.Node.Type == "user.created" {
				b.userEvent = e.Node.ID
			}
		case e.Node.Type == "doc.created" && b.docEvent == "":
			b.docEvent = e.Node.ID
		}
	}
	require.NotEmpty(t, b.userEvent)
	require.NotEmpty(t, b.docEvent)
	return b
}

// typeRef is an introspected type reference.
type typeRef struct {
	Kind   string   `json:"kind"`
	Name   string   `json:"name"`
	OfType *typeRef `json:"ofType"`
}

func (r typeRef) named() string {
	for r.OfType != nil {
		r = *r.OfType
	}
	return r.Name
}

type introField struct {
	Name string  `json:"name"`
	Type typeRef `json:"type"`
	Args []struct {
		Name         string  `json:"name"`
		Type         typeRef `json:"type"`
		DefaultValue *string `json:"defaultValue"`
	} `json:"args"`
}

const introspection = `{ __schema { queryType { name } subscriptionType { name }
	types { name kind fields { name
		args { name defaultValue type { kind name ofType { kind name ofType { kind name ofType { kind name } } } } }
		type { kind name ofType { kind name ofType { kind name ofType { kind name } } } } } } } }`

// schemaGraph is the object types of the schema as introspection shows
// them to a client, by name.
type schemaGraph struct {
	query, subscription string
	objects             map[string][]introField
}

func introspect(t *testing.T, s *apptest.Server) schemaGraph {
	t.Helper()
	res := apptest.GQL[struct {
		Schema struct {
			QueryType        struct{ Name string }
			SubscriptionType struct{ Name string }
			Types            []struct {
				Name, Kind string
				Fields     []introField
			}
		} `json:"__schema"`
	}](t, s, introspection, nil)
	g := schemaGraph{query: res.Schema.QueryType.Name, subscription: res.Schema.SubscriptionType.Name, objects: map[string][]introField{}}
	for _, typ := range res.Schema.Types {
		if typ.Kind == "OBJECT" && !strings.HasPrefix(typ.Name, "__") {
			g.objects[typ.Name] = typ.Fields
		}
	}
	return g
}

// step is one field of a path from a root type.
type step struct {
	object string // the type the field is of
	field  introField
}

// paths returns every path from root, at most depth fields long and
// through no type twice, whose last field satisfies target.
func (g schemaGraph) paths(root string, depth int, target func(object string, f introField) bool) [][]step {
	var out [][]step
	var walk func(object string, path []step, seen map[string]bool)
	walk = func(object string, path []step, seen map[string]bool) {
		for _, f := range g.objects[object] {
			if strings.HasPrefix(f.Name, "__") {
				continue
			}
			p := append(slices.Clone(path), step{object, f})
			if target(object, f) {
				out = append(out, p)
				continue // what lies below a refused field is refused with it
			}
			next := f.Type.named()
			if _, ok := g.objects[next]; ok && !seen[next] && len(p) < depth {
				seen[next] = true
				walk(next, p, seen)
				delete(seen, next)
			}
		}
	}
	walk(root, nil, map[string]bool{root: true})
	return out
}

var schema = graph.NewExecutableSchema(graph.Config{}).Schema()

// restrictedFor reports the fields and types whose @allow leaves a role out:
// "Type.field" for a field, "Type" for a type, from the server's schema
// (introspection does not show directives).
func restrictedFor(role string) func(object string, f introField) bool {
	return func(object string, f introField) bool {
		def := schema.Types[object].Fields.ForName(f.Name)
		return !allows(def.Directives, role) || !allows(schema.Types[f.Type.named()].Directives, role)
	}
}

// query writes the operation that selects path, with args for the
// required arguments (by "Type.field") and leaf below its last field.
func query(t *testing.T, op string, path []step, args map[string]string, leaf string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(op + " { ")
	for i, st := range path {
		b.WriteString(st.field.Name)
		key := st.object + "." + st.field.Name
		if a, ok := args[key]; ok {
			b.WriteString("(" + a + ")")
		} else {
			for _, arg := range st.field.Args {
				require.False(t, arg.Type.Kind == "NON_NULL" && arg.DefaultValue == nil,
					"%s needs argument %s: give it in the test's args", key, arg.Name)
			}
		}
		if i < len(path)-1 {
			b.WriteString(" { ")
		}
	}
	b.WriteString(" " + leaf + strings.Repeat(" }", len(path)))
	return b.String()
}

// valuesAt returns every value data holds at path (lists walked), each
// under the name of the path's last field.
func valuesAt(data any, path []step) []any {
	if len(path) == 0 {
		return []any{data}
	}
	switch d := data.(type) {
	case []any:
		var out []any
		for _, e := range d {
			out = append(out, valuesAt(e, path)...)
		}
		return out
	case map[string]any:
		v, ok := d[path[0].field.Name]
		if !ok {
			return nil
		}
		if len(path) == 1 {
			return []any{v}
		}
		return valuesAt(v, path[1:])
	}
	return nil
}

func names(path []step) []string {
	out := make([]string, len(path))
	for i, st := range path {
		out[i] = st.field.Name
	}
	return out
}

// requireRefusedOnPath checks that every error of res is FORBIDDEN at a
// field of path (its list indices aside), and that there is one.
func requireRefusedOnPath(t *testing.T, errs []apptest.Error, path []step, what string) {
	t.Helper()
	require.NotEmpty(t, errs, "%s: refused", what)
	want := names(path)
	for _, e := range errs {
		require.Equal(t, "FORBIDDEN", e.Extensions["code"], "%s: %+v", what, e)
		var at []string
		for _, p := range e.Path {
			if s, ok := p.(string); ok {
				at = append(at, s)
			}
		}
		require.NotEmpty(t, at, "%s: the error has a path", what)
		require.Equal(t, want[:len(at)], at, "%s: the error is on the query's path", what)
	}
}

func decode(t *testing.T, raw json.RawMessage) any {
	t.Helper()
	var v any
	if len(raw) > 0 {
		require.NoError(t, json.Unmarshal(raw, &v))
	}
	return v
}

// For every role, every path of the schema (by introspection) from Query
// to a field or type the role may not read is refused at a field of the
// path, and nothing restricted is in the answer; the admin reads each.
// Every path to an Event shows the admin events of users and tokens and
// every other role none: filtered from lists, one by id refused.
func TestEveryPathToRestrictedDataByEveryRole(t *testing.T) {
	t.Parallel()
	b := rulesSetup(t)
	g := introspect(t, b.s)
	const depth = 6

	// The rules the issue names, whatever the schema says.
	for _, role := range nonAdmins {
		restricted := restrictedFor(role)
		for _, name := range []string{"Subscriber.url", "Subscriber.secret", "Subscriber.hasSecret",
			"Delivery.responseBody", "Delivery.lastError", "Delivery.attemptLog", "Subscriber.exampleLog",
			"Subscriber.previousSecretValidUntil"} {
			object, field, _ := strings.Cut(name, ".")
			i := slices.IndexFunc(g.objects[object], func(f introField) bool { return f.Name == field })
			require.GreaterOrEqual(t, i, 0, name)
			require.True(t, restricted(object, g.objects[object][i]), "%s must be admins' only, not %s's", name, role)
			require.NotEqual(t, "NON_NULL", g.objects[object][i].Type.Kind, "%s is nullable, so that a refusal keeps its parents", name)
		}
	}

	args := map[string]string{
		"Query.event":           fmt.Sprintf("id: %q", b.docEvent),
		"Query.replay":          fmt.Sprintf("id: %q", b.replay),
		"Query.salesOrder":      `id: "1"`,
		"Query.productionOrder": `id: "1"`,
		"Query.warehouseMove":   `id: "1"`,
		"Query.purchaseOrder":   `id: "1"`,
		"Query.stockLedger":     `sku: "A1"`,
		"Query.testCondition":   fmt.Sprintf("condition: %q, eventId: %q", "true", b.docEvent),
	}
	markers := map[string]string{"url": urlCredential, "responseBody": receiverBody, "lastError": receiverBody}
	checked := 0
	for _, role := range nonAdmins {
		paths := g.paths(g.query, depth, restrictedFor(role))
		require.NotEmpty(t, paths)
		for _, p := range paths {
			last := p[len(p)-1]
			leaf := ""
			if _, ok := g.objects[last.field.Type.named()]; ok {
				leaf = "{ __typename }"
			}
			q := query(t, "query", p, args, leaf)

			_, res := b.s.Do(t, b.s.Token, q, nil)
			require.Empty(t, res.Errors, "admin: %s", q)
			require.NotEmpty(t, valuesAt(decode(t, res.Data), p), "admin: the data reaches %s: %s", last.field.Name, q)
			if m, ok := markers[last.field.Name]; ok {
				require.Contains(t, string(res.Data), m, "admin: %s", q)
			}

			_, res = b.s.Do(t, b.tokens[role], q, nil)
			requireRefusedOnPath(t, res.Errors, p, role+": "+q)
			for _, v := range valuesAt(decode(t, res.Data), p) {
				require.Nil(t, v, "%s: %s", role, q)
			}
			require.NotContains(t, string(res.Data), urlCredential, "%s: %s", role, q)
			require.NotContains(t, string(res.Data), receiverBody, "%s: %s", role, q)
			checked++
		}
	}
	t.Logf("%d queries of restricted fields, each as a role and as the admin", checked)

	// Events of users and tokens, wherever an Event is reached.
	args["Query.event"] = fmt.Sprintf("id: %q", b.userEvent)
	isEvent := func(_ string, f introField) bool { return f.Type.named() == "Event" }
	paths := g.paths(g.query, depth, isEvent)
	require.NotEmpty(t, paths)
	for _, p := range paths {
		q := query(t, "query", p, args, "{ entity }")
		_, res := b.s.Do(t, b.s.Token, q, nil)
		require.Empty(t, res.Errors, "admin: %s", q)
		require.Contains(t, string(res.Data), `"entity":"users"`, "admin: %s", q)
		for _, role := range nonAdmins {
			_, res := b.s.Do(t, b.tokens[role], q, nil)
			if len(res.Errors) > 0 {
				requireRefusedOnPath(t, res.Errors, p, role+": "+q)
			}
			require.NotContains(t, string(res.Data), `"users"`, "%s: %s", role, q)
		}
	}
	t.Logf("%d paths to Event", len(paths))

	// Filtered, not refused: a list's length and cursors hide them too.
	type page struct {
		Events struct {
			Edges    []struct{ Node struct{ Entity string } }
			PageInfo struct{ HasNextPage bool }
		}
	}
	all := apptest.GQL[page](t, b.s, `{ events(first: 500) { edges { node { entity } } pageInfo { hasNextPage } } }`, nil)
	_, res := b.s.Do(t, b.tokens["VIEWER"], `{ events(first: 500) { edges { node { entity } } pageInfo { hasNextPage } } }`, nil)
	require.Empty(t, res.Errors)
	var seen page
	require.NoError(t, json.Unmarshal(res.Data, &seen))
	require.Len(t, seen.Events.Edges, len(all.Events.Edges)-b.usersTotal)
	// A filter on them is refused, not answered empty.
	for _, entity := range []string{"users", " users"} {
		_, res = b.s.Do(t, b.tokens["VIEWER"], `query($e: String) { events(filter: {entity: $e}) { edges { cursor } } }`, map[string]any{"e": entity})
		require.Len(t, res.Errors, 1)
		require.Equal(t, "FORBIDDEN", res.Errors[0].Extensions["code"])
	}
}

// wsFirst subscribes to q on a fresh socket as token and returns the
// first message that is not a keepalive.
func wsFirst(t *testing.T, s *apptest.Server, token, q string, vars map[string]any) (*apptest.WS, apptest.Message) {
	t.Helper()
	c := apptest.DialWS(t, s, apptest.ProtoTransportWS)
	c.Init(token)
	c.Subscribe("1", q, vars)
	m, err := c.Read(10 * time.Second)
	require.NoError(t, err)
	return c, m
}

// refusal returns the errors of a subscription refused at its start: an
// error message, or a result with errors and no data.
func refusal(t *testing.T, m apptest.Message) []apptest.Error {
	t.Helper()
	var errs []apptest.Error
	if m.Type == "error" {
		require.NoError(t, json.Unmarshal(m.Payload, &errs))
		return errs
	}
	require.Equal(t, "next", m.Type, "%s", m.Payload)
	var res apptest.Response
	require.NoError(t, json.Unmarshal(m.Payload, &res))
	require.Contains(t, []string{"", "null"}, string(res.Data), "refused before any event: %s", m.Payload)
	return res.Errors
}

// The same over the websocket (graphql-transport-ws) with eventProcessed:
// a subscription that selects a field a role may not read is refused at
// the start; events of users and tokens reach admins only, from the
// back-fill and live, and a filter on them is refused at the start.
func TestEveryFeedPathToRestrictedDataByEveryRole(t *testing.T) {
	t.Parallel()
	b := rulesSetup(t)
	g := introspect(t, b.s)
	const depth = 6
	vars := map[string]any{"after": b.feedAfter}
	args := map[string]string{"Subscription.eventProcessed": "after: $after"}
	op := "subscription($after: String)"

	for _, role := range nonAdmins {
		paths := g.paths(g.subscription, depth, restrictedFor(role))
		require.NotEmpty(t, paths)
		for _, p := range paths {
			leaf := ""
			if _, ok := g.objects[p[len(p)-1].field.Type.named()]; ok {
				leaf = "{ __typename }"
			}
			q := query(t, op, p, args, leaf)
			_, m := wsFirst(t, b.s, b.tokens[role], q, vars)
			requireRefusedOnPath(t, refusal(t, m), p, role+": "+q)
		}
	}
	// The admin's feed carries them, so a refusal above is not of nothing.
	for _, p := range g.paths(g.subscription, depth, restrictedFor("VIEWER")) {
		if p[len(p)-1].field.Name != "url" {
			continue
		}
		c, m := wsFirst(t, b.s, b.s.Token, query(t, op, p, args, ""), vars)
		for !strings.Contains(string(m.Payload), urlCredential) {
			require.Equal(t, "next", m.Type, "%s", m.Payload)
			var err error
			m, err = c.Read(10 * time.Second)
			require.NoError(t, err)
		}
	}

	// Events: the back-fill from before any of them, then live ones.
	feed := func(token string, after any) *apptest.WS {
		c := apptest.DialWS(t, b.s, apptest.ProtoTransportWS)
		c.Init(token)
		c.Subscribe("1", `subscription($after: String) { eventProcessed(after: $after) { id type entity deliveries { event { entity } } } }`,
			map[string]any{"after": after})
		return c
	}
	read := func(c *apptest.WS) (entities []string) {
		for {
			m, err := c.Read(time.Second)
			if err != nil {
				return entities // no more within a second
			}
			require.Equal(t, "next", m.Type, "%s", m.Payload)
			require.NotContains(t, string(m.Payload), `"errors"`)
			var p struct {
				Data struct{ EventProcessed struct{ Entity string } } `json:"data"`
			}
			require.NoError(t, json.Unmarshal(m.Payload, &p))
			entities = append(entities, p.Data.EventProcessed.Entity)
		}
	}
	all := read(feed(b.s.Token, b.feedAfter))
	require.Contains(t, all, "users")
	for _, role := range []string{"VIEWER", "SALES", "WAREHOUSE", "PLANNER"} {
		got := read(feed(b.tokens[role], b.feedAfter))
		require.NotContains(t, got, "users", role)
		require.Len(t, got, len(all)-b.usersTotal, role)
	}
	_, m := wsFirst(t, b.s, b.tokens["INTEGRATION"], `subscription { eventProcessed { id } }`, nil)
	require.Equal(t, "FORBIDDEN", refusal(t, m)[0].Extensions["code"])

	// Live: once the stream has handed on an event written after it
	// started, what follows comes from the feed's fan-out.
	type event struct{ ID, Entity string }
	next := func(c *apptest.WS) event {
		m, err := c.Read(10 * time.Second)
		require.NoError(t, err)
		var p struct {
			Data struct{ EventProcessed event } `json:"data"`
		}
		require.NoError(t, json.Unmarshal(m.Payload, &p), "%s", m.Payload)
		return p.Data.EventProcessed
	}
	newest := func() int64 {
		var id int64
		require.NoError(t, b.s.Pool.QueryRow(t.Context(), `SELECT max(id) FROM events`).Scan(&id))
		return id
	}
	start := apptest.GQL[struct {
		Events struct{ Edges []struct{ Cursor string } }
	}](t, b.s, `{ events(first: 1) { edges { cursor } } }`, nil).Events.Edges[0].Cursor
	live := feed(b.tokens["VIEWER"], start)
	apptest.GQL[map[string]any](t, b.s, apptest.CreateSalesOrder, map[string]any{"customer": "live"})
	next(live)
	apptest.RoleToken(t, b.s, "late", "VIEWER") // user.created, token.issued
	last := newest()
	apptest.GQL[map[string]any](t, b.s, apptest.CreateSalesOrder, map[string]any{"customer": "after"})
	for {
		ev := next(live)
		require.NotEqual(t, "users", ev.Entity, "the live feed leaves them out")
		if id, _ := strconv.ParseInt(ev.ID, 10, 64); id > last {
			break
		}
	}

	for _, entity := range []string{"users", "users "} {
		_, m := wsFirst(t, b.s, b.tokens["VIEWER"], `subscription($f: EventFilter) { eventProcessed(filter: $f) { id } }`,
			map[string]any{"f": map[string]any{"entity": entity}})
		errs := refusal(t, m)
		require.Len(t, errs, 1, "a filter on entity %q is refused at the start", entity)
		require.Equal(t, "FORBIDDEN", errs[0].Extensions["code"])
	}
}

// The role table of docs/api.md says what the schema's @allow says: every
// field or type it names has exactly the roles ticked, and it names every
// root field and every field or type below the root that carries @allow.
func TestRoleTableMatchesTheSchema(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../docs/api.md")
	require.NoError(t, err)
	doc := string(raw)
	start := strings.Index(doc, "\n## Roles\n")
	require.GreaterOrEqual(t, start, 0, "docs/api.md has a Roles section")
	section := doc[start+1:]
	section = section[:strings.Index(section[3:], "\n## ")+3]

	roles := append([]string{"ADMIN"}, nonAdmins...)
	header := "| fields and types | " + strings.Join(roles, " | ") + " |"
	require.Contains(t, section, header)
	// def returns the field or type a name of the table means.
	def := func(name string) (field *ast.FieldDefinition, typ *ast.Definition) {
		if object, f, ok := strings.Cut(name, "."); ok {
			return schema.Types[object].Fields.ForName(f), nil
		}
		if typ := schema.Types[name]; typ != nil {
			return nil, typ
		}
		for _, root := range []*ast.Definition{schema.Query, schema.Mutation, schema.Subscription} {
			if f := root.Fields.ForName(name); f != nil {
				return f, nil
			}
		}
		return nil, nil
	}
	named := regexp.MustCompile("`([A-Za-z]+(?:\\.[A-Za-z]+)?)`")
	listed := map[string]bool{}
	for line := range strings.Lines(section) {
		cells := strings.Split(strings.TrimSpace(line), "|")
		if len(cells) != len(roles)+3 || !strings.Contains(cells[1], "`") {
			continue
		}
		var ticked []string
		for i, role := range roles {
			if strings.TrimSpace(cells[i+2]) == "✓" {
				ticked = append(ticked, role)
			}
		}
		for _, m := range named.FindAllStringSubmatch(cells[1], -1) {
			name := m[1]
			field, typ := def(name)
			require.True(t, field != nil || typ != nil, "the table names %s, which the schema does not have", name)
			listed[name] = true
			var want []string
			for _, role := range roles {
				if role == "ADMIN" || (field == nil || allows(field.Directives, role)) &&
					(typ == nil || allows(typ.Directives, role)) &&
					(field == nil || allows(schema.Types[field.Type.Name()].Directives, role)) {
					want = append(want, role)
				}
			}
			require.Equal(t, want, ticked, "the roles of %s", name)
		}
	}
	for _, root := range []*ast.Definition{schema.Query, schema.Mutation, schema.Subscription} {
		for _, f := range root.Fields {
			if !strings.HasPrefix(f.Name, "__") {
				require.True(t, listed[f.Name], "the role table misses %s.%s", root.Name, f.Name)
			}
		}
	}
	for _, typ := range schema.Types {
		if typ.BuiltIn || typ == schema.Query || typ == schema.Mutation || typ == schema.Subscription {
			continue
		}
		if typ.Directives.ForName("allow") != nil {
			require.True(t, listed[typ.Name], "the role table misses type %s", typ.Name)
		}
		for _, f := range typ.Fields {
			if f.Directives.ForName("allow") != nil {
				require.True(t, listed[typ.Name+"."+f.Name], "the role table misses %s.%s", typ.Name, f.Name)
			}
		}
	}
}

// allows reports whether the @allow among ds, if any, lists role.
func allows(ds ast.DirectiveList, role string) bool {
	d := ds.ForName("allow")
	if d == nil {
		return true
	}
	for _, c := range d.Arguments.ForName("roles").Value.Children {
		if c.Value.Raw == role {
			return true
		}
	}
	return false
}

// A stream started by an admin carries events of users and tokens; when
// its user becomes a viewer it ends (FORBIDDEN), since its filter was
// fixed at the start, while one that can carry none (entity sales_orders)
// stays open.
func TestAnAdminsStreamEndsWhenTheRoleIsLowered(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	token := apptest.RoleToken(t, s, "auditor", "ADMIN")
	c := apptest.DialWS(t, s, apptest.ProtoTransportWS)
	c.Init(token)
	c.Subscribe("all", apptest.FeedSubscription, nil)
	c.Subscribe("orders", apptest.FeedSubscription, map[string]any{"filter": map[string]any{"entity": "sales_orders"}})
	// On a socket of its own: the two streams' events need not come in order.
	c2 := apptest.DialWS(t, s, apptest.ProtoTransportWS)
	c2.Init(token)
	c2.Subscribe("created", apptest.FeedSubscription, map[string]any{"filter": map[string]any{"types": []string{"doc.created"}}})
	apptest.WaitFor(t, 5*time.Second, "three subscriptions", func() bool { return s.App.Feed().Subscribers() == 3 })

	apptest.GQL[map[string]any](t, s, `mutation { setUserRole(login: "auditor", role: VIEWER) { id } }`, nil)
	for {
		m, err := c.Read(10 * time.Second)
		require.NoError(t, err, "the unfiltered stream is still open")
		if m.Type == "next" {
			require.Equal(t, "all", m.ID, "%s", m.Payload) // user.role_changed, until the change is seen
			continue
		}
		require.Equal(t, "error", m.Type, "%s", m.Payload)
		require.Equal(t, "all", m.ID)
		require.Contains(t, string(m.Payload), `"code":"FORBIDDEN"`)
		break
	}
	apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": "после"})
	require.Equal(t, "doc.created", c.NextEvent("orders").Type, "the streams that carry no such event stay")
	require.Equal(t, "doc.created", c2.NextEvent("created").Type, "the streams that carry no such event stay")
}
