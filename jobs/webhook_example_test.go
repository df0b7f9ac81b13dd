package jobs_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"erp/jobs"
)

// A receiver verifies a webhook request with the Standard Webhooks library
// of its language (here Go's) and the subscriber's whsec_ secret, and
// de-duplicates by webhook-id, which every retry of a delivery repeats.
func ExampleWebhookSender_Send_receiver() {
	secret, err := jobs.NewWebhookSecret()
	if err != nil {
		panic(err)
	}
	verifier, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		panic(err)
	}
	seen := map[string]bool{}
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "unreadable body", http.StatusBadRequest)
			return
		}
		if err := verifier.Verify(body, r.Header); err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		id := r.Header.Get("webhook-id")
		fmt.Printf("%s verified, duplicate: %v, %s\n", id, seen[id], body)
		seen[id] = true
	}))
	defer receiver.Close()

	sender := jobs.NewWebhookSender(jobs.WithAllowPrivate(true)) // the receiver is on loopback
	cfg := jobs.WebhookConfig{URL: receiver.URL, Secret: secret, MessageID: jobs.WebhookMessageID(46, 3)}
	for range 2 { // a delivery and its retry
		if res := sender.Send(context.Background(), cfg, 46, []byte(`{"id":"46","type":"doc.created"}`)); res.Err != nil {
			panic(res.Err)
		}
	}
	// Output:
	// dlv_46_3 verified, duplicate: false, {"id":"46","type":"doc.created"}
	// dlv_46_3 verified, duplicate: true, {"id":"46","type":"doc.created"}
}
