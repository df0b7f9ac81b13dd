package resolvers_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"erp/app/apptest"
)

const receiveOrder = `mutation($in: ReceiveOrderInput!) { receiveOrder(input: $in) { duplicate order { id number customer } } }`

func crmOrder(no, customer, price string) map[string]any {
	return map[string]any{"source": "CRM", "externalId": no, "customer": customer,
		"lines": []map[string]any{{"sku": "A1", "quantity": "2", "price": price}}}
}

// The shop's integration token can neither create a CRM order nor learn
// anything of one: not by sending it again (the duplicate's answer), nor
// with other data (the conflict's text), nor in a batch, nor by reading.
// The CRM's own token is answered as before, its conflicts naming the
// field without the stored values.
func TestShopTokenCannotSeeOrCreateCRMOrders(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	crm := apptest.IntegrationToken(t, s, "crm", "CRM")
	shop := apptest.IntegrationToken(t, s, "shop", "SHOP")
	const secret = "Секретный клиент"
	first := apptest.GQL[struct{ ReceiveOrder intakeAnswer }](t, s.As(crm), receiveOrder,
		map[string]any{"in": crmOrder("51015", secret, "1234.50")}).ReceiveOrder
	apptest.WaitAllProcessed(t, s)
	start := journalFootprint(t, s)

	for name, in := range map[string]map[string]any{
		"the same order":   crmOrder("51015", secret, "1234.50"),
		"other data":       crmOrder("51015", "Другой", "1"),
		"a new CRM number": crmOrder("777", "Новый", "1"),
	} {
		_, res := s.Do(t, shop, receiveOrder, map[string]any{"in": in})
		require.Len(t, res.Errors, 1, name)
		e := res.Errors[0]
		require.Equal(t, "FORBIDDEN", e.Extensions["code"], "%s: %s", name, e.Message)
		require.Contains(t, e.Message, "source CRM", name)
		require.NotContains(t, e.Message, first.Order.Number, name)
		require.NotContains(t, e.Message, secret, name)
		require.JSONEq(t, `null`, string(res.Data), name)
	}
	require.Equal(t, start, journalFootprint(t, s), "nothing written")

	// In a batch the CRM input is refused at its place, the shop's is taken.
	_, res := s.Do(t, shop, receiveOrders, map[string]any{"in": []map[string]any{
		crmOrder("51015", secret, "1234.50"), shopOrder("shop-own", "Свой", "A1"),
	}})
	var data struct{ ReceiveOrders []*intakeAnswer }
	require.NoError(t, json.Unmarshal(res.Data, &data))
	require.Len(t, res.Errors, 1)
	require.Equal(t, "FORBIDDEN", res.Errors[0].Extensions["code"])
	require.Equal(t, []any{"receiveOrders", float64(0)}, res.Errors[0].Path)
	require.Nil(t, data.ReceiveOrders[0])
	require.Equal(t, "Свой", data.ReceiveOrders[1].Order.Customer)
	require.Equal(t, start[0]+1, journalFootprint(t, s)[0], "the shop's order only")

	// Nothing the shop's token may read shows an order.
	for _, q := range []string{
		`{ salesOrder(number: "` + first.Order.Number + `") { customer } }`,
		`{ salesOrders(filter: {source: CRM}) { edges { node { customer } } } }`,
		`{ events { edges { node { payload } } } }`,
		`{ event(id: "1") { payload } }`,
	} {
		_, res := s.Do(t, shop, q, nil)
		require.Len(t, res.Errors, 1, q)
		require.Equal(t, "FORBIDDEN", res.Errors[0].Extensions["code"], q)
		require.NotContains(t, string(res.Data), secret, q)
	}
	me := apptest.GQL[struct{ Me struct{ Sources []string } }](t, s.As(shop), `{ me { sources } }`, nil)
	require.Equal(t, []string{"SHOP"}, me.Me.Sources)

	// The CRM's token: its duplicate answered, its conflict naming the
	// field only.
	again := apptest.GQL[struct{ ReceiveOrder intakeAnswer }](t, s.As(crm), receiveOrder,
		map[string]any{"in": crmOrder("051015", secret, "1234.50")}).ReceiveOrder
	require.True(t, again.Duplicate)
	require.Equal(t, first.Order, again.Order)
	for _, c := range []struct {
		in          map[string]any
		field, what string
	}{
		{crmOrder("51015", "Другой", "1234.50"), "input.customer", "the customer"},
		{crmOrder("51015", secret, "99.99"), "input.lines.0.price", "the price of line 1"},
		{map[string]any{"source": "CRM", "externalId": "51015", "customer": secret,
			"lines": []map[string]any{{"sku": "A1", "quantity": "3", "price": "1234.50"}}}, "input.lines.0.quantity", "the quantity of line 1"},
	} {
		e := apptest.GQLErr(t, s.As(crm), receiveOrder, map[string]any{"in": c.in})
		require.Equal(t, "CONFLICT", e.Extensions["code"], e.Message)
		require.Equal(t, c.field, e.Extensions["field"], e.Message)
		require.Equal(t, c.field+": "+c.what+" differs from crm order 51015 as first received ("+first.Order.Number+")", e.Message,
			"names the field, not the stored value")
	}

	// A clerk (SALES) receives for every source, as before.
	clerk := apptest.RoleToken(t, s, "clerk", "SALES")
	sold := apptest.GQL[struct{ ReceiveOrder intakeAnswer }](t, s.As(clerk), receiveOrder,
		map[string]any{"in": crmOrder("51016", "По телефону", "1")}).ReceiveOrder
	require.False(t, sold.Duplicate)
}

// An integration account's binding is given at creation, changed by an
// admin (journaled, in force at the account's next request), and lost
// with the role; an account bound to nothing receives nothing.
func TestIntegrationBindingIsJournaledAndApplies(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	const createUser = `mutation($in: UserInput!) { createUser(input: $in) { id } }`
	for _, c := range []struct {
		in    map[string]any
		field string
	}{
		{map[string]any{"login": "unbound", "displayName": "x", "role": "INTEGRATION"}, "input.sources"},
		{map[string]any{"login": "unbound", "displayName": "x", "role": "INTEGRATION", "sources": []string{}}, "input.sources"},
		{map[string]any{"login": "clerk", "displayName": "x", "role": "SALES", "sources": []string{"CRM"}}, "input.sources"},
	} {
		e := apptest.GQLErr(t, s, createUser, map[string]any{"in": c.in})
		require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"], e.Message)
		require.Equal(t, c.field, e.Extensions["field"], e.Message)
	}
	var users int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM users WHERE login IN ('unbound', 'clerk')`).Scan(&users))
	require.Zero(t, users, "a refused user is not created")

	shop := apptest.IntegrationToken(t, s, "shop", "SHOP", "SHOP")
	crm51 := map[string]any{"in": crmOrder("51", "К", "1")}
	require.Equal(t, "FORBIDDEN", apptest.GQLErr(t, s.As(shop), receiveOrder, crm51).Extensions["code"])

	const setSources = `mutation($l: String!, $s: [OrderSource!]!) { setUserSources(login: $l, sources: $s) { sources } }`
	set := apptest.GQL[struct{ SetUserSources struct{ Sources []string } }](t, s, setSources,
		map[string]any{"l": "shop", "s": []string{"SHOP", "CRM", "CRM"}})
	require.Equal(t, []string{"CRM", "SHOP"}, set.SetUserSources.Sources)
	apptest.GQL[map[string]any](t, s.As(shop), receiveOrder, crm51)

	apptest.GQL[map[string]any](t, s, setSources, map[string]any{"l": "shop", "s": []string{}})
	e := apptest.GQLErr(t, s.As(shop), receiveOrder, map[string]any{"in": shopOrder("shop-1", "К", "A1")})
	require.Equal(t, "FORBIDDEN", e.Extensions["code"])
	require.Contains(t, e.Message, "bound to no source")

	var payloads []string
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT array_agg(e.payload::text ORDER BY e.id) FROM events e
		JOIN users u ON u.id = e.entity_id WHERE e.entity = 'users' AND u.login = 'shop' AND e.type IN ('user.created', 'user.sources_changed')`).Scan(&payloads))
	require.Len(t, payloads, 3)
	require.JSONEq(t, `{"login": "shop", "role": "integration", "sources": ["shop"]}`, payloads[0])
	require.JSONEq(t, `{"sources": ["crm", "shop"]}`, payloads[1])
	require.JSONEq(t, `{"sources": []}`, payloads[2])

	// A user that stops being an integration account loses its sources,
	// and only an integration account is bound.
	apptest.GQL[map[string]any](t, s, setSources, map[string]any{"l": "shop", "s": []string{"SHOP"}})
	role := apptest.GQL[struct{ SetUserRole struct{ Sources []string } }](t, s,
		`mutation { setUserRole(login: "shop", role: SALES) { sources } }`, nil)
	require.Empty(t, role.SetUserRole.Sources)
	e = apptest.GQLErr(t, s, setSources, map[string]any{"l": "shop", "s": []string{"SHOP"}})
	require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"], e.Message)
	require.Equal(t, "login", e.Extensions["field"])
	e = apptest.GQLErr(t, s, setSources, map[string]any{"l": "nobody", "s": []string{"SHOP"}})
	require.Equal(t, "NOT_FOUND", e.Extensions["code"], e.Message)
}
