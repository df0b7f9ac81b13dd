package app_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"erp/app/apptest"
)

// TestUpdatingABuiltInSubscriberSaysSo: updateWebhookSubscriber on a
// built-in subscriber is CONFLICT naming it as built in (not "not found"),
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
	require.Equal(t, "CONFLICT", e.Extensions["code"])
	require.Contains(t, e.Message, "(order_acceptance) is built in")

	e = apptest.GQLErr(t, s, `mutation { createWebhookSubscriber(input: {name: "h", url: "http://127.0.0.1:1/", secret: "whsec_abc"}) { id } }`, nil)
	require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"])
	require.Contains(t, e.Message, "createWebhookSubscriber makes")
	require.NotContains(t, e.Message, "NewWebhookSecret")
}
