package app_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"erp/app/apptest"
	"erp/app/config"
	"erp/db"
	"erp/jobs"
)

// replayView is a Replay as the tests read it.
type replayView struct {
	ID         string
	Status     string
	Total      int
	Done       int
	Dead       int
	FinishedAt *time.Time
	Subscriber struct{ Name string }
}

const replayFields = `id status total done dead finishedAt subscriber { name }`

func startReplay(t *testing.T, s *apptest.Server, vars map[string]any) replayView {
	t.Helper()
	return apptest.GQL[struct {
		ReplaySubscriber replayView `json:"replaySubscriber"`
	}](t, s, `mutation($s: String!, $after: String, $from: DateTime, $to: DateTime) {
		replaySubscriber(subscriber: $s, after: $after, from: $from, to: $to) { `+replayFields+` } }`, vars).ReplaySubscriber
}

func getReplay(t *testing.T, s *apptest.Server, id string) *replayView {
	t.Helper()
	return apptest.GQL[struct{ Replay *replayView }](t, s, `query($id: ID!) { replay(id: $id) { `+replayFields+` } }`,
		map[string]any{"id": id}).Replay
}

func waitReplayStatus(t *testing.T, s *apptest.Server, id, status string) replayView {
	t.Helper()
	var got *replayView
	apptest.WaitFor(t, 60*time.Second, "replay "+id+" "+status, func() bool {
		got = getReplay(t, s, id)
		return got != nil && got.Status == status
	})
	return *got
}

// userHistory creates users, each with changes of its role: events of
// type user.created then user.role_changed, several per document (the
// user), as the per-document order needs.
func userHistory(t *testing.T, s *apptest.Server, prefix string, users, changes int) {
	t.Helper()
	roles := []string{"SALES", "WAREHOUSE", "PLANNER", "VIEWER"}
	for u := range users {
		login := fmt.Sprintf("%s%d", prefix, u)
		apptest.GQL[map[string]any](t, s, `mutation($in: UserInput!) { createUser(input: $in) { id } }`,
			map[string]any{"in": map[string]any{"login": login, "displayName": login, "role": "VIEWER"}})
		for c := range changes {
			roleChange(t, s, login, roles[c%len(roles)])
		}
	}
}

func roleChange(t *testing.T, s *apptest.Server, login, role string) {
	t.Helper()
	apptest.GQL[map[string]any](t, s, `mutation($l: String!, $r: Role!) { setUserRole(login: $l, role: $r) { id } }`,
		map[string]any{"l": login, "r": role})
}

// sent is one request the receiver got, decoded.
type sent struct {
	webhookID string
	eventID   int64
	document  string
}

func sentRequests(t *testing.T, rcv *receiver) []sent {
	t.Helper()
	var out []sent
	for _, r := range rcv.received() {
		var body struct {
			ID       string
			Entity   string
			EntityID string
		}
		require.NoError(t, json.Unmarshal(r.body, &body))
		id, err := strconv.ParseInt(body.ID, 10, 64)
		require.NoError(t, err)
		out = append(out, sent{webhookID: r.header.Get("webhook-id"), eventID: id, document: body.Entity + "/" + body.EntityID})
	}
	return out
}

func countSQL(t *testing.T, s *apptest.Server, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, s.Pool.QueryRow(t.Context(), sql, args...).Scan(&n))
	return n
}

func TestReplayGivesANewWebhookItsHistoryInDocumentOrderWhileLiveEventsGoOn(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, func(c *config.Config) { c.ReplayBatch = 40 })
	// 300 events of history on 60 documents: each user's creation and
	// four role changes.
	userHistory(t, s, "hist", 60, 4)
	apptest.WaitAllProcessed(t, s)
	types := []string{"user.created", "user.role_changed"}
	history := map[string]bool{}
	for _, typ := range types {
		for _, id := range apptest.JournalIDs(t, s.Pool, typ) {
			history[id] = true
		}
	}
	require.GreaterOrEqual(t, len(history), 300)

	secret := newSecret(t)
	rcv, url := newReceiver(t, secret)
	apptest.CreateWebhook(t, s, "late-crm", url, secret, types)
	began := time.Now()
	r := startReplay(t, s, map[string]any{"s": "late-crm"})
	require.Equal(t, "RUNNING", r.Status)
	require.Equal(t, len(history), r.Total, "total counts the history the filter takes")
	require.Equal(t, "late-crm", r.Subscriber.Name)

	// 100 live events meanwhile: 50 role changes of users of the history
	// (documents the replay is going through) and 50 events of new users.
	var wg sync.WaitGroup
	wg.Go(func() {
		for u := range 50 {
			roleChange(t, s, fmt.Sprintf("hist%d", u), "ADMIN")
		}
	})
	wg.Go(func() { userHistory(t, s, "live", 10, 4) })
	wg.Wait()

	done := waitReplayStatus(t, s, r.ID, "DONE")
	t.Logf("replayed %d events in %s beside 100 live ones", done.Total, time.Since(began).Round(time.Millisecond))
	require.Equal(t, done.Total, done.Done)
	require.Zero(t, done.Dead)
	require.NotNil(t, done.FinishedAt)
	apptest.WaitAllProcessed(t, s)
	apptest.WaitFor(t, 30*time.Second, "every live delivery", func() bool {
		return countSQL(t, s, `SELECT count(*) FROM deliveries d JOIN subscribers s ON s.id = d.subscriber_id
			WHERE s.name = 'late-crm' AND d.status <> 'delivered'`) == 0
	})

	got := sentRequests(t, rcv)
	replayed := map[int64]int{}
	live := map[int64]int{}
	lastOfDoc := map[string]int64{}
	for _, g := range got {
		switch {
		case strings.HasPrefix(g.webhookID, "rpl_"):
			require.Equal(t, fmt.Sprintf("rpl_%s_%d_", r.ID, g.eventID), g.webhookID[:strings.LastIndex(g.webhookID, "_")+1])
			replayed[g.eventID]++
		case strings.HasPrefix(g.webhookID, "dlv_"):
			live[g.eventID]++
		default:
			t.Fatalf("webhook-id %q is neither a live nor a replayed delivery's", g.webhookID)
		}
		require.Greater(t, g.eventID, lastOfDoc[g.document], "%s: event %d arrived after %d", g.document, g.eventID, lastOfDoc[g.document])
		lastOfDoc[g.document] = g.eventID
	}
	require.Len(t, replayed, len(history), "every event of the history replayed")
	for id, n := range replayed {
		require.True(t, history[strconv.FormatInt(id, 10)], "event %d replayed is not of the history", id)
		require.Equal(t, 1, n, "event %d replayed %d times", id, n)
	}
	require.Len(t, live, 100, "the live events delivered meanwhile")
	for id, n := range live {
		require.False(t, history[strconv.FormatInt(id, 10)], "event %d of the history delivered live", id)
		require.Equal(t, 1, n, "live event %d delivered %d times", id, n)
	}
	require.Equal(t, 1, countSQL(t, s, `SELECT count(*) FROM events WHERE type = 'subscriber.replay_started' AND payload->>'replay_id' = $1`, r.ID))
	require.Equal(t, 1, countSQL(t, s, `SELECT count(*) FROM events WHERE type = 'subscriber.replay_finished'
		AND payload->>'replay_id' = $1 AND payload->>'status' = 'done'`, r.ID))
}

func TestReplayCancelStopsIt(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, func(c *config.Config) { c.ReplayBatch = 10 })
	userHistory(t, s, "u", 10, 3)
	apptest.WaitAllProcessed(t, s)
	secret := newSecret(t)
	rcv, url := newReceiver(t, secret)
	rcv.status.Store(503) // the first batch fails and waits for its retries
	apptest.CreateWebhook(t, s, "down", url, secret, []string{"user.created", "user.role_changed"})
	r := startReplay(t, s, map[string]any{"s": "down"})
	apptest.WaitFor(t, 20*time.Second, "the first batch attempted", func() bool {
		n, _, _ := rcv.counts()
		return n > 0
	})

	cancelled := apptest.GQL[struct {
		CancelReplay replayView `json:"cancelReplay"`
	}](t, s, `mutation($id: ID!) { cancelReplay(id: $id) { `+replayFields+` } }`, map[string]any{"id": r.ID}).CancelReplay
	require.Equal(t, "CANCELLED", cancelled.Status)
	require.NotNil(t, cancelled.FinishedAt)
	requestsAtCancel, _, _ := rcv.counts()
	rcv.status.Store(0)

	// The retries scheduled before the cancellation run and find it
	// cancelled; no further batch is written.
	apptest.WaitFor(t, 60*time.Second, "the replay's jobs finished", func() bool {
		return countSQL(t, s, `SELECT count(*) FROM river_job WHERE kind IN ('deliver_replayed', 'replay_batch')
			AND state NOT IN ('completed', 'cancelled', 'discarded')`) == 0
	})
	requests, _, _ := rcv.counts()
	// Attempts that read the replay as running before the cancellation
	// committed may still arrive: one per lease slot of the webhook at
	// most. Retries that ignored the cancellation would be many more
	// (ten failed deliveries, two attempts left each).
	maxInFlight := countSQL(t, s, `SELECT max_in_flight FROM subscribers WHERE name = 'down'`)
	require.LessOrEqual(t, requests, requestsAtCancel+maxInFlight, "requests after the cancellation")
	require.Equal(t, 10, countSQL(t, s, `SELECT count(*) FROM replay_deliveries WHERE replay_id = $1`, r.ID),
		"only the first batch was written")
	require.Equal(t, "CANCELLED", getReplay(t, s, r.ID).Status)
	require.Equal(t, 1, countSQL(t, s, `SELECT count(*) FROM events WHERE type = 'subscriber.replay_finished'
		AND payload->>'replay_id' = $1 AND payload->>'status' = 'cancelled'`, r.ID))

	e := apptest.GQLErr(t, s, `mutation($id: ID!) { cancelReplay(id: $id) { id } }`, map[string]any{"id": r.ID})
	require.Equal(t, "CONFLICT", e.Extensions["code"], e.Message)

	// The retention prune takes an ended replay's records, not the replay.
	_, err := jobs.PruneDeliveries(t.Context(), s.Pool, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Equal(t, 10, countSQL(t, s, `SELECT count(*) FROM replay_deliveries WHERE replay_id = $1`, r.ID), "ended within the retention")
	_, err = jobs.PruneDeliveries(t.Context(), s.Pool, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.Zero(t, countSQL(t, s, `SELECT count(*) FROM replay_deliveries WHERE replay_id = $1`, r.ID))
	require.Equal(t, "CANCELLED", getReplay(t, s, r.ID).Status)
}

func TestReplaySecondWhileOneRunsIsConflict(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	userHistory(t, s, "u", 3, 1)
	apptest.WaitAllProcessed(t, s)
	secret := newSecret(t)
	rcv, url := newReceiver(t, secret)
	rcv.status.Store(503) // keeps the replay running
	apptest.CreateWebhook(t, s, "busy", url, secret, nil)

	// Four at once: the unique index lets one through.
	const tries = 4
	results := make([]apptest.Response, tries)
	var wg sync.WaitGroup
	for i := range tries {
		wg.Go(func() {
			_, results[i] = s.Do(t, s.Token, `mutation { replaySubscriber(subscriber: "busy") { id } }`, nil)
		})
	}
	wg.Wait()
	var ok []string
	var conflicts []apptest.Error
	for _, res := range results {
		if len(res.Errors) == 0 {
			var d struct{ ReplaySubscriber struct{ ID string } }
			require.NoError(t, json.Unmarshal(res.Data, &d))
			ok = append(ok, d.ReplaySubscriber.ID)
			continue
		}
		conflicts = append(conflicts, res.Errors[0])
	}
	require.Len(t, ok, 1, "exactly one replay starts")
	require.Len(t, conflicts, tries-1)
	for _, e := range conflicts {
		require.Equal(t, "CONFLICT", e.Extensions["code"], e.Message)
		require.Contains(t, e.Message, "replay "+ok[0]+" of busy is running")
	}
	require.Equal(t, 1, countSQL(t, s, `SELECT count(*) FROM replays`))
	require.Equal(t, 1, countSQL(t, s, `SELECT count(*) FROM events WHERE type = 'subscriber.replay_started'`))

	// Once it ends, another may start.
	apptest.GQL[map[string]any](t, s, `mutation($id: ID!) { cancelReplay(id: $id) { id } }`, map[string]any{"id": ok[0]})
	rcv.status.Store(0)
	r := startReplay(t, s, map[string]any{"s": "busy"})
	require.NotEqual(t, ok[0], r.ID)
}

func TestReplayBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.CreateWebhook(t, s, "hook", "http://127.0.0.1:1/", "", nil)
	sales := apptest.RoleToken(t, s, "clerk", "SALES")
	before := countSQL(t, s, `SELECT count(*) FROM events`)
	cases := []struct {
		name, query, code, field string
		vars                     map[string]any
		message                  string // what the message says, when it matters
	}{
		{"unknown subscriber", `mutation { replaySubscriber(subscriber: "nobody") { id } }`, "NOT_FOUND", "", nil, ""},
		{"bad cursor", `mutation { replaySubscriber(subscriber: "hook", after: "not-a-cursor") { id } }`, "BAD_USER_INPUT", "after", nil, ""},
		{"from after to", `mutation { replaySubscriber(subscriber: "hook", from: "2026-12-02T00:00:00Z", to: "2026-12-01T00:00:00Z") { id } }`,
			"BAD_USER_INPUT", "from", nil, ""},
		{"built-in subscriber", `mutation { replaySubscriber(subscriber: "production_planning") { id } }`, "BAD_USER_INPUT", "subscriber", nil, ""},
		{"unknown replay", `mutation { cancelReplay(id: "999") { id } }`, "NOT_FOUND", "", nil, "there is no replay 999: not found"},
	}
	for _, c := range cases {
		e := apptest.GQLErr(t, s, c.query, c.vars)
		require.Equal(t, c.code, e.Extensions["code"], "%s: %s", c.name, e.Message)
		if c.field != "" {
			require.Equal(t, c.field, e.Extensions["field"], c.name)
		}
		if c.message != "" {
			require.Equal(t, c.message, e.Message, c.name)
		}
	}
	_, res := s.Do(t, sales, `mutation { replaySubscriber(subscriber: "hook") { id } }`, nil)
	require.NotEmpty(t, res.Errors)
	require.Equal(t, "FORBIDDEN", res.Errors[0].Extensions["code"])
	require.Nil(t, getReplay(t, s, "1"))
	require.Zero(t, countSQL(t, s, `SELECT count(*) FROM replays`))
	require.Zero(t, countSQL(t, s, `SELECT count(*) FROM replay_deliveries`))
	require.Zero(t, countSQL(t, s, `SELECT count(*) FROM river_job WHERE kind LIKE 'replay%' OR kind = 'deliver_replayed'`))
	require.Equal(t, before, countSQL(t, s, `SELECT count(*) FROM events`))
}

func TestReplayRangeAfterCursorAndTimes(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	userHistory(t, s, "a", 4, 1)
	apptest.WaitAllProcessed(t, s)
	type page struct {
		Events struct {
			Edges []struct {
				Cursor string
				Node   struct {
					ID        string
					CreatedAt time.Time
				}
			}
		}
	}
	// The newest user.role_changed so far: the replay starts after it.
	mark := apptest.GQL[page](t, s, `{ events(filter: {types: ["user.role_changed"]}, first: 1) { edges { cursor node { id createdAt } } } }`, nil).Events.Edges[0]
	userHistory(t, s, "b", 3, 1)
	apptest.WaitAllProcessed(t, s)

	secret := newSecret(t)
	rcv, url := newReceiver(t, secret)
	apptest.CreateWebhook(t, s, "ranged", url, secret, []string{"user.role_changed"})
	// After a cursor is after it in processing (feed) order, as
	// eventProcessed(after:) reads.
	seq := apptest.FeedSeq(t, mark.Cursor)
	want := countSQL(t, s, `SELECT count(*) FROM events WHERE type = 'user.role_changed' AND feed_seq > $1`, seq)
	require.GreaterOrEqual(t, want, 3)
	r := startReplay(t, s, map[string]any{"s": "ranged", "after": mark.Cursor})
	require.Equal(t, want, r.Total)
	waitReplayStatus(t, s, r.ID, "DONE")
	for _, g := range sentRequests(t, rcv) {
		require.Equal(t, 1, countSQL(t, s, `SELECT count(*) FROM events WHERE id = $1 AND feed_seq > $2`, g.eventID, seq),
			"event %d is not after the cursor", g.eventID)
	}
	n, distinct, _ := rcv.counts()
	require.Equal(t, want, n)
	require.Equal(t, want, distinct)

	// A time range that ends before the first event: nothing to send, done.
	empty := startReplay(t, s, map[string]any{"s": "ranged", "to": mark.Node.CreatedAt.Add(-time.Hour).Format(time.RFC3339Nano)})
	require.Zero(t, empty.Total)
	require.Equal(t, "DONE", waitReplayStatus(t, s, empty.ID, "DONE").Status)
	// From the mark's creation on (as the API shows the time).
	fromTime := mark.Node.CreatedAt
	since := countSQL(t, s, `SELECT count(*) FROM events WHERE type = 'user.role_changed' AND created_at >= $1`, fromTime)
	require.GreaterOrEqual(t, since, 4, "the mark and the three after it")
	from := startReplay(t, s, map[string]any{"s": "ranged", "from": fromTime.Format(time.RFC3339Nano)})
	require.Equal(t, since, from.Total)
	waitReplayStatus(t, s, from.ID, "DONE")
	n, _, _ = rcv.counts()
	require.Equal(t, want+since, n)
}

func TestReplayGoesOnPastABatchJobLeftRunning(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, func(c *config.Config) {
		c.DispatchInterval = time.Second
		c.ReplayBatch = 5
	})
	userHistory(t, s, "u", 4, 2)
	apptest.WaitAllProcessed(t, s)
	secret := newSecret(t)
	rcv, url := newReceiver(t, secret)
	apptest.CreateWebhook(t, s, "orphan", url, secret, []string{"user.created", "user.role_changed"})
	ctx := t.Context()
	sub, err := db.SubscriberByName(ctx, s.Pool, "orphan")
	require.NoError(t, err)

	// What a process killed inside the first batch's transaction leaves:
	// the replay committed, its batch job "running" (River rescues it only
	// after minutes, and it holds the job's unique key), no batch written.
	var r db.Replay
	var jobID int64
	require.NoError(t, pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		var err error
		if r, _, err = db.StartReplay(ctx, tx, nil, sub, db.ReplayRange{}); err != nil {
			return err
		}
		res, err := s.App.River().InsertTx(ctx, tx, jobs.ReplayBatchArgs{ReplayID: r.ID}, nil)
		if err != nil {
			return err
		}
		jobID = res.Job.ID
		_, err = tx.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() WHERE id = $1`, jobID)
		return err
	}))
	id := strconv.FormatInt(r.ID, 10)
	done := waitReplayStatus(t, s, id, "DONE")
	require.Equal(t, 12, done.Total)
	require.Equal(t, 12, done.Done)
	n, distinct, _ := rcv.counts()
	require.Equal(t, 12, distinct)
	// Delivery is at least once: a request is sent again only when its
	// lease ran out before its answer was recorded (a starved machine),
	// and the attempt log then says so.
	retaken := countSQL(t, s, `SELECT count(*) FROM delivery_attempts WHERE replay_id = $1
		AND error = 'no answer was recorded before the lease ran out'`, r.ID)
	require.Equal(t, 12+retaken, n, "every request beyond one per event is a retake of a lease that ran out")
	// The sweep went on with it, not the stuck job.
	require.Equal(t, 1, countSQL(t, s, `SELECT count(*) FROM river_job WHERE id = $1 AND state = 'running'`, jobID))
}
