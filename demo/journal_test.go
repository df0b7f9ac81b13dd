package demo

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"erp/app/apptest"
)

// TestWaitProcessedWaitsForBuiltinsNotWebhooks: a paused webhook and one
// that answers 503 hold no event, so the replay runs to its end beside
// them; a paused built-in subscriber holds its events, and a wait that
// times out names the events still unprocessed and what each waits for;
// resumed, the event is processed.
func TestWaitProcessedWaitsForBuiltinsNotWebhooks(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	t.Cleanup(hook.Close)
	refuser := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "receiver down", http.StatusServiceUnavailable)
	}))
	t.Cleanup(refuser.Close)
	every := []string{"user.created", "doc.created", "doc.status_changed", "order.received"}
	sub := apptest.CreateWebhook(t, s, "held", hook.URL, "", every)
	apptest.CreateWebhook(t, s, "refused", refuser.URL, "", every)
	apptest.GQL[map[string]any](t, s, `mutation($id: ID!) { pauseSubscriber(id: $id) { id } }`, map[string]any{"id": sub})
	apptest.GQL[map[string]any](t, s, `mutation { createUser(input: {login: "clerk", displayName: "Кладовщик", role: WAREHOUSE}) { id } }`, nil)

	c := &client{endpoint: s.URL + "/graphql", token: s.Token, http: &http.Client{Timeout: requestTimeout}}
	require.NoError(t, c.waitProcessed(t.Context(), 0, 20*time.Second), "webhooks hold no event")
	_, err := Replay(t.Context(), s.URL+"/graphql", s.Token, io.Discard)
	require.NoError(t, err, "the replay does not wait for a paused or a failing webhook")

	type subscribers struct {
		Subscribers []struct{ ID, Name string }
	}
	var acceptance string
	for _, sub := range apptest.GQL[subscribers](t, s, `{ subscribers { id name } }`, nil).Subscribers {
		if sub.Name == "order_acceptance" {
			acceptance = sub.ID
		}
	}
	require.NotEmpty(t, acceptance)
	apptest.GQL[map[string]any](t, s, `mutation($id: ID!) { pauseSubscriber(id: $id) { id } }`, map[string]any{"id": acceptance})
	head, err := c.newestEventID(t.Context())
	require.NoError(t, err)
	apptest.GQL[map[string]any](t, s, `mutation { receiveOrder(input: {source: SHOP, externalId: "shop-held", customer: "Web", lines: [{sku: "A1", quantity: "1"}]}) { duplicate } }`, nil)
	held := apptest.GQL[eventsData](t, s, `{ events(filter: {types: ["order.received"]}, first: 1) { edges { node { id processedAt } } } }`, nil).nodes()
	require.Len(t, held, 1)
	require.Nil(t, held[0].ProcessedAt, "the paused built-in subscriber holds order.received")

	err = c.waitProcessed(t.Context(), head, 300*time.Millisecond)
	require.Error(t, err)
	t.Logf("report: %v", err)
	require.Regexp(t, fmt.Sprintf(`event %s \(order\.received, sales_orders #\d+\) waits for order_acceptance \(paused; pending, 0 attempts\)`, held[0].ID), err.Error())
	require.NotContains(t, err.Error(), "held", "a webhook is never waited for")

	apptest.GQL[map[string]any](t, s, `mutation($id: ID!) { resumeSubscriber(id: $id) { id } }`, map[string]any{"id": acceptance})
	require.NoError(t, c.waitProcessed(t.Context(), head, 20*time.Second))
}
