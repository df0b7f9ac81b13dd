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

// TestWaitProcessedIsForThisRunsEvents: an event held since before the run
// (its webhook is paused) does not hold up the replay, which waits for its
// own events only; a wait that times out names the events still
// unprocessed and what each waits for; resumed, the event is processed.
func TestWaitProcessedIsForThisRunsEvents(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	t.Cleanup(hook.Close)
	sub := apptest.CreateWebhook(t, s, "held-users", hook.URL, "", []string{"user.created"})
	apptest.GQL[map[string]any](t, s, `mutation($id: ID!) { pauseSubscriber(id: $id) { id } }`, map[string]any{"id": sub})
	user := apptest.GQL[struct {
		CreateUser struct{ ID string } `json:"createUser"`
	}](t, s, `mutation { createUser(input: {login: "clerk", displayName: "Кладовщик", role: WAREHOUSE}) { id } }`, nil).CreateUser
	held := apptest.GQL[eventsData](t, s, `{ events(filter: {types: ["user.created"]}, first: 1) { edges { node { id processedAt } } } }`, nil).nodes()
	require.Len(t, held, 1)
	require.Nil(t, held[0].ProcessedAt, "the paused webhook holds user.created")

	c := &client{endpoint: s.URL + "/graphql", token: s.Token, http: &http.Client{Timeout: requestTimeout}}
	err := c.waitProcessed(t.Context(), 0, 300*time.Millisecond)
	require.Error(t, err)
	require.Contains(t, err.Error(), fmt.Sprintf(
		"1 of this run's events still unprocessed after 300ms: event %s (user.created, users #%s) waits for held-users (paused; pending, 0 attempts)",
		held[0].ID, user.ID))

	_, err = Replay(t.Context(), s.URL+"/graphql", s.Token, io.Discard)
	require.NoError(t, err, "the replay waits for its own events, not the held one")
	held = apptest.GQL[eventsData](t, s, `{ events(filter: {types: ["user.created"]}, first: 1) { edges { node { id processedAt } } } }`, nil).nodes()
	require.Nil(t, held[0].ProcessedAt, "still held")

	apptest.GQL[map[string]any](t, s, `mutation($id: ID!) { resumeSubscriber(id: $id) { id } }`, map[string]any{"id": sub})
	require.NoError(t, c.waitProcessed(t.Context(), 0, 20*time.Second))

	// A webhook that fails: the report gives its last error and when it
	// is tried again.
	refuser := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "receiver down", http.StatusServiceUnavailable)
	}))
	t.Cleanup(refuser.Close)
	apptest.CreateWebhook(t, s, "refused-users", refuser.URL, "", []string{"user.created"})
	head, err := c.newestEventID(t.Context())
	require.NoError(t, err)
	apptest.GQL[map[string]any](t, s, `mutation { createUser(input: {login: "clerk2", displayName: "Кладовщик 2", role: WAREHOUSE}) { id } }`, nil)
	apptest.WaitFor(t, 10*time.Second, "a failed attempt", func() bool {
		d := apptest.GQL[struct {
			Deliveries struct {
				Edges []struct{ Node struct{ Status string } }
			}
		}](t, s, `{ deliveries(filter: {subscriber: "refused-users"}, first: 1) { edges { node { status } } } }`, nil).Deliveries
		return len(d.Edges) == 1 && d.Edges[0].Node.Status == "FAILED"
	})
	err = c.waitProcessed(t.Context(), head, 300*time.Millisecond)
	require.Error(t, err)
	t.Logf("report: %v", err)
	require.Regexp(t, `event \d+ \(user\.created, users #\d+\) waits for refused-users \(failed, \d attempts; last error: .*503.*; next attempt \S+\)`, err.Error())
	require.NotContains(t, err.Error(), "held-users", "delivered: it waits for nothing")
}
