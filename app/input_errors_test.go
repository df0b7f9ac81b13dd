package app_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"erp/app/apptest"
)

// TestUpdatingABuiltInSubscriberSaysSo: updateWebhookSubscriber on a
// built-in subscriber is NOT_FOUND, as every webhook mutation answers for
// an id that is not a webhook, with a message naming it as built in,
// and a bad secret's error tells the user, not a Go function, how to make
// one.
func TestUpdatingABuiltInSubscriberSaysSo(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	subs := apptest.GQL[struct {
		Subscribers []struct{ ID, Name, Kind string }
	}](t, s, `{ subscribers { id name kind } }`, nil).Subscribers
	var builtin string
	for _, sub := range subs {
		if sub.Name == "order_acceptance" {
			builtin = sub.ID
		}
	}
	require.NotEmpty(t, builtin)
	update := `mutation($id: ID!, $in: WebhookSubscriberUpdate!) { updateWebhookSubscriber(id: $id, input: $in) { id } }`
	e := apptest.GQLErr(t, s, update, map[string]any{"id": builtin, "in": map[string]any{"timeoutMs": 2000}})
	require.Equal(t, "NOT_FOUND", e.Extensions["code"])
	require.Contains(t, e.Message, "(order_acceptance) is built in")

	e = apptest.GQLErr(t, s, `mutation { createWebhookSubscriber(input: {name: "h", url: "http://127.0.0.1:1/", secret: "whsec_abc"}) { id } }`, nil)
	require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"])
	require.Contains(t, e.Message, "createWebhookSubscriber makes")
	require.NotContains(t, e.Message, "NewWebhookSecret")
}

// TestAFilterNamingNothingIsAMistake: a journal, stock or delivery
// operation whose filter names an event type, item, warehouse or
// subscriber that does not exist is BAD_USER_INPUT or NOT_FOUND on that
// field, not an empty answer or 0.
func TestAFilterNamingNothingIsAMistake(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	tests := []struct {
		name, query, code, field, msg string
	}{
		{"event type", `{ events(filter: {types: ["doc.created", "nope"]}) { edges { cursor } } }`,
			"BAD_USER_INPUT", "filter.types.1", `unknown event type "nope"`},
		{"warehouse", `{ stockBalances(filter: {warehouse: "НЕТ"}) { edges { cursor } } }`,
			"BAD_USER_INPUT", "filter.warehouse", `unknown warehouse "НЕТ"`},
		{"item", `{ stockBalances(filter: {sku: "NOPE"}) { edges { cursor } } }`,
			"BAD_USER_INPUT", "filter.sku", `unknown item "NOPE"`},
		{"redeliver", `mutation { redeliverAll(filter: {subscriber: "nobody"}) }`,
			"NOT_FOUND", "", `no subscriber named "nobody"`},
		{"deliveries", `{ deliveries(filter: {subscriber: "nobody"}) { edges { cursor } } }`,
			"NOT_FOUND", "", `no subscriber named "nobody"`},
		{"dead deliveries", `{ deadDeliveries(subscriber: "nobody") { edges { cursor } } }`,
			"NOT_FOUND", "", `no subscriber named "nobody"`},
		{"purge", `mutation { purgeDeadDeliveries(olderThan: "2030-01-01T00:00:00Z", subscriber: "nobody") }`,
			"NOT_FOUND", "", `no subscriber named "nobody"`},
	}
	for _, tt := range tests {
		e := apptest.GQLErr(t, s, tt.query, nil)
		require.Equal(t, tt.code, e.Extensions["code"], "%s: %s", tt.name, e.Message)
		if tt.field != "" {
			require.Equal(t, tt.field, e.Extensions["field"], tt.name)
		}
		require.Contains(t, e.Message, tt.msg, tt.name)
	}
	// Known names still answer.
	apptest.GQL[map[string]any](t, s, `{ events(filter: {types: ["doc.created"]}) { edges { cursor } } stockBalances(filter: {sku: "A1", warehouse: "MAIN"}) { edges { cursor } } }`, nil)
	require.Zero(t, apptest.GQL[struct{ RedeliverAll int }](t, s, `mutation { redeliverAll(filter: {subscriber: "order_acceptance", status: DEAD}) }`, nil).RedeliverAll)
}
