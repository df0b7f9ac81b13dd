package app_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"erp/app/config"

	"erp/app/apptest"
	"erp/jobs"
)

// receiver is a webhook endpoint as a customer would write one: it
// verifies the signature with the Standard Webhooks library (not our code)
// and de-duplicates by webhook-id. Every request is kept, to replay.
type receiver struct {
	verifier *standardwebhooks.Webhook
	status   atomic.Int32 // answer with this status; 0 = 200
	failOnce atomic.Bool  // answer the next request 500, once

	mu       sync.Mutex
	requests []receivedRequest
	byID     map[string]int
	badSigs  int
}

type receivedRequest struct {
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T, secret string) (*receiver, string) {
	t.Helper()
	verifier, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	r := &receiver{verifier: verifier, byID: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.requests = append(r.requests, receivedRequest{header: req.Header.Clone(), body: body})
		if err := r.verifier.Verify(body, req.Header); err != nil {
			r.badSigs++
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		if r.failOnce.CompareAndSwap(true, false) {
			http.Error(w, "try again", http.StatusInternalServerError)
			return
		}
		if s := r.status.Load(); s != 0 {
			http.Error(w, "refused by test", int(s))
			return
		}
		r.byID[req.Header.Get("webhook-id")]++
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	return r, srv.URL
}

func (r *receiver) counts() (requests, distinct, badSigs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.requests), len(r.byID), r.badSigs
}

func (r *receiver) received() []receivedRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.requests)
}

// newSecret is a fresh Standard Webhooks secret.
func newSecret(t *testing.T) string {
	t.Helper()
	secret, err := jobs.NewWebhookSecret()
	require.NoError(t, err)
	return secret
}

type deliveryView struct {
	Status         string
	Attempts       int
	LastError      *string
	ResponseStatus *int
	ResponseBody   *string
	Event          struct{ ID string }
}

func TestWebhookSignedAndDeduplicatedByReceiver(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	secret := newSecret(t)
	rcv, url := newReceiver(t, secret)
	apptest.CreateWebhook(t, s, "shop-sync", url, secret, []string{"doc.created"})
	for _, c := range []string{"А", "Б", "В"} {
		apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": c})
	}
	apptest.WaitAllProcessed(t, s)
	requests, distinct, bad := rcv.counts()
	require.Equal(t, 3, requests)
	require.Equal(t, 3, distinct)
	require.Zero(t, bad, "every request must carry a valid signature")

	// The signature covers the body: a tampered one fails the library's
	// verification.
	genuine := rcv.received()[0]
	require.NoError(t, rcv.verifier.Verify(genuine.body, genuine.header))
	tampered := bytes.Replace(genuine.body, []byte(`"doc.created"`), []byte(`"doc.deleted"`), 1)
	require.NotEqual(t, genuine.body, tampered)
	require.ErrorIs(t, rcv.verifier.Verify(tampered, genuine.header), standardwebhooks.ErrNoMatchingSignature)

	// A redelivery reaches the receiver again with the same webhook-id:
	// its de-duplication sees one delivery, two requests.
	type redelivered struct {
		Redeliver deliveryView `json:"redeliver"`
	}
	first := apptest.GQL[struct {
		Deliveries struct{ Edges []struct{ Node deliveryView } } `json:"deliveries"`
	}](t, s, `{ deliveries(filter: {subscriber: "shop-sync"}, first: 1) { edges { node { status attempts event { id } } } } }`, nil)
	require.Equal(t, "DELIVERED", first.Deliveries.Edges[0].Node.Status)
	evID := first.Deliveries.Edges[0].Node.Event.ID
	apptest.GQL[redelivered](t, s, `mutation($id: ID!) { redeliver(eventId: $id, subscriber: "shop-sync") { status } }`, map[string]any{"id": evID})
	apptest.WaitFor(t, 10*time.Second, "the redelivery", func() bool { r, _, _ := rcv.counts(); return r == 4 })
	requests, distinct, _ = rcv.counts()
	require.Equal(t, 4, requests)
	require.Equal(t, 3, distinct)
}

func TestWebhook4xxIsDeadThenRedelivered(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	secret := newSecret(t)
	rcv, url := newReceiver(t, secret)
	rcv.status.Store(http.StatusUnprocessableEntity)
	apptest.CreateWebhook(t, s, "crm", url, secret, []string{"doc.created"})
	apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": "Г"})
	apptest.WaitAllProcessed(t, s)

	type dead struct {
		DeadDeliveries struct{ Edges []struct{ Node deliveryView } } `json:"deadDeliveries"`
	}
	got := apptest.GQL[dead](t, s, `{ deadDeliveries(subscriber: "crm") { edges { node { status attempts lastError responseStatus responseBody event { id } } } } }`, nil)
	require.Len(t, got.DeadDeliveries.Edges, 1)
	d := got.DeadDeliveries.Edges[0].Node
	require.Equal(t, 1, d.Attempts, "a 4xx is permanent: no retry")
	require.Equal(t, http.StatusUnprocessableEntity, *d.ResponseStatus)
	require.Contains(t, *d.ResponseBody, "refused by test")
	require.Contains(t, *d.LastError, "422")

	rcv.status.Store(0)
	type count struct {
		RedeliverAll int `json:"redeliverAll"`
	}
	n := apptest.GQL[count](t, s, `mutation { redeliverAll(filter: {status: DEAD, subscriber: "crm"}) }`, nil)
	require.Equal(t, 1, n.RedeliverAll)
	type one struct {
		Event struct {
			Deliveries []struct {
				Status     string
				Subscriber struct{ Name string }
			}
		} `json:"event"`
	}
	apptest.WaitFor(t, 10*time.Second, "the redelivered webhook", func() bool {
		ev := apptest.GQL[one](t, s, `query($id: ID!) { event(id: $id) { deliveries { status subscriber { name } } } }`, map[string]any{"id": d.Event.ID})
		for _, d := range ev.Event.Deliveries {
			if d.Subscriber.Name == "crm" {
				return d.Status == "DELIVERED"
			}
		}
		return false
	})
	type journal struct {
		Events struct {
			Edges []struct{ Node apptest.FeedEvent }
		} `json:"events"`
	}
	j := apptest.GQL[journal](t, s, `{ events(filter: {types: ["delivery.redelivered"]}) { edges { node { payload actor { displayName } } } } }`, nil)
	require.Len(t, j.Events.Edges, 1, "the redelivery is journaled")
	require.JSONEq(t, `{"event_id": `+d.Event.ID+`, "subscriber": "crm"}`, string(j.Events.Edges[0].Node.Payload))
}

func TestWebhookSubscriberValidation(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	for _, tt := range []struct{ url, field string }{
		{"ftp://example.com/hook", "input.url"},
		{"javascript:alert(1)", "input.url"},
		{"not a url", "input.url"},
		{"http://127.0.0.1:1/hooks/a b", "input.url"},
		{"http://127.0.0.1:1/hooks#a", "input.url"},
	} {
		e := apptest.GQLErr(t, s, `mutation($u: String!) { createWebhookSubscriber(input: {name: "x", url: $u}) { id } }`, map[string]any{"u": tt.url})
		require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"], tt.url)
		require.Equal(t, tt.field, e.Extensions["field"], tt.url)
	}
	apptest.CreateWebhook(t, s, "dup", "http://127.0.0.1:1/", "", nil)
	e := apptest.GQLErr(t, s, `mutation { createWebhookSubscriber(input: {name: "dup", url: "http://127.0.0.1:1/"}) { id } }`, nil)
	require.Equal(t, "CONFLICT", e.Extensions["code"])

	// The URL is stored (and shown, and sent) normalised, on update too.
	type hook struct{ ID, URL string }
	created := apptest.GQL[struct{ CreateWebhookSubscriber hook }](t, s,
		`mutation { createWebhookSubscriber(input: {name: "norm", url: "HTTP://127.0.0.1:1/хук?q=да"}) { id url } }`, nil).CreateWebhookSubscriber
	require.Equal(t, "http://127.0.0.1:1/%D1%85%D1%83%D0%BA?q=%D0%B4%D0%B0", created.URL)
	updated := apptest.GQL[struct{ UpdateWebhookSubscriber hook }](t, s,
		`mutation($id: ID!) { updateWebhookSubscriber(id: $id, input: {url: "http://127.0.0.1:1/a%20b?q=\"x\""}) { id url } }`, map[string]any{"id": created.ID}).UpdateWebhookSubscriber
	require.Equal(t, `http://127.0.0.1:1/a%20b?q=%22x%22`, updated.URL)
	var stored string
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT url FROM subscribers WHERE name = 'norm'`).Scan(&stored))
	require.Equal(t, updated.URL, stored)
}

// createHook creates a webhook subscriber from in (name and url at least)
// and returns its answer.
func createHook(t *testing.T, s *apptest.Server, in map[string]any) hookView {
	t.Helper()
	return apptest.GQL[struct {
		CreateWebhookSubscriber hookView `json:"createWebhookSubscriber"`
	}](t, s, `mutation($in: WebhookSubscriberInput!) { createWebhookSubscriber(input: $in) { `+hookFields+` } }`,
		map[string]any{"in": in}).CreateWebhookSubscriber
}

const hookFields = `id name eventTypes entities condition format hasSecret secret`

type hookView struct {
	ID         string
	Name       string
	EventTypes []string
	Entities   []string
	Condition  *string
	Format     *string
	HasSecret  bool
	Secret     *string
}

// deliveredEvents returns the ids of the events subscriber has delivery
// records of.
func deliveredEvents(t *testing.T, s *apptest.Server, subscriber string) []string {
	t.Helper()
	page := apptest.GQL[struct {
		Deliveries struct{ Edges []struct{ Node deliveryView } } `json:"deliveries"`
	}](t, s, `query($s: String!) { deliveries(filter: {subscriber: $s}, first: 500) { edges { node { status event { id } } } } }`,
		map[string]any{"s": subscriber})
	var ids []string
	for _, e := range page.Deliveries.Edges {
		ids = append(ids, e.Node.Event.ID)
	}
	slices.Sort(ids)
	return ids
}

func TestWebhookGeneratedSecretShownOnce(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	hook := createHook(t, s, map[string]any{"name": "no-secret", "url": "http://127.0.0.1:1/", "eventTypes": []string{"order.received"}})
	require.True(t, hook.HasSecret)
	require.NotNil(t, hook.Secret, "a generated secret is shown in the create answer")
	require.NoError(t, jobs.ValidateWebhookSecret(*hook.Secret))
	require.Equal(t, "STANDARD_WEBHOOKS", *hook.Format, "the default format")

	// Read back, it is never shown again.
	list := apptest.GQL[struct{ Subscribers []hookView }](t, s, `{ subscribers { `+hookFields+` } }`, nil)
	for _, sub := range list.Subscribers {
		require.Nil(t, sub.Secret, sub.Name)
	}
	given := createHook(t, s, map[string]any{"name": "given", "url": "http://127.0.0.1:1/", "secret": newSecret(t)})
	require.True(t, given.HasSecret)
	require.Nil(t, given.Secret, "a secret the client gave is not echoed")
}

func TestWebhookConditionFilters(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	secret := newSecret(t)
	rcv, url := newReceiver(t, secret)
	hook := createHook(t, s, map[string]any{"name": "even-orders", "url": url, "secret": secret,
		"eventTypes": []string{"doc.created", "doc.created"}, "entities": []string{"sales_order"},
		"condition": `event.payload.entity == "sales_order" && event.entityId % 2 == 0`})
	require.Equal(t, []string{"doc.created"}, hook.EventTypes, "normalised")
	require.Equal(t, []string{"sales_orders"}, hook.Entities, "payload names stored as tables")
	require.Equal(t, `event.payload.entity == "sales_order" && event.entityId % 2 == 0`, *hook.Condition)

	// A condition whose evaluation fails (no such key) takes nothing.
	createHook(t, s, map[string]any{"name": "missing-key", "url": url, "secret": secret, "condition": `event.payload.nosuchkey == 1`})

	var even []string
	for i := range 6 {
		so := apptest.GQL[struct {
			CreateSalesOrder struct{ ID string } `json:"createSalesOrder"`
		}](t, s, apptest.CreateSalesOrder, map[string]any{"customer": fmt.Sprint("К", i)})
		var id int
		_, err := fmt.Sscan(so.CreateSalesOrder.ID, &id)
		require.NoError(t, err)
		if id%2 == 0 {
			even = append(even, so.CreateSalesOrder.ID)
		}
	}
	require.Len(t, even, 3)
	apptest.WaitAllProcessed(t, s)

	// Only the matching events have delivery records, each delivered.
	want := apptest.JournalIDs(t, s.Pool, "doc.created")
	want = slices.DeleteFunc(want, func(evID string) bool {
		var entityID int64
		require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT entity_id FROM events WHERE id = $1`, evID).Scan(&entityID))
		return entityID%2 != 0
	})
	slices.Sort(want)
	require.Len(t, want, 3)
	require.Equal(t, want, deliveredEvents(t, s, "even-orders"))
	require.Empty(t, deliveredEvents(t, s, "missing-key"), "an evaluation error: not taken")
	requests, distinct, bad := rcv.counts()
	require.Equal(t, 3, requests)
	require.Equal(t, 3, distinct)
	require.Zero(t, bad)

	// An update replaces the condition; "" removes it.
	upd := apptest.GQL[struct {
		UpdateWebhookSubscriber hookView `json:"updateWebhookSubscriber"`
	}](t, s, `mutation($id: ID!) { updateWebhookSubscriber(id: $id, input: {condition: ""}) { `+hookFields+` } }`, map[string]any{"id": hook.ID})
	require.Nil(t, upd.UpdateWebhookSubscriber.Condition)
	require.Equal(t, []string{"sales_orders"}, upd.UpdateWebhookSubscriber.Entities, "unchanged")
}

func TestWebhookFilterErrors(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	create := `mutation($in: WebhookSubscriberInput!) { createWebhookSubscriber(input: $in) { id } }`
	in := func(extra map[string]any) map[string]any {
		m := map[string]any{"name": "bad", "url": "http://127.0.0.1:1/"}
		for k, v := range extra {
			m[k] = v
		}
		return map[string]any{"in": m}
	}

	// A typo in an event type lists the known ones.
	e := apptest.GQLErr(t, s, create, in(map[string]any{"eventTypes": []string{"order.received", "doc.create"}}))
	require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"])
	require.Equal(t, "input.eventTypes.1", e.Extensions["field"])
	require.Contains(t, e.Message, `unknown event type "doc.create"`)
	for _, known := range jobs.DefaultEventTypes() {
		require.Contains(t, e.Message, known)
	}

	e = apptest.GQLErr(t, s, create, in(map[string]any{"entities": []string{"orders"}}))
	require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"])
	require.Equal(t, "input.entities.0", e.Extensions["field"])
	require.Contains(t, e.Message, "plan_prod_orders (or prod_order)")

	// A condition's syntax or type error carries its line and column.
	for _, tt := range []struct {
		cond      string
		line, col float64
		msg       string
	}{
		{"event.type ==", 1, 14, "line 1, column 14"},
		{"event.type == \"doc.created\" &&\n  event.nosuch == 1", 2, 8, "line 2, column 8"},
		{"event.entityId + 1", 1, 1, "must be a bool"},
	} {
		e := apptest.GQLErr(t, s, create, in(map[string]any{"condition": tt.cond}))
		require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"], tt.cond)
		require.Equal(t, "input.condition", e.Extensions["field"], tt.cond)
		require.Equal(t, tt.line, e.Extensions["line"], tt.cond)
		require.Equal(t, tt.col, e.Extensions["column"], tt.cond)
		require.Contains(t, e.Message, tt.msg, tt.cond)
	}

	e = apptest.GQLErr(t, s, create, in(map[string]any{"secret": "s3cret"}))
	require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"])
	require.Equal(t, "input.secret", e.Extensions["field"])
	require.Contains(t, e.Message, "whsec_")

	// Nothing was created.
	list := apptest.GQL[struct{ Subscribers []hookView }](t, s, `{ subscribers { name } }`, nil)
	for _, sub := range list.Subscribers {
		require.NotEqual(t, "bad", sub.Name)
	}
}

func TestWebhookAddressGuard(t *testing.T) {
	t.Parallel()
	rcv, url := newReceiver(t, testSecret)
	create := `mutation($u: String!, $n: String!) { createWebhookSubscriber(input: {name: $n, url: $u, secret: "` + testSecret + `", eventTypes: ["doc.created"]}) { id } }`

	// WEBHOOK_ALLOW_PRIVATE=false: loopback is refused when created.
	guarded := apptest.New(t, func(c *config.Config) { c.WebhookAllowPrivate = false })
	for i, u := range []string{url, "http://127.0.0.1/", "http://[::1]:8080/hook", "http://localhost/", "http://169.254.169.254/latest/meta-data", "http://10.0.0.1/"} {
		e := apptest.GQLErr(t, guarded, create, map[string]any{"u": u, "n": fmt.Sprint("guarded-", i)})
		require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"], u)
		require.Equal(t, "input.url", e.Extensions["field"], u)
		require.Contains(t, e.Message, "WEBHOOK_ALLOW_PRIVATE=true", u)
	}

	// WEBHOOK_ALLOW_PRIVATE=true: the same receiver is accepted and called.
	open := apptest.New(t, func(c *config.Config) { c.WebhookAllowPrivate = true })
	apptest.SeedItem(t, open)
	apptest.GQL[map[string]any](t, open, create, map[string]any{"u": url, "n": "open"})
	apptest.GQL[map[string]any](t, open, apptest.CreateSalesOrder, map[string]any{"customer": "Д"})
	apptest.WaitAllProcessed(t, open)
	requests, _, bad := rcv.counts()
	require.Equal(t, 1, requests)
	require.Zero(t, bad)
}

func TestWebhookIDStableAcrossRetry(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	secret := newSecret(t)
	rcv, url := newReceiver(t, secret)
	rcv.failOnce.Store(true)
	hookID := apptest.CreateWebhook(t, s, "flaky-receiver", url, secret, []string{"doc.created"})
	apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": "Е"})
	apptest.WaitAllProcessed(t, s) // the retry comes after 1-2 s

	got := rcv.received()
	require.Len(t, got, 2, "a 500, then the retry")
	evID := apptest.JournalIDs(t, s.Pool, "doc.created")[0]
	want := "dlv_" + evID + "_" + hookID
	for _, r := range got {
		require.Equal(t, want, r.header.Get("webhook-id"))
		require.NoError(t, rcv.verifier.Verify(r.body, r.header))
	}
	require.NotEqual(t, got[0].header.Get("webhook-signature"), "", "signed")
	d := deliveredEvents(t, s, "flaky-receiver")
	require.Equal(t, []string{evID}, d)
}

func TestWebhookCloudEvents(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	secret := newSecret(t)
	rcv, url := newReceiver(t, secret)
	hook := createHook(t, s, map[string]any{"name": "ce", "url": url, "secret": secret, "format": "CLOUDEVENTS", "eventTypes": []string{"doc.created"}})
	require.Equal(t, "CLOUDEVENTS", *hook.Format)
	so := apptest.GQL[struct {
		CreateSalesOrder struct{ ID string } `json:"createSalesOrder"`
	}](t, s, apptest.CreateSalesOrder, map[string]any{"customer": "Ж"})
	apptest.WaitAllProcessed(t, s)

	got := rcv.received()
	require.Len(t, got, 1)
	r := got[0]
	require.Equal(t, "application/cloudevents+json", r.header.Get("Content-Type"))
	require.NoError(t, rcv.verifier.Verify(r.body, r.header), "signed like the standard format")
	var ce struct {
		SpecVersion string            `json:"specversion"`
		ID          string            `json:"id"`
		Source      string            `json:"source"`
		Type        string            `json:"type"`
		Subject     string            `json:"subject"`
		DataSchema  string            `json:"dataschema"`
		Data        apptest.FeedEvent `json:"data"`
	}
	require.NoError(t, json.Unmarshal(r.body, &ce))
	// dataschema resolves, for a signed-in token, to the schema the data
	// (the whole event) validates against.
	require.Equal(t, s.URL+"/schemas/events/doc.created.json", ce.DataSchema)
	var raw struct{ Data json.RawMessage }
	require.NoError(t, json.Unmarshal(r.body, &raw))
	require.NoError(t, validateAgainst(t, s, ce.DataSchema, raw.Data))
	require.Error(t, validateAgainst(t, s, ce.DataSchema, []byte(`{"id": "1"}`)), "the schema asserts something")
	require.Equal(t, "1.0", ce.SpecVersion)
	require.Equal(t, r.header.Get("webhook-id"), ce.ID, "id = webhook-id")
	evID := apptest.JournalIDs(t, s.Pool, "doc.created")[0]
	require.Equal(t, "dlv_"+evID+"_"+hook.ID, ce.ID)
	require.Equal(t, "doc.created", ce.Type)
	require.Equal(t, "/erp", ce.Source)
	require.Equal(t, "sales_orders/"+so.CreateSalesOrder.ID, ce.Subject)
	require.Equal(t, evID, ce.Data.ID)
	require.True(t, strings.Contains(string(ce.Data.Payload), `"sales_order"`), string(ce.Data.Payload))
}

// testSecret is a fixed Standard Webhooks secret (whsec_ + base64 of 32 bytes).
const testSecret = "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="

// Every attempt of a webhook delivery is in its attempt log, newest first,
// with the receiver's answer; only an admin may read it.
func TestWebhookAttemptLog(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, func(c *config.Config) { c.RetryBase = 20 * time.Millisecond })
	apptest.SeedItem(t, s)
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if n := calls.Add(1); n <= 2 {
			http.Error(w, fmt.Sprintf("overloaded, call %d", n), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	apptest.CreateWebhook(t, s, "busy-receiver", srv.URL, "", []string{"doc.created"})
	apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": "З"})
	apptest.WaitFor(t, 20*time.Second, "the third attempt delivered", func() bool {
		return deliveryStatus(t, s, "busy-receiver") == "DELIVERED"
	})
	require.Equal(t, int32(3), calls.Load())

	const query = `{ deliveries(filter: {subscriber: "busy-receiver"}) { edges { node {
		attempts attemptLog { attempt at status durationMs responseStatus responseBody error } } } } }`
	type attempt struct {
		Attempt        int
		At             time.Time
		Status         *string
		DurationMs     *int
		ResponseStatus *int
		ResponseBody   *string
		Error          *string
	}
	page := apptest.GQL[struct {
		Deliveries struct {
			Edges []struct {
				Node struct {
					Attempts   int
					AttemptLog []attempt
				}
			}
		} `json:"deliveries"`
	}](t, s, query, nil)
	require.Len(t, page.Deliveries.Edges, 1)
	d := page.Deliveries.Edges[0].Node
	require.Equal(t, 3, d.Attempts, "attempts stays the count")
	log := d.AttemptLog
	require.Len(t, log, 3)
	var statuses, numbers []int
	var outcomes []string
	for i, a := range log {
		require.NotNil(t, a.DurationMs, "attempt %d", a.Attempt)
		require.NotNil(t, a.ResponseStatus, "attempt %d", a.Attempt)
		require.NotNil(t, a.Status, "attempt %d", a.Attempt)
		statuses, numbers, outcomes = append(statuses, *a.ResponseStatus), append(numbers, a.Attempt), append(outcomes, *a.Status)
		if i > 0 {
			require.True(t, a.At.Before(log[i-1].At), "newest first: attempt %d at %s, attempt %d at %s", a.Attempt, a.At, log[i-1].Attempt, log[i-1].At)
		}
	}
	require.Equal(t, []int{http.StatusNoContent, http.StatusServiceUnavailable, http.StatusServiceUnavailable}, statuses)
	require.Equal(t, []int{3, 2, 1}, numbers)
	require.Equal(t, []string{"DELIVERED", "FAILED", "FAILED"}, outcomes)
	require.Nil(t, log[0].Error, "a success has no error")
	for i, a := range log[1:] {
		require.NotNil(t, a.ResponseBody, "attempt %d", a.Attempt)
		require.Equal(t, fmt.Sprintf("overloaded, call %d\n", 2-i), *a.ResponseBody)
		require.NotNil(t, a.Error, "attempt %d", a.Attempt)
		require.Contains(t, *a.Error, "503")
	}
	// A built-in subscriber's delivery has an empty log, not null (null
	// is a refusal).
	// A viewer may list deliveries but not read their attempt logs: the
	// log is refused at its path and nothing of it is in the answer.
	viewer := apptest.RoleToken(t, s, "attempt-viewer", "VIEWER")
	status, res := s.Do(t, viewer, query, nil)
	require.Equal(t, http.StatusOK, status)
	require.Len(t, res.Errors, 1, "refused in the page's one row")
	require.Equal(t, "FORBIDDEN", res.Errors[0].Extensions["code"])
	require.Contains(t, res.Errors[0].Message, "attemptLog")
	require.Contains(t, string(res.Data), `"attempts":3`, "the rest of the row is the viewer's")
	require.NotContains(t, string(res.Data), "overloaded")
	require.NotContains(t, string(res.Data), "503")
	_, res = s.Do(t, viewer, `{ deliveries(filter: {subscriber: "busy-receiver"}) { edges { node { attempts } } } }`, nil)
	require.Empty(t, res.Errors, "the rest of the delivery is the viewer's to read")

	// A delivery not attempted yet (its webhook paused) has an empty log,
	// not null: null is a refusal.
	held := apptest.CreateWebhook(t, s, "held-receiver", srv.URL, "", []string{"doc.created"})
	apptest.GQL[map[string]any](t, s, `mutation($id: ID!) { pauseSubscriber(id: $id) { id } }`, map[string]any{"id": held})
	apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": "И"})
	var none struct {
		Deliveries struct {
			Edges []struct {
				Node struct{ AttemptLog *[]attempt }
			}
		} `json:"deliveries"`
	}
	apptest.WaitFor(t, 10*time.Second, "the held delivery", func() bool {
		none = apptest.GQL[struct {
			Deliveries struct {
				Edges []struct {
					Node struct{ AttemptLog *[]attempt }
				}
			} `json:"deliveries"`
		}](t, s, `{ deliveries(filter: {subscriber: "held-receiver"}) { edges { node { attemptLog { attempt } } } } }`, nil)
		return len(none.Deliveries.Edges) == 1
	})
	require.NotNil(t, none.Deliveries.Edges[0].Node.AttemptLog)
	require.Empty(t, *none.Deliveries.Edges[0].Node.AttemptLog)
}

// deliveryStatus returns the status of subscriber's newest delivery record
// ("" with none).
func deliveryStatus(t *testing.T, s *apptest.Server, subscriber string) string {
	t.Helper()
	page := apptest.GQL[struct {
		Deliveries struct{ Edges []struct{ Node deliveryView } } `json:"deliveries"`
	}](t, s, `query($s: String!) { deliveries(filter: {subscriber: $s}, first: 1) { edges { node { status } } } }`,
		map[string]any{"s": subscriber})
	if len(page.Deliveries.Edges) == 0 {
		return ""
	}
	return page.Deliveries.Edges[0].Node.Status
}

// validateAgainst fetches the JSON Schema at url with s's token and
// validates doc against it.
func validateAgainst(t *testing.T, s *apptest.Server, url string, doc []byte) error {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	schemaDoc, err := jsonschema.UnmarshalJSON(resp.Body)
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	require.NoError(t, c.AddResource(url, schemaDoc))
	sch, err := c.Compile(url)
	require.NoError(t, err)
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	require.NoError(t, err)
	return sch.Validate(v)
}
