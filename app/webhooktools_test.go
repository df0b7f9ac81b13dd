package app_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"erp/app/apptest"
	"erp/db/catalog"
	"erp/jobs"
)

// verdict is whether one request verified with the old and with the new
// secret, each checked by the Standard Webhooks library.
type verdict struct{ old, new bool }

// rotationReceiver stands for two receivers on one URL: one that still
// holds the old secret and one that has switched to the new.
type rotationReceiver struct {
	mu       sync.Mutex
	old, new *standardwebhooks.Webhook
	verdicts []verdict
}

func newRotationReceiver(t *testing.T, oldSecret string) (*rotationReceiver, string) {
	t.Helper()
	old, err := standardwebhooks.NewWebhook(oldSecret)
	require.NoError(t, err)
	r := &rotationReceiver{old: old}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		v := verdict{old: r.old.Verify(body, req.Header) == nil}
		if r.new != nil {
			v.new = r.new.Verify(body, req.Header) == nil
		}
		r.verdicts = append(r.verdicts, v)
	}))
	t.Cleanup(srv.Close)
	return r, srv.URL
}

func (r *rotationReceiver) setNew(t *testing.T, secret string) {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.new = wh
}

// next creates a sales order and returns the verdict of the request it
// causes.
func (r *rotationReceiver) next(t *testing.T, s *apptest.Server) verdict {
	t.Helper()
	r.mu.Lock()
	n := len(r.verdicts)
	r.mu.Unlock()
	apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": "rotation"})
	apptest.WaitFor(t, 10*time.Second, "the webhook request", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.verdicts) > n
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.verdicts[n]
}

// rotatedView is a subscriber as rotateWebhookSecret and subscribers show
// its rotation.
type rotatedView struct {
	Name                     string
	Secret                   *string
	PreviousSecretValidUntil *time.Time
}

type rotation struct {
	RotateWebhookSecret rotatedView `json:"rotateWebhookSecret"`
}

const rotate = `mutation($id: ID!, $grace: Int) { rotateWebhookSecret(id: $id, graceSeconds: $grace) {
	name secret previousSecretValidUntil } }`

// readRotation is subscriber name as a later read shows it.
func readRotation(t *testing.T, s *apptest.Server, name string) rotatedView {
	t.Helper()
	subs := apptest.GQL[struct{ Subscribers []rotatedView }](t, s,
		`{ subscribers { name secret previousSecretValidUntil } }`, nil).Subscribers
	for _, sub := range subs {
		if sub.Name == name {
			return sub
		}
	}
	t.Fatalf("no subscriber %s", name)
	return rotatedView{}
}

func TestRotateWebhookSecretGracePeriod(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	oldSecret := newSecret(t)
	rcv, url := newRotationReceiver(t, oldSecret)
	hook := apptest.CreateWebhook(t, s, "rotating", url, oldSecret, []string{"doc.created"})
	require.Equal(t, verdict{old: true}, rcv.next(t, s))

	before := time.Now()
	rot := apptest.GQL[rotation](t, s, rotate, map[string]any{"id": hook, "grace": 3600}).RotateWebhookSecret
	require.Equal(t, "rotating", rot.Name)
	require.NotNil(t, rot.Secret, "the answer is a Subscriber whose secret is the new one")
	require.NotEqual(t, oldSecret, *rot.Secret)
	require.NotNil(t, rot.PreviousSecretValidUntil)
	require.WithinDuration(t, before.Add(time.Hour), *rot.PreviousSecretValidUntil, time.Minute)
	rcv.setNew(t, *rot.Secret)

	// Every later read shows the rotation in progress, never the secret.
	read := readRotation(t, s, "rotating")
	require.Nil(t, read.Secret, "the secret is shown once")
	require.NotNil(t, read.PreviousSecretValidUntil)
	require.True(t, rot.PreviousSecretValidUntil.Equal(*read.PreviousSecretValidUntil), "%s, then %s", rot.PreviousSecretValidUntil, read.PreviousSecretValidUntil)

	// In the grace period both receivers verify every request, retries
	// and redeliveries included (they are signed at each attempt).
	require.Equal(t, verdict{old: true, new: true}, rcv.next(t, s))
	require.Equal(t, verdict{old: true, new: true}, rcv.next(t, s))

	// The grace period ends (set in the database rather than waited for):
	// only the new secret verifies.
	_, err := s.Pool.Exec(t.Context(), `UPDATE subscribers SET previous_secret_until = now() - interval '1 second' WHERE name = 'rotating'`)
	require.NoError(t, err)
	require.Equal(t, verdict{new: true}, rcv.next(t, s))
	require.Nil(t, readRotation(t, s, "rotating").PreviousSecretValidUntil, "the grace period is over")

	// Journaled, without a secret.
	var payload string
	require.NoError(t, s.Pool.QueryRow(t.Context(),
		`SELECT payload::text FROM events WHERE type = 'subscriber.secret_rotated' AND entity = 'subscribers'`).Scan(&payload))
	require.Contains(t, payload, `"subscriber": "rotating"`)
	require.Contains(t, payload, `"previous_valid_until"`)
	require.NotContains(t, payload, "whsec_")
}

func TestRotateWebhookSecretWithoutGrace(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	oldSecret := newSecret(t)
	rcv, url := newRotationReceiver(t, oldSecret)
	hook := apptest.CreateWebhook(t, s, "rotating", url, oldSecret, []string{"doc.created"})

	rot := apptest.GQL[rotation](t, s, rotate, map[string]any{"id": hook, "grace": 0}).RotateWebhookSecret
	require.Nil(t, rot.PreviousSecretValidUntil, "no grace: the old secret ends at once")
	require.Nil(t, readRotation(t, s, "rotating").PreviousSecretValidUntil)
	rcv.setNew(t, *rot.Secret)
	require.Equal(t, verdict{new: true}, rcv.next(t, s))
}

func TestRotateWebhookSecretRefusals(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	oldSecret := newSecret(t)
	rcv, url := newRotationReceiver(t, oldSecret)
	hook := apptest.CreateWebhook(t, s, "rotating", url, oldSecret, []string{"doc.created"})

	for _, grace := range []int{-1, 2592001} {
		e := apptest.GQLErr(t, s, rotate, map[string]any{"id": hook, "grace": grace})
		require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"], grace)
		require.Equal(t, "graceSeconds", e.Extensions["field"], grace)
		require.Contains(t, e.Message, "2592000", grace)
		require.Contains(t, e.Message, fmt.Sprintf("not %d", grace), "the number as sent, not 2.592001e+06")
	}
	e := apptest.GQLErr(t, s, rotate, map[string]any{"id": "999999", "grace": 60})
	require.Equal(t, "NOT_FOUND", e.Extensions["code"])
	// A built-in subscriber has no secret to rotate.
	var builtin string
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT id::text FROM subscribers WHERE kind = 'builtin' LIMIT 1`).Scan(&builtin))
	e = apptest.GQLErr(t, s, rotate, map[string]any{"id": builtin, "grace": 60})
	require.Equal(t, "NOT_FOUND", e.Extensions["code"])
	require.Contains(t, e.Message, "is built in")

	// Nothing changed: the old secret alone still signs, nothing journaled.
	require.Equal(t, verdict{old: true}, rcv.next(t, s))
	require.Empty(t, apptest.JournalIDs(t, s.Pool, "subscriber.secret_rotated"))
}

type conditionResult struct {
	Matches      *bool
	Error        *string
	Line, Column *int
}

type conditionTest struct {
	TestCondition conditionResult `json:"testCondition"`
}

const testCondition = `query($c: String!, $id: ID!) { testCondition(condition: $c, eventId: $id) { matches error line column } }`

// requireMatch checks a result of a condition that compiled: whether it
// matched and, unless err is "", that evaluating failed with err.
func requireMatch(t *testing.T, got conditionResult, matches bool, err, cond string) {
	t.Helper()
	require.NotNil(t, got.Matches, cond)
	require.Equal(t, matches, *got.Matches, cond)
	require.Nil(t, got.Line, cond)
	require.Nil(t, got.Column, cond)
	if err == "" {
		require.Nil(t, got.Error, cond)
		return
	}
	require.NotNil(t, got.Error, cond)
	require.Contains(t, *got.Error, err, cond)
}

func TestTestCondition(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": "Ромашка"})
	apptest.WaitEventsProcessed(t, s)
	ids := apptest.JournalIDs(t, s.Pool, "doc.created")
	require.NotEmpty(t, ids)
	ev := ids[len(ids)-1]
	viewer := apptest.RoleToken(t, s, "viewer", "VIEWER")
	apptest.WaitAllProcessed(t, s)
	var subscribers, events int
	count := func() (int, int) {
		var subs, evs int
		require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM subscribers), (SELECT count(*) FROM events)`).Scan(&subs, &evs))
		return subs, evs
	}
	subscribers, events = count()

	for _, tt := range []struct {
		cond    string
		matches bool
		err     string
	}{
		{`event.type == "doc.created" && event.payload.entity == "sales_order"`, true, ""},
		{`event.payload.entity == "prod_order"`, false, ""},
		{`event.payload.nosuchkey == 1`, false, "nosuchkey"},
	} {
		got := apptest.GQL[conditionTest](t, s, testCondition, map[string]any{"c": tt.cond, "id": ev}).TestCondition
		requireMatch(t, got, tt.matches, tt.err, tt.cond)
	}

	// A broken condition is an answer, not an error: no match, why, and
	// its place in the text as createWebhookSubscriber gives it.
	got := apptest.GQL[conditionTest](t, s, testCondition, map[string]any{"c": "event.type == \"doc.created\" &&\n  event.nosuch == 1", "id": ev}).TestCondition
	require.Nil(t, got.Matches)
	require.NotNil(t, got.Error)
	require.Contains(t, *got.Error, "nosuch")
	require.Equal(t, new(2), got.Line)
	require.Equal(t, new(8), got.Column)
	got = apptest.GQL[conditionTest](t, s, testCondition, map[string]any{"c": "  ", "id": ev}).TestCondition
	require.Nil(t, got.Matches)
	require.NotNil(t, got.Error)
	require.Contains(t, *got.Error, "blank")
	require.Nil(t, got.Line, "a blank condition has no place")
	e := apptest.GQLErr(t, s, testCondition, map[string]any{"c": "true", "id": "999999"})
	require.Equal(t, "NOT_FOUND", e.Extensions["code"])

	// Admins only.
	_, res := s.Do(t, viewer, testCondition, map[string]any{"c": "true", "id": ev})
	require.NotEmpty(t, res.Errors)
	require.Equal(t, "FORBIDDEN", res.Errors[0].Extensions["code"])

	subs, evs := count()
	require.Equal(t, subscribers, subs, "testCondition creates no subscriber")
	require.Equal(t, events, evs, "testCondition journals nothing")
}

const sendExample = `mutation($sub: String!, $type: String!) { sendExampleEvent(subscriber: $sub, type: $type) {
	exampleOf webhookId attempt status responseStatus durationMs error } }`

type exampleView struct {
	ExampleOf      string
	WebhookID      string `json:"webhookId"`
	Attempt        int
	Status         string
	ResponseStatus *int
	DurationMs     *int
	Error          *string
}

// journalCounts is how many events and delivery records the database holds.
func journalCounts(t *testing.T, s *apptest.Server) (events, deliveries int) {
	t.Helper()
	require.NoError(t, s.Pool.QueryRow(t.Context(),
		`SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM deliveries)`).Scan(&events, &deliveries))
	return events, deliveries
}

func exampleLogOf(t *testing.T, s *apptest.Server, name string) []exampleView {
	t.Helper()
	subs := apptest.GQL[struct {
		Subscribers []struct {
			Name       string
			ExampleLog []exampleView
		}
	}](t, s, `{ subscribers { name exampleLog { exampleOf webhookId attempt status responseStatus durationMs error } } }`, nil).Subscribers
	for _, sub := range subs {
		if sub.Name == name {
			return sub.ExampleLog
		}
	}
	t.Fatalf("no subscriber %s", name)
	return nil
}

// sendExampleEvent reaches the receiver signed as a delivery, marked as a
// test, in both formats, is in the subscriber's example log and journals
// nothing.
func TestSendExampleEvent(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	example, err := catalog.Example("order.received")
	require.NoError(t, err)
	for _, format := range []string{"STANDARD_WEBHOOKS", "CLOUDEVENTS"} {
		secret := newSecret(t)
		rcv, url := newReceiver(t, secret)
		name := "example-" + strings.ToLower(format)
		// Its filters do not take order.received: an example is sent anyway.
		hook := createHook(t, s, map[string]any{"name": name, "url": url, "secret": secret, "format": format, "eventTypes": []string{"doc.created"}})
		apptest.WaitAllProcessed(t, s)
		events, deliveries := journalCounts(t, s)

		got := apptest.GQL[struct {
			SendExampleEvent exampleView `json:"sendExampleEvent"`
		}](t, s, sendExample, map[string]any{"sub": hook.Name, "type": "order.received"}).SendExampleEvent
		require.Equal(t, "order.received", got.ExampleOf, format)
		require.Regexp(t, `^example_[a-z2-7]{26}$`, got.WebhookID, format)
		require.Equal(t, 1, got.Attempt, format)
		require.Equal(t, "DELIVERED", got.Status, format)
		require.Equal(t, 200, *got.ResponseStatus, format)
		require.NotNil(t, got.DurationMs, format)
		require.Nil(t, got.Error, format)

		reqs := rcv.received()
		require.Len(t, reqs, 1, format)
		r := reqs[0]
		require.NoError(t, rcv.verifier.Verify(r.body, r.header), format)
		require.Equal(t, got.WebhookID, r.header.Get("webhook-id"), format)
		require.Equal(t, "true", r.header.Get(jobs.HeaderTest), format)
		require.Equal(t, "0", r.header.Get(jobs.HeaderEventID), format)
		data := r.body
		if format == "CLOUDEVENTS" {
			var ce map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(r.body, &ce))
			require.JSONEq(t, `true`, string(ce[jobs.CloudEventsTestExtension]))
			require.JSONEq(t, `"`+got.WebhookID+`"`, string(ce["id"]))
			require.JSONEq(t, `"order.received"`, string(ce["type"]))
			data = ce["data"]
		}
		var ev apptest.FeedEvent
		require.NoError(t, json.Unmarshal(data, &ev))
		require.Equal(t, "0", ev.ID, format)
		require.JSONEq(t, string(example), string(ev.Payload), format)
		// It is what a receiver validating against the published schema accepts.
		require.NoError(t, validateAgainst(t, s, s.URL+"/schemas/events/order.received.json", data), format)

		log := exampleLogOf(t, s, name)
		require.Len(t, log, 1, format)
		require.Equal(t, got, log[0], format)
		e, d := journalCounts(t, s)
		require.Equal(t, events, e, "%s: nothing journaled", format)
		require.Equal(t, deliveries, d, "%s: no delivery made", format)
	}
}

func TestSendExampleEventFailuresAndRefusals(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	secret := newSecret(t)
	rcv, url := newReceiver(t, secret)
	rcv.status.Store(http.StatusInternalServerError)
	hook := createHook(t, s, map[string]any{"name": "failing", "url": url, "secret": secret, "eventTypes": []string{"doc.created"}})
	viewer := apptest.RoleToken(t, s, "viewer", "VIEWER")

	// The receiver's failure is the outcome, logged; not the mutation's error.
	got := apptest.GQL[struct {
		SendExampleEvent exampleView `json:"sendExampleEvent"`
	}](t, s, sendExample, map[string]any{"sub": hook.Name, "type": "doc.created"}).SendExampleEvent
	require.Equal(t, "FAILED", got.Status)
	require.Equal(t, 500, *got.ResponseStatus)
	require.NotNil(t, got.Error)
	require.Contains(t, *got.Error, "answered 500")
	require.Equal(t, []exampleView{got}, exampleLogOf(t, s, "failing"))

	e := apptest.GQLErr(t, s, sendExample, map[string]any{"sub": hook.Name, "type": "doc.nosuch"})
	require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"])
	require.Equal(t, "type", e.Extensions["field"])
	require.Contains(t, e.Message, "doc.created, doc.status_changed")
	var builtin string
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT name FROM subscribers WHERE kind = 'builtin' LIMIT 1`).Scan(&builtin))
	e = apptest.GQLErr(t, s, sendExample, map[string]any{"sub": builtin, "type": "doc.created"})
	require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"])
	require.Equal(t, "subscriber", e.Extensions["field"])
	require.Contains(t, e.Message, "webhooks only")
	e = apptest.GQLErr(t, s, sendExample, map[string]any{"sub": "nosuch", "type": "doc.created"})
	require.Equal(t, "NOT_FOUND", e.Extensions["code"])
	_, res := s.Do(t, viewer, sendExample, map[string]any{"sub": hook.Name, "type": "doc.created"})
	require.NotEmpty(t, res.Errors)
	require.Equal(t, "FORBIDDEN", res.Errors[0].Extensions["code"])

	apptest.GQL[map[string]any](t, s, `mutation($id: ID!) { pauseSubscriber(id: $id) { id } }`, map[string]any{"id": hook.ID})
	e = apptest.GQLErr(t, s, sendExample, map[string]any{"sub": hook.Name, "type": "doc.created"})
	require.Equal(t, "CONFLICT", e.Extensions["code"])
	require.Contains(t, e.Message, "resume")
	requests, _, _ := rcv.counts()
	require.Equal(t, 1, requests, "a refusal sends nothing")
}

// During a rotation's grace an example carries both signatures, as a
// delivery does.
func TestSendExampleEventDuringRotation(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	oldSecret := newSecret(t)
	rcv, url := newRotationReceiver(t, oldSecret)
	hook := apptest.CreateWebhook(t, s, "rotating", url, oldSecret, []string{"doc.created"})
	rot := apptest.GQL[rotation](t, s, rotate, map[string]any{"id": hook, "grace": 3600}).RotateWebhookSecret
	rcv.setNew(t, *rot.Secret)
	apptest.GQL[map[string]any](t, s, sendExample, map[string]any{"sub": "rotating", "type": "doc.created"})
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	require.Equal(t, []verdict{{old: true, new: true}}, rcv.verdicts)
}

const testConditionOnExample = `query($c: String!, $type: String) { testCondition(condition: $c, exampleOf: $type) { matches error line column } }`

// testCondition on a type's catalog example: {"lines": 1, "source":
// "shop", "sync_id": "shop-7826d8468b3d", "order_id": 22} for order.received.
func TestTestConditionOnExample(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	events, _ := journalCounts(t, s)
	for _, tt := range []struct {
		cond    string
		matches bool
		err     string
	}{
		{`event.type == "order.received" && event.payload.source == "shop" && event.payload.lines == 1`, true, ""},
		{`event.payload.source == "crm"`, false, ""},
		{`event.payload.customer == "x"`, false, "customer"},
	} {
		got := apptest.GQL[conditionTest](t, s, testConditionOnExample, map[string]any{"c": tt.cond, "type": "order.received"}).TestCondition
		requireMatch(t, got, tt.matches, tt.err, tt.cond)
	}

	got := apptest.GQL[conditionTest](t, s, testConditionOnExample, map[string]any{"c": "event.nosuch == 1", "type": "order.received"}).TestCondition
	require.Nil(t, got.Matches)
	require.Equal(t, new(1), got.Line)
	require.Equal(t, new(6), got.Column)
	e := apptest.GQLErr(t, s, testConditionOnExample, map[string]any{"c": "true", "type": "order.nosuch"})
	require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"])
	require.Equal(t, "exampleOf", e.Extensions["field"])
	require.Contains(t, e.Message, "order.received")
	e = apptest.GQLErr(t, s, testConditionOnExample, map[string]any{"c": "true"})
	require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"], "neither eventId nor exampleOf")
	require.Contains(t, e.Message, "exactly one")
	e = apptest.GQLErr(t, s, `{ testCondition(condition: "true", eventId: "1", exampleOf: "order.received") { matches } }`, nil)
	require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"], "both eventId and exampleOf")
	require.Contains(t, e.Message, "exactly one")

	after, _ := journalCounts(t, s)
	require.Equal(t, events, after, "testCondition journals nothing")
}
