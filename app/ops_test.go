package app_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"erp/app/apptest"
	"erp/jobs"
)

func TestReadyzFollowsTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := apptest.New(t)
	require.Equal(t, http.StatusOK, s.Get(t, "/readyz"))
	require.Equal(t, http.StatusOK, s.Get(t, "/healthz"))

	var dbName string
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT current_database()`).Scan(&dbName))
	admin, err := apptest.ConnectAdmin(t.Context(), s)
	require.NoError(t, err)
	defer func() { _ = admin.Close(ctx) }()
	_, err = admin.Exec(ctx, `ALTER DATABASE "`+dbName+`" ALLOW_CONNECTIONS false`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.Exec(ctx, `ALTER DATABASE "`+dbName+`" ALLOW_CONNECTIONS true`) })
	_, err = admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, dbName)
	require.NoError(t, err)
	apptest.WaitFor(t, 10*time.Second, "/readyz unready", func() bool { return s.Get(t, "/readyz") == http.StatusServiceUnavailable })
	require.Equal(t, http.StatusOK, s.Get(t, "/healthz"), "the process is up all the same")

	_, err = admin.Exec(ctx, `ALTER DATABASE "`+dbName+`" ALLOW_CONNECTIONS true`)
	require.NoError(t, err)
	apptest.WaitFor(t, 10*time.Second, "/readyz ready again", func() bool { return s.Get(t, "/readyz") == http.StatusOK })
}

func TestRetentionPrunesDeliveredAndPurgesDead(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	apptest.GQL[map[string]any](t, s, `mutation { createWebhookSubscriber(input: {name: "gone", url: "http://127.0.0.1:1/", eventTypes: ["doc.created"], maxAttempts: 1, timeoutMs: 1000}) { id } }`, nil)
	// Its doc.created goes dead; its order.received is delivered to the
	// built-in subscribers.
	apptest.GQL[map[string]any](t, s, `mutation { receiveOrder(input: {source: CRM, externalId: "70001", customer: "r", lines: [{sku: "A1", quantity: "1"}]}) { duplicate } }`, nil)
	apptest.WaitAllProcessed(t, s)
	count := func(status string) int {
		var n int
		require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM deliveries WHERE status = $1`, status).Scan(&n))
		return n
	}
	require.Equal(t, 1, count("dead"))
	delivered := count("delivered")
	require.Positive(t, delivered)

	// Nothing is old enough yet.
	n, err := jobs.PruneDeliveries(t.Context(), s.Pool, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Zero(t, n)
	purged := apptest.GQL[struct{ PurgeDeadDeliveries int }](t, s, `mutation($t: DateTime!) { purgeDeadDeliveries(olderThan: $t, subscriber: "order_acceptance") }`,
		map[string]any{"t": time.Now().Add(time.Hour).Format(time.RFC3339)})
	require.Zero(t, purged.PurgeDeadDeliveries, "another subscriber's")

	// An example's attempt is logged too (its request is refused).
	apptest.GQL[map[string]any](t, s, `mutation { sendExampleEvent(subscriber: "gone", type: "doc.created") { webhookId } }`, nil)

	// Later: delivered records go, and the attempt log (the dead one's
	// attempt and the example's); dead records stay until purged.
	var logged int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM delivery_attempts`).Scan(&logged))
	require.Equal(t, 2, logged, "the webhook's one attempt and its example")
	n, err = jobs.PruneDeliveries(t.Context(), s.Pool, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, int64(delivered+logged), n)
	require.Zero(t, count("delivered"))
	require.Equal(t, 1, count("dead"))
	purged = apptest.GQL[struct{ PurgeDeadDeliveries int }](t, s, `mutation($t: DateTime!) { purgeDeadDeliveries(olderThan: $t, subscriber: "gone") }`,
		map[string]any{"t": time.Now().Add(time.Hour).Format(time.RFC3339)})
	require.Equal(t, 1, purged.PurgeDeadDeliveries)
	require.Zero(t, count("dead"))
	var events int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM events WHERE processed_at IS NULL`).Scan(&events))
	require.Zero(t, events, "events stay processed")
}

// TestRetentionPrunesAuthChanges: the prune job deletes the auth changes
// (revocations, role changes) recorded before the retention period and
// keeps later ones; the token watch, reading on by position, still cuts a
// stream whose token is revoked after every row was pruned.
func TestRetentionPrunesAuthChanges(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	revoke := func(login string) {
		toks := apptest.GQL[struct {
			Tokens []struct{ ID string } `json:"tokens"`
		}](t, s, `query($l: String!) { tokens(login: $l) { id } }`, map[string]any{"l": login})
		require.Len(t, toks.Tokens, 1)
		apptest.GQL[map[string]any](t, s, `mutation($id: ID!) { revokeToken(id: $id) { revokedAt } }`, map[string]any{"id": toks.Tokens[0].ID})
	}
	seqs := func() []int64 {
		var got []int64
		require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT coalesce(array_agg(seq ORDER BY seq), '{}') FROM auth_changes`).Scan(&got))
		return got
	}

	apptest.RoleToken(t, s, "old", "VIEWER")
	apptest.RoleToken(t, s, "recent", "VIEWER")
	revoke("old")
	apptest.GQL[map[string]any](t, s, `mutation { setUserRole(login: "old", role: SALES) { id } }`, nil)
	_, err := s.Pool.Exec(t.Context(), `UPDATE auth_changes SET changed_at = now() - interval '2 hours'`)
	require.NoError(t, err)
	revoke("recent")
	all := seqs()
	require.Len(t, all, 3)

	n, err := jobs.PruneAuthChanges(t.Context(), s.Pool, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	require.Equal(t, all[2:], seqs(), "the recent revocation stays")

	n, err = jobs.PruneAuthChanges(t.Context(), s.Pool, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	require.Empty(t, seqs())

	cut := apptest.OpenSSE(t, s, apptest.RoleToken(t, s, "cut", "VIEWER"), apptest.FeedSubscription,
		map[string]any{"filter": map[string]any{"types": []string{"doc.created"}}})
	apptest.WaitFor(t, 5*time.Second, "the stream subscribed", func() bool { return s.App.Feed().Subscribers() == 1 })
	revoke("cut")
	requireCut(t, cut, "UNAUTHENTICATED")
}
