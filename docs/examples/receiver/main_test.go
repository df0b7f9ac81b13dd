package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"erp/app/apptest"
	"erp/db/catalog"
	"erp/db/pgtest"
	"erp/jobs"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The receiver of docs/webhooks.md accepts what a real server sends, in
// both formats, and refuses what it must.
func TestReceiverAgainstTheServer(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	secret, err := jobs.NewWebhookSecret()
	require.NoError(t, err)
	rc, err := newReceiver(secret, s.URL, s.Token)
	require.NoError(t, err)
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)

	for _, format := range []string{"STANDARD_WEBHOOKS", "CLOUDEVENTS"} {
		hook := strings.ToLower(format)
		apptest.GQL[map[string]any](t, s, `mutation($in: WebhookSubscriberInput!) { createWebhookSubscriber(input: $in) { id } }`, map[string]any{"in": map[string]any{
			"name": hook, "url": srv.URL, "secret": secret, "format": format, "eventTypes": []string{"doc.created"}}})
		// Every type's example validates against its published schema.
		for _, typ := range catalog.Names() {
			got := apptest.GQL[struct {
				SendExampleEvent struct{ ResponseStatus int }
			}](t, s, `mutation($name: String!, $type: String!) { sendExampleEvent(subscriber: $name, type: $type) { responseStatus } }`,
				map[string]any{"name": hook, "type": typ}).SendExampleEvent
			require.Equal(t, http.StatusNoContent, got.ResponseStatus, "%s %s", format, typ)
		}
	}
	// A real event, in both formats.
	apptest.SeedItem(t, s)
	apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": "receiver"})
	apptest.WaitAllProcessed(t, s)
	apptest.WaitFor(t, 10*time.Second, "both deliveries", func() bool {
		var delivered int
		require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM deliveries d JOIN subscribers s ON s.id = d.subscriber_id
			WHERE s.kind = 'webhook' AND d.status = 'delivered'`).Scan(&delivered))
		return delivered == 2
	})

	post := func(body string, sign bool) int {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, bytes.NewReader([]byte(body)))
		require.NoError(t, err)
		now := time.Now()
		req.Header.Set("webhook-id", "msg_test")
		req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
		key := secret
		if !sign {
			key, err = jobs.NewWebhookSecret()
			require.NoError(t, err)
		}
		signer, err := standardwebhooks.NewWebhook(key)
		require.NoError(t, err)
		sig, err := signer.Sign("msg_test", now, []byte(body))
		require.NoError(t, err)
		req.Header.Set("webhook-signature", sig)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		return resp.StatusCode
	}
	require.Equal(t, http.StatusUnauthorized, post(`{"type": "doc.created"}`, false), "a wrong signature")
	require.Equal(t, http.StatusUnprocessableEntity, post(`{"type": "doc.created", "id": "x"}`, true), "an event off its schema")

	// docs/webhooks.md shows this program as it is.
	src, err := os.ReadFile("main.go")
	require.NoError(t, err)
	doc, err := os.ReadFile("../../webhooks.md")
	require.NoError(t, err)
	require.True(t, strings.Contains(string(doc), "```go\n"+string(src)+"```\n"), "docs/webhooks.md must show docs/examples/receiver/main.go verbatim")
}
