package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"erp/app/apptest"
	"erp/db/pgtest"
)

// replayReceiver records every webhook request: its webhook-id, event and
// document, in arrival order. It lives in the test process, so it outlives
// the server it receives from.
type replayReceiver struct {
	mu   sync.Mutex
	reqs []replayRequest
}

type replayRequest struct {
	webhookID string
	eventID   int64
	document  string
}

func (r *replayReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	var ev struct{ ID, Entity, EntityID string }
	if err := json.Unmarshal(body, &ev); err != nil {
		http.Error(w, "not an event", http.StatusBadRequest)
		return
	}
	id, _ := strconv.ParseInt(ev.ID, 10, 64)
	// A receiver that takes a moment, so that the kill finds the replay
	// mid-way.
	time.Sleep(5 * time.Millisecond)
	r.mu.Lock()
	r.reqs = append(r.reqs, replayRequest{webhookID: req.Header.Get("webhook-id"), eventID: id, document: ev.Entity + "/" + ev.EntityID})
	r.mu.Unlock()
}

func (r *replayReceiver) received() []replayRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]replayRequest(nil), r.reqs...)
}

func TestProcessKillDuringReplayCompletesNoneTwice(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	token := adminToken(t)
	env := []string{"DISPATCH_INTERVAL=1s", "REPLAY_BATCH=25"}
	a := startChild(t, url, token, env...)
	api := clientFor(a, token)

	// History: 50 users, each created and its role changed three times.
	roles := []string{"SALES", "WAREHOUSE", "PLANNER"}
	for u := range 50 {
		login := fmt.Sprintf("u%d", u)
		apptest.GQL[map[string]any](t, api, `mutation($in: UserInput!) { createUser(input: $in) { id } }`,
			map[string]any{"in": map[string]any{"login": login, "displayName": login, "role": "VIEWER"}})
		for _, role := range roles {
			apptest.GQL[map[string]any](t, api, `mutation($l: String!, $r: Role!) { setUserRole(login: $l, role: $r) { id } }`,
				map[string]any{"l": login, "r": role})
		}
	}
	waitDBProcessed(t, url)
	total := countRows(t, url, `SELECT count(*) FROM events WHERE type IN ('user.created', 'user.role_changed')`)
	require.GreaterOrEqual(t, total, 200)

	rcv := &replayReceiver{}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	apptest.GQL[map[string]any](t, api, `mutation($in: WebhookSubscriberInput!) { createWebhookSubscriber(input: $in) { id } }`,
		map[string]any{"in": map[string]any{"name": "late", "url": srv.URL, "eventTypes": []string{"user.created", "user.role_changed"}}})
	started := apptest.GQL[struct {
		ReplaySubscriber struct {
			ID    string
			Total int
		} `json:"replaySubscriber"`
	}](t, api, `mutation { replaySubscriber(subscriber: "late") { id total } }`, nil).ReplaySubscriber
	require.Equal(t, total, started.Total)

	// Kill -9 once about a third has arrived.
	deadline := time.Now().Add(60 * time.Second)
	for len(rcv.received()) < total/3 {
		require.False(t, time.Now().After(deadline), "the replay did not get a third of the way")
		time.Sleep(5 * time.Millisecond)
	}
	a.kill()
	atKill := len(rcv.received())
	cursor := countRows(t, url, `SELECT cursor_id FROM replays WHERE id = `+started.ID)
	t.Logf("killed after %d of %d replayed requests, the cursor at event %d", atKill, total, cursor)
	require.Less(t, atKill, total, "the kill came mid-replay")

	// Restart: the sweep (at start, then every second) finds the running
	// replay and its open deliveries and goes on.
	b := startChild(t, url, token, env...)
	api = clientFor(b, token)
	type replayView struct {
		Replay struct {
			Status string
			Total  int
			Done   int
			Dead   int
		}
	}
	deadline = time.Now().Add(90 * time.Second)
	var r replayView
	for {
		r = apptest.GQL[replayView](t, api, `query($id: ID!) { replay(id: $id) { status total done dead } }`, map[string]any{"id": started.ID})
		if r.Replay.Status != "RUNNING" {
			break
		}
		require.False(t, time.Now().After(deadline), "the replay did not finish after the restart (done %d of %d)", r.Replay.Done, r.Replay.Total)
		time.Sleep(50 * time.Millisecond)
	}
	require.Equal(t, "DONE", r.Replay.Status)
	require.Equal(t, total, r.Replay.Done)
	require.Zero(t, r.Replay.Dead)

	// Each event arrived under one webhook-id, the replay's; a request the
	// kill cut off before its record committed is sent again under the
	// same id (at least once; receivers de-duplicate by it), never under
	// another. First arrivals keep each document's order.
	idsOf := map[int64]map[string]bool{}
	first := map[string]bool{}
	last := map[string]int64{}
	resent := 0
	for _, req := range rcv.received() {
		require.True(t, strings.HasPrefix(req.webhookID, "rpl_"+started.ID+"_"), "webhook-id %q", req.webhookID)
		if idsOf[req.eventID] == nil {
			idsOf[req.eventID] = map[string]bool{}
		}
		idsOf[req.eventID][req.webhookID] = true
		if first[req.webhookID] {
			resent++
			continue
		}
		first[req.webhookID] = true
		require.Greater(t, req.eventID, last[req.document], "%s: event %d after %d", req.document, req.eventID, last[req.document])
		last[req.document] = req.eventID
	}
	require.Len(t, idsOf, total, "every event of the history arrived")
	for id, ids := range idsOf {
		require.Len(t, ids, 1, "event %d arrived under %d webhook-ids", id, len(ids))
	}
	t.Logf("%d requests sent again after the kill under their webhook-id", resent)
	require.LessOrEqual(t, resent, 10, "only requests in flight at the kill are sent again")
	require.Zero(t, countRows(t, url, `SELECT count(*) FROM replay_deliveries WHERE status <> 'delivered'`))
	require.Equal(t, total, countRows(t, url, `SELECT count(*) FROM replay_deliveries WHERE replay_id = `+started.ID))
}
