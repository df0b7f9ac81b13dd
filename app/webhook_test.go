package app_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"erp/app/apptest"
	"erp/jobs"
)

// receiver is a webhook endpoint as a customer would write one: it checks
// the signature and de-duplicates by event id.
type receiver struct {
	secret string
	status atomic.Int32 // answer with this status; 0 = 200

	mu       sync.Mutex
	requests int
	byEvent  map[string]int
	badSigs  int
}

func newReceiver(t *testing.T, secret string) (*receiver, string) {
	r := &receiver{secret: secret, byEvent: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.requests++
		if err := jobs.VerifyWebhook(r.secret, req.Header.Get(jobs.HeaderTimestamp), req.Header.Get(jobs.HeaderSignature), body, time.Now(), time.Minute); err != nil {
			r.badSigs++
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		if s := r.status.Load(); s != 0 {
			http.Error(w, "refused by test", int(s))
			return
		}
		r.byEvent[req.Header.Get(jobs.HeaderEventID)]++
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	return r, srv.URL
}

func (r *receiver) counts() (requests, distinct, badSigs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests, len(r.byEvent), r.badSigs
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
	rcv, url := newReceiver(t, "s3cret")
	apptest.CreateWebhook(t, s, "shop-sync", url, "s3cret", []string{"doc.created"})
	for _, c := range []string{"А", "Б", "В"} {
		apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": c})
	}
	apptest.WaitAllProcessed(t, s)
	requests, distinct, bad := rcv.counts()
	require.Equal(t, 3, requests)
	require.Equal(t, 3, distinct)
	require.Zero(t, bad, "every request must carry a valid signature")

	// A redelivery reaches the receiver again with the same event id: its
	// de-duplication sees one event, two requests.
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
	rcv, url := newReceiver(t, "k")
	rcv.status.Store(http.StatusUnprocessableEntity)
	apptest.CreateWebhook(t, s, "crm", url, "k", []string{"doc.created"})
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
	} {
		e := apptest.GQLErr(t, s, `mutation($u: String!) { createWebhookSubscriber(input: {name: "x", url: $u}) { id } }`, map[string]any{"u": tt.url})
		require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"], tt.url)
		require.Equal(t, tt.field, e.Extensions["field"], tt.url)
	}
	apptest.CreateWebhook(t, s, "dup", "http://127.0.0.1:1/", "k", nil)
	e := apptest.GQLErr(t, s, `mutation { createWebhookSubscriber(input: {name: "dup", url: "http://127.0.0.1:1/"}) { id } }`, nil)
	require.Equal(t, "CONFLICT", e.Extensions["code"])
}
