package app_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"erp/app"
	"erp/app/apptest"
	"erp/app/config"
)

// feedEvent is what apptest.FeedSubscription selects of an event.
type feedEvent struct {
	ID, Cursor string
}

// nextFeedEvent reads the next event of st and requires it to be an
// eventProcessed event.
func nextFeedEvent(t *testing.T, st *apptest.SSE) feedEvent {
	t.Helper()
	ev, ok := st.Next(t, 10*time.Second)
	require.True(t, ok, "the stream ended")
	require.Equal(t, "next", ev.Name)
	require.Empty(t, ev.Data.Errors)
	var data struct {
		EventProcessed feedEvent `json:"eventProcessed"`
	}
	require.NoError(t, json.Unmarshal(ev.Data.Data, &data))
	return data.EventProcessed
}

// requireCut reads st to its end: an error with code, then the end of the
// response without a complete event.
func requireCut(t *testing.T, st *apptest.SSE, code string) {
	t.Helper()
	ev, ok := st.Next(t, 15*time.Second)
	require.True(t, ok, "an error event before the end")
	require.Equal(t, "next", ev.Name)
	require.Len(t, ev.Data.Errors, 1, "data: %s", ev.Data.Data)
	require.Equal(t, code, ev.Data.Errors[0].Extensions["code"], ev.Data.Errors[0].Message)
	_, ok = st.Next(t, 10*time.Second)
	require.False(t, ok, "cut: no complete event follows")
}

// TestSSEFeedResume: eventProcessed over SSE receives live events, and a
// stream opened again with after = the last cursor received gets exactly
// the events missed meanwhile, then live ones: none lost, none twice.
func TestSSEFeedResume(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	filter := map[string]any{"types": []string{"doc.created"}, "entity": "sales_orders"}
	order := func(customer string) {
		apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": customer})
	}

	st := apptest.OpenSSE(t, s, s.Token, apptest.FeedSubscription, map[string]any{"filter": filter})
	require.Equal(t, http.StatusOK, st.Status)
	apptest.WaitFor(t, 5*time.Second, "the stream subscribed", func() bool { return s.App.Feed().Subscribers() == 1 })
	require.Equal(t, 1, s.App.WatchedSockets(), "the stream is watched like a socket")
	var got []feedEvent
	for i := range 3 {
		order(fmt.Sprint("живой ", i))
		got = append(got, nextFeedEvent(t, st))
	}
	st.Close()
	apptest.WaitFor(t, 5*time.Second, "the stream let go", func() bool {
		return s.App.Feed().Subscribers() == 0 && s.App.WatchedSockets() == 0
	})

	for i := range 2 {
		order(fmt.Sprint("пропущенный ", i))
	}
	st = apptest.OpenSSE(t, s, s.Token, apptest.FeedSubscription, map[string]any{"filter": filter, "after": got[len(got)-1].Cursor})
	got = append(got, nextFeedEvent(t, st), nextFeedEvent(t, st))
	order("после")
	got = append(got, nextFeedEvent(t, st))

	ids := make([]string, len(got))
	for i, ev := range got {
		ids[i] = ev.ID
	}
	require.Equal(t, apptest.JournalIDs(t, s.Pool, "doc.created"), ids, "every event once, in feed order")
}

// TestSSERefused: a stream needs a token (401, as POST /graphql) and a
// role that may subscribe (FORBIDDEN before anything runs), and a token
// holds at most app.SSEMaxStreams at once (429).
func TestSSERefused(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)

	st := apptest.OpenSSE(t, s, "", apptest.FeedSubscription, nil)
	require.Equal(t, http.StatusUnauthorized, st.Status, "%s", st.Body)
	require.Contains(t, string(st.Body), "UNAUTHENTICATED")
	st = apptest.OpenSSE(t, s, "erp_wrong", apptest.FeedSubscription, nil)
	require.Equal(t, http.StatusUnauthorized, st.Status, "%s", st.Body)

	shop := apptest.RoleToken(t, s, "shop", "INTEGRATION")
	st = apptest.OpenSSE(t, s, shop, apptest.FeedSubscription, nil)
	ev, ok := st.Next(t, 10*time.Second)
	require.True(t, ok)
	require.Len(t, ev.Data.Errors, 1)
	require.Equal(t, "FORBIDDEN", ev.Data.Errors[0].Extensions["code"], ev.Data.Errors[0].Message)
	ev, _ = st.Next(t, 10*time.Second)
	require.Equal(t, "complete", ev.Name)
	require.Zero(t, s.App.Feed().Subscribers())

	viewer := apptest.RoleToken(t, s, "viewer", "VIEWER")
	for range app.SSEMaxStreams {
		require.Equal(t, http.StatusOK, apptest.OpenSSE(t, s, viewer, apptest.FeedSubscription, nil).Status)
	}
	st = apptest.OpenSSE(t, s, viewer, apptest.FeedSubscription, nil)
	require.Equal(t, http.StatusTooManyRequests, st.Status, "%s", st.Body)
	require.Contains(t, string(st.Body), "TOO_MANY_OPERATIONS")
	require.Equal(t, http.StatusOK, apptest.OpenSSE(t, s, s.Token, apptest.FeedSubscription, nil).Status, "another token's cap is its own")
}

// TestSSEKeepalive: an idle stream gets a ": ping" comment every
// keepalive period, so that proxies do not close it, and the server's
// HTTP timeouts do not cut it.
func TestSSEKeepalive(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, func(c *config.Config) { c.KeepAlive = 100 * time.Millisecond })
	st := apptest.OpenSSE(t, s, s.Token, apptest.FeedSubscription, map[string]any{"filter": map[string]any{"types": []string{"doc.created"}}})
	apptest.WaitFor(t, 10*time.Second, "3 pings", func() bool { return st.Pings.Load() >= 3 })
	select {
	case ev, ok := <-st.Events:
		require.Failf(t, "an idle stream got an event or ended", "%v %v", ev, ok)
	default:
	}
}

// TestSSEStreamsEndWithTheirRight: a stream whose token is revoked is cut
// (UNAUTHENTICATED), one whose user's role may no longer subscribe is cut
// (FORBIDDEN), other streams run on; at shutdown every stream is cut
// promptly.
func TestSSEStreamsEndWithTheirRight(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	// No event of these tests' own mutations.
	quiet := map[string]any{"filter": map[string]any{"types": []string{"doc.created"}}}
	revoked := apptest.OpenSSE(t, s, apptest.RoleToken(t, s, "revoked", "VIEWER"), apptest.FeedSubscription, quiet)
	demoted := apptest.OpenSSE(t, s, apptest.RoleToken(t, s, "demoted", "VIEWER"), apptest.FeedSubscription, quiet)
	kept := apptest.OpenSSE(t, s, s.Token, apptest.FeedSubscription, quiet)
	apptest.WaitFor(t, 5*time.Second, "3 streams subscribed", func() bool { return s.App.Feed().Subscribers() == 3 })

	toks := apptest.GQL[struct {
		Tokens []struct{ ID string } `json:"tokens"`
	}](t, s, `{ tokens(login: "revoked") { id } }`, nil)
	require.Len(t, toks.Tokens, 1)
	apptest.GQL[map[string]any](t, s, `mutation($id: ID!) { revokeToken(id: $id) { revokedAt } }`, map[string]any{"id": toks.Tokens[0].ID})
	requireCut(t, revoked, "UNAUTHENTICATED")

	apptest.GQL[map[string]any](t, s, `mutation { setUserRole(login: "demoted", role: INTEGRATION) { id } }`, nil)
	requireCut(t, demoted, "FORBIDDEN")
	apptest.WaitFor(t, 5*time.Second, "both let go", func() bool {
		return s.App.Feed().Subscribers() == 1 && s.App.WatchedSockets() == 1
	})

	require.NoError(t, s.Shutdown())
	requireCut(t, kept, "INTERNAL")
}

// TestSSEResponseFraming reads the bytes of SSE responses: an operation
// that ends sends `event: complete` with an empty data field (without
// it an EventSource drops the event, graphql-sse's PROTOCOL.md); a
// document that does not validate is answered in the stream, as the
// protocol asks; a request with no query is refused with 400 and a JSON
// error before any stream, as a plain POST is.
func TestSSEResponseFraming(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	// post returns the status, Content-Type and body of a response.
	post := func(body, accept string) (int, string, string) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL+"/graphql", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", accept)
		req.Header.Set("Authorization", "Bearer "+s.Token)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer func() { _ = res.Body.Close() }()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, res.Header.Get("Content-Type"), string(b)
	}
	const stream = "text/event-stream"

	for _, tc := range []struct {
		name, body, next string
	}{
		{"a query", `{"query":"{ __typename }"}`, `{"data":{"__typename":"Query"}`},
		{"a document that does not validate", `{"query":"{ nope }"}`, `{"errors":[{"message":"Cannot query field \"nope\" on type \"Query\".",`},
	} {
		status, media, body := post(tc.body, stream)
		require.Equal(t, http.StatusOK, status, "%s: %s", tc.name, body)
		require.Equal(t, stream, media, tc.name)
		require.True(t, strings.HasPrefix(body, ":\n\nevent: next\ndata: "+tc.next), "%s: got %q", tc.name, body)
		require.True(t, strings.HasSuffix(body, "}\n\nevent: complete\ndata:\n\n"), "%s: got %q", tc.name, body)
		require.Equal(t, 2, strings.Count(body, "event: "), "%s: one next, one complete: %q", tc.name, body)
	}

	for _, body := range []string{`{}`, `{"query":""}`, `{"variables":{}}`} {
		status, media, got := post(body, stream)
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", body, got)
		require.Equal(t, "application/json", media, body)
		require.JSONEq(t, `{"errors":[{"message":"the request has no \"query\"","extensions":{"code":"BAD_USER_INPUT"}}]}`, got, body)
		plainStatus, _, want := post(body, "application/json")
		require.Equal(t, plainStatus, status, "as a plain POST: %s", body)
		require.JSONEq(t, want, got, "as a plain POST: %s", body)
	}
}
