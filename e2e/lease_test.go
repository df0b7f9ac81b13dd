package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"erp/app/apptest"
	"erp/db"
	"erp/db/pgtest"
)

// hangOnceReceiver never answers its first request (it holds it until the
// test ends) and answers every later one 204; it notes each request's
// webhook-id. It lives in the test process, so it outlives the server.
type hangOnceReceiver struct {
	mu      sync.Mutex
	ids     []string
	at      []time.Time
	arrived chan struct{} // closed at the first request
	release chan struct{} // closed at cleanup: the held request returns
}

func (r *hangOnceReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.ids = append(r.ids, req.Header.Get("webhook-id"))
	r.at = append(r.at, time.Now())
	first := len(r.ids) == 1
	r.mu.Unlock()
	if first {
		close(r.arrived)
		<-r.release
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (r *hangOnceReceiver) webhookIDs() ([]string, []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ids...), append([]time.Time(nil), r.at...)
}

// A server killed -9 while a webhook request hangs leaves a lease, not a
// transaction: after the lease runs out the restarted server sends the
// delivery again under the same webhook-id, and the attempt log keeps both
// attempts, the first marked as never answered.
func TestProcessKillDuringSendAttemptsAgainWithTheSameWebhookID(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	token := adminToken(t)
	env := []string{"DISPATCH_INTERVAL=1s"}
	a := startChild(t, url, token, env...)
	api := clientFor(a, token)

	rcv := &hangOnceReceiver{arrived: make(chan struct{}), release: make(chan struct{})}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(rcv.release) })
	// Timeout 2 s: the lease runs out 2 s + its margin after the take.
	apptest.GQL[map[string]any](t, api, `mutation($in: WebhookSubscriberInput!) { createWebhookSubscriber(input: $in) { id } }`,
		map[string]any{"in": map[string]any{"name": "hangs-once", "url": srv.URL, "eventTypes": []string{"user.created"}, "timeoutMs": 2000}})
	apptest.GQL[map[string]any](t, api, `mutation($in: UserInput!) { createUser(input: $in) { id } }`,
		map[string]any{"in": map[string]any{"login": "kasse", "displayName": "Касса", "role": "VIEWER"}})

	select {
	case <-rcv.arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("the webhook request never arrived")
	}
	a.kill()

	// The event was processed when its record was written: the receiver
	// never held it.
	require.Equal(t, 1, countRows(t, url, `SELECT count(*) FROM events WHERE type = 'user.created' AND processed_at IS NOT NULL`))

	b := startChild(t, url, token, env...)
	_ = b
	pool, err := db.Connect(context.Background(), url)
	require.NoError(t, err)
	defer pool.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var status string
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT d.status FROM deliveries d JOIN subscribers s ON s.id = d.subscriber_id
			WHERE s.name = 'hangs-once'`).Scan(&status))
		if status == db.DeliveryDelivered {
			break
		}
		require.False(t, time.Now().After(deadline), "the delivery was not attempted again after the restart (status %s)", status)
		time.Sleep(100 * time.Millisecond)
	}

	ids, at := rcv.webhookIDs()
	require.Len(t, ids, 2, "one request before the kill, one after")
	require.NotEmpty(t, ids[0])
	require.Equal(t, ids[0], ids[1], "the same webhook-id, so that the receiver can de-duplicate")
	// Not before the lease ran out: the 2 s timeout and its 5 s margin
	// from the take, just before the first request (1 s of slack).
	require.GreaterOrEqual(t, at[1].Sub(at[0]), 6*time.Second, "the second attempt waited for the lease")

	type attemptRow struct {
		Attempt  int32
		Instance string
		Status   *string
		Error    *string
	}
	rows, err := pool.Query(context.Background(), `SELECT a.attempt, a.instance, a.status, a.error FROM delivery_attempts a
		JOIN subscribers s ON s.id = a.subscriber_id WHERE s.name = 'hangs-once' ORDER BY a.id`)
	require.NoError(t, err)
	var log []attemptRow
	for rows.Next() {
		var r attemptRow
		require.NoError(t, rows.Scan(&r.Attempt, &r.Instance, &r.Status, &r.Error))
		log = append(log, r)
	}
	require.NoError(t, rows.Err())
	require.Len(t, log, 2, "the attempt log keeps both attempts")
	require.Equal(t, int32(1), log[0].Attempt)
	require.Nil(t, log[0].Status, "the killed attempt has no outcome")
	require.NotNil(t, log[0].Error)
	require.Contains(t, *log[0].Error, "lease ran out")
	require.Equal(t, int32(2), log[1].Attempt)
	require.NotNil(t, log[1].Status)
	require.Equal(t, db.DeliveryDelivered, *log[1].Status)
	require.NotEqual(t, log[0].Instance, log[1].Instance, "the attempts came from the killed and the restarted server")
}
