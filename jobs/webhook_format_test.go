package jobs

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	cloudevent "github.com/cloudevents/sdk-go/v2/event"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"
)

// The signatures below are checked with the Standard Webhooks library, the
// one a Go receiver uses, never with this package's own code.

var webhookSignatureShape = regexp.MustCompile(`^v1,[A-Za-z0-9+/]{43}=$`)

func TestWebhookStandardHeaders(t *testing.T) {
	t.Parallel()
	rec := newWebhookReceiver(t, acceptWebhook)
	secret, err := NewWebhookSecret()
	require.NoError(t, err)
	body := []byte(`{"id":"46","type":"doc.created"}`)
	cfg := WebhookConfig{URL: rec.srv.URL, Secret: secret, MessageID: WebhookMessageID(46, 3)}

	s := newTestSender()
	for range 2 { // a retry of the same delivery
		res := s.Send(t.Context(), cfg, 46, body)
		require.NoError(t, res.Err)
	}
	got := rec.received()
	require.Len(t, got, 2)
	for _, r := range got {
		h := r.header
		require.Equal(t, "dlv_46_3", h.Get(HeaderWebhookID), "webhook-id is the delivery's id")
		require.Equal(t, strconv.FormatInt(webhookClock.Unix(), 10), h.Get(HeaderWebhookTimestamp))
		require.Regexp(t, webhookSignatureShape, h.Get(HeaderWebhookSignature))
		require.Equal(t, "46", h.Get(HeaderEventID))
		require.Equal(t, "application/json", h.Get("Content-Type"))
		require.Equal(t, body, r.body, "the standard format sends the body as it is")
		wh, err := standardwebhooks.NewWebhook(secret)
		require.NoError(t, err)
		// The fixed clock is far from now: the timestamp is checked below.
		require.NoError(t, wh.VerifyIgnoringTimestamp(r.body, h))
	}
	require.Equal(t, got[0].header.Get(HeaderWebhookID), got[1].header.Get(HeaderWebhookID), "stable across retries")
	require.Equal(t, "webhook-id", HeaderWebhookID)
	require.Equal(t, "webhook-timestamp", HeaderWebhookTimestamp)
	require.Equal(t, "webhook-signature", HeaderWebhookSignature)
}

// TestWebhookSignatureSpecVector signs the example of the Standard Webhooks
// spec and gets the spec's signature.
func TestWebhookSignatureSpecVector(t *testing.T) {
	t.Parallel()
	rec := newWebhookReceiver(t, acceptWebhook)
	s := NewWebhookSender()
	s.now = func() time.Time { return time.Unix(1614265330, 0) }
	res := s.Send(t.Context(), WebhookConfig{URL: rec.srv.URL, Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", MessageID: "msg_p5jXN8AQM9LWM0D4loKWxJek"},
		1, []byte(`{"test": 2432232314}`))
	require.NoError(t, res.Err)
	got := rec.received()
	require.Len(t, got, 1)
	require.Equal(t, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", got[0].header.Get(HeaderWebhookSignature))
	require.Equal(t, "1614265330", got[0].header.Get(HeaderWebhookTimestamp))
}

func TestWebhookStandardSignatureVerifiedByLibrary(t *testing.T) {
	t.Parallel()
	secret, err := NewWebhookSecret()
	require.NoError(t, err)
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	// The receiver answers 401 to a request the library rejects, so a
	// success of Send means the library accepted it with its own clock.
	rec := newWebhookReceiver(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		if err := wh.Verify(body, r.Header); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
		}
	})
	body := []byte(`{"id":"7","type":"doc.created","payload":{"номер":"ЗК-1"}}`)
	for _, format := range []WebhookFormat{WebhookFormatStandard, WebhookFormatCloudEvents} {
		res := NewWebhookSender().Send(t.Context(), WebhookConfig{URL: rec.srv.URL, Secret: secret, MessageID: WebhookMessageID(7, 1), Format: format,
			Event: WebhookEvent{Type: "doc.created", Entity: "sales_orders", EntityID: 22, CreatedAt: time.Now()}}, 7, body)
		require.NoError(t, res.Err, format)
		require.Equal(t, http.StatusOK, res.Status, format)
	}
	got := rec.received()
	require.Len(t, got, 2)

	tests := []struct {
		name    string
		alter   func(h http.Header, body []byte) []byte
		wantErr error
	}{
		{name: "unaltered", alter: func(_ http.Header, body []byte) []byte { return body }},
		{name: "tampered body", alter: func(_ http.Header, body []byte) []byte {
			return []byte(strings.Replace(string(body), `"7"`, `"8"`, 1))
		}, wantErr: standardwebhooks.ErrNoMatchingSignature},
		{name: "body with a trailing space", alter: func(_ http.Header, body []byte) []byte { return append(body, ' ') }, wantErr: standardwebhooks.ErrNoMatchingSignature},
		{name: "tampered id", alter: func(h http.Header, body []byte) []byte { h.Set(HeaderWebhookID, "dlv_8_1"); return body }, wantErr: standardwebhooks.ErrNoMatchingSignature},
		{name: "tampered timestamp", alter: func(h http.Header, body []byte) []byte {
			ts, _ := strconv.ParseInt(h.Get(HeaderWebhookTimestamp), 10, 64)
			h.Set(HeaderWebhookTimestamp, strconv.FormatInt(ts+1, 10))
			return body
		}, wantErr: standardwebhooks.ErrNoMatchingSignature},
		{name: "signature removed", alter: func(h http.Header, body []byte) []byte { h.Del(HeaderWebhookSignature); return body }, wantErr: standardwebhooks.ErrRequiredHeaders},
	}
	for _, r := range got {
		for _, tt := range tests {
			h := r.header.Clone()
			b := tt.alter(h, append([]byte(nil), r.body...))
			err := wh.Verify(b, h)
			if tt.wantErr == nil {
				require.NoError(t, err, tt.name)
				continue
			}
			require.ErrorIs(t, err, tt.wantErr, tt.name)
		}
		other, err := NewWebhookSecret()
		require.NoError(t, err)
		whOther, err := standardwebhooks.NewWebhook(other)
		require.NoError(t, err)
		require.ErrorIs(t, whOther.Verify(r.body, r.header), standardwebhooks.ErrNoMatchingSignature, "another secret")
	}
}

func TestWebhookUnsignedAndDefaultID(t *testing.T) {
	t.Parallel()
	rec := newWebhookReceiver(t, acceptWebhook)
	res := newTestSender().Send(t.Context(), WebhookConfig{URL: rec.srv.URL}, 46, []byte(`{}`))
	require.NoError(t, res.Err)
	h := rec.received()[0].header
	require.Equal(t, "evt_46", h.Get(HeaderWebhookID), "no MessageID: the event's")
	require.Equal(t, strconv.FormatInt(webhookClock.Unix(), 10), h.Get(HeaderWebhookTimestamp))
	require.Empty(t, h.Values(HeaderWebhookSignature), "no secret, no signature")
	require.Empty(t, h.Values("X-Erp-Signature"), "the old signature is gone")
}

// A secret that is not whsec_<base64> signs with its bytes: the receiver's
// library takes it as "whsec_" + base64(secret).
func TestWebhookRawSecretSigns(t *testing.T) {
	t.Parallel()
	rec := newWebhookReceiver(t, acceptWebhook)
	body := []byte(`{"id":"1"}`)
	for _, secret := range []string{"s3cret", "whsec_not base64!"} {
		res := NewWebhookSender().Send(t.Context(), WebhookConfig{URL: rec.srv.URL, Secret: secret, MessageID: "dlv_1_1"}, 1, body)
		require.NoError(t, res.Err)
	}
	got := rec.received()
	require.Len(t, got, 2)
	for i, secret := range []string{"s3cret", "whsec_not base64!"} {
		wh, err := standardwebhooks.NewWebhook("whsec_" + base64.StdEncoding.EncodeToString([]byte(secret)))
		require.NoError(t, err)
		require.NoError(t, wh.Verify(got[i].body, got[i].header), secret)
		raw, err := standardwebhooks.NewWebhookRaw([]byte(secret))
		require.NoError(t, err)
		require.NoError(t, raw.Verify(got[i].body, got[i].header), secret)
	}
}

func TestWebhookCloudEventsStructured(t *testing.T) {
	t.Parallel()
	rec := newWebhookReceiver(t, acceptWebhook)
	secret, err := NewWebhookSecret()
	require.NoError(t, err)
	created := time.Date(2026, 3, 2, 9, 29, 58, 123456000, time.UTC)
	body := []byte(`{"id":"46","type":"doc.created","entity":"sales_orders","entityId":"22","payload":{"customer":"Б"}}`)
	ev := WebhookEvent{Type: "doc.created", Entity: "sales_orders", EntityID: 22, CreatedAt: created}

	for _, s := range []*WebhookSender{newTestSender(), NewWebhookSender(WithCloudEventsSource("https://erp.example.com/events"))} {
		res := s.Send(t.Context(), WebhookConfig{URL: rec.srv.URL, Secret: secret, MessageID: "dlv_46_3", Format: WebhookFormatCloudEvents, Event: ev}, 46, body)
		require.NoError(t, res.Err)
	}
	got := rec.received()
	require.Len(t, got, 2)
	for i, wantSource := range []string{"/erp", "https://erp.example.com/events"} {
		r := got[i]
		require.Equal(t, "application/cloudevents+json", r.header.Get("Content-Type"))
		require.Equal(t, "dlv_46_3", r.header.Get(HeaderWebhookID))

		var envelope map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(r.body, &envelope))
		attr := func(name string) string {
			var v string
			require.NoError(t, json.Unmarshal(envelope[name], &v), name)
			return v
		}
		require.Equal(t, "1.0", attr("specversion"))
		require.Equal(t, "dlv_46_3", attr("id"), "id is the delivery's id")
		require.Equal(t, wantSource, attr("source"))
		require.Equal(t, "doc.created", attr("type"))
		require.Equal(t, "sales_orders/22", attr("subject"))
		require.Equal(t, "application/json", attr("datacontenttype"))
		tm, err := time.Parse(time.RFC3339Nano, attr("time"))
		require.NoError(t, err)
		require.True(t, created.Equal(tm), "time is the event's creation: %s", tm)
		require.JSONEq(t, string(body), string(envelope["data"]), "data is the standard body, as JSON")
		require.NotContains(t, envelope, "data_base64")
		require.NotContains(t, envelope, "dataschema", "no PUBLIC_URL: no dataschema")
		require.NotContains(t, envelope, CloudEventsTestExtension, "not an example")
		require.Empty(t, r.header.Get(HeaderTest), "not an example")

		// The SDK a receiver would use reads it back as a valid event.
		var e cloudevent.Event
		require.NoError(t, json.Unmarshal(r.body, &e))
		require.NoError(t, e.Validate())
		require.Equal(t, "dlv_46_3", e.ID())
		require.Equal(t, "sales_orders/22", e.Subject())
		require.JSONEq(t, string(body), string(e.Data()))

		// The signature covers the envelope, as sent.
		wh, err := standardwebhooks.NewWebhook(secret)
		require.NoError(t, err)
		require.NoError(t, wh.VerifyIgnoringTimestamp(r.body, r.header))
	}
}

// An example carries dataschema when given one, the erptest extension and
// HeaderTest, and the SDK reads it back as a valid event.
func TestWebhookCloudEventsExampleAndDataSchema(t *testing.T) {
	t.Parallel()
	rec := newWebhookReceiver(t, acceptWebhook)
	body := []byte(`{"id":"0","type":"doc.created","entity":"example","entityId":"0","payload":{}}`)
	ev := WebhookEvent{Type: "doc.created", Entity: "example", CreatedAt: time.Now(), Example: true,
		DataSchema: dataSchemaURL("https://erp.example.com", "doc.created")}
	res := newTestSender().Send(t.Context(), WebhookConfig{URL: rec.srv.URL, MessageID: "example_x", Format: WebhookFormatCloudEvents, Event: ev}, 0, body)
	require.NoError(t, res.Err)
	got := rec.received()
	require.Len(t, got, 1)
	require.Equal(t, "true", got[0].header.Get(HeaderTest))
	var e cloudevent.Event
	require.NoError(t, json.Unmarshal(got[0].body, &e))
	require.NoError(t, e.Validate())
	require.Equal(t, "https://erp.example.com/schemas/events/doc.created.json", e.DataSchema())
	require.Equal(t, true, e.Extensions()[CloudEventsTestExtension])
	require.Empty(t, dataSchemaURL("", "doc.created"), "no PUBLIC_URL: none")
}

func TestWebhookFormatErrorsArePermanentWithoutRequest(t *testing.T) {
	t.Parallel()
	rec := newWebhookReceiver(t, acceptWebhook)
	tests := []struct {
		name    string
		cfg     WebhookConfig
		body    string
		wantErr string
	}{
		{name: "unknown format", cfg: WebhookConfig{Format: "xml"}, body: `{}`, wantErr: `webhook format "xml" is unknown: use standard_webhooks or cloudevents`},
		{name: "cloudevent without type", cfg: WebhookConfig{Format: WebhookFormatCloudEvents}, body: `{}`, wantErr: "webhook cloudevent evt_5 is invalid"},
		{name: "cloudevent with a body that is not json", cfg: WebhookConfig{Format: WebhookFormatCloudEvents, Event: WebhookEvent{Type: "doc.created"}}, body: `not json`, wantErr: "webhook cloudevent evt_5: set data"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.URL = rec.srv.URL
			res := NewWebhookSender().Send(t.Context(), cfg, 5, []byte(tt.body))
			require.ErrorContains(t, res.Err, tt.wantErr)
			require.True(t, res.Permanent)
			require.Zero(t, res.Status)
		})
	}
	require.Empty(t, rec.received())
}

func TestParseWebhookFormat(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]WebhookFormat{"": WebhookFormatStandard, "standard_webhooks": WebhookFormatStandard, "cloudevents": WebhookFormatCloudEvents} {
		got, err := ParseWebhookFormat(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	_, err := ParseWebhookFormat("CLOUDEVENTS")
	require.EqualError(t, err, `webhook format "CLOUDEVENTS" is unknown: use standard_webhooks or cloudevents`)
}

func TestWebhookMessageID(t *testing.T) {
	t.Parallel()
	require.Equal(t, "dlv_46_3", WebhookMessageID(46, 3))
	require.NotEqual(t, WebhookMessageID(46, 3), WebhookMessageID(46, 4), "two subscribers of one event")
	require.NotEqual(t, WebhookMessageID(4, 63), WebhookMessageID(46, 3), "the separator keeps ids apart")
}

func TestValidateWebhookSecret(t *testing.T) {
	t.Parallel()
	b64 := func(n int) string { return base64.StdEncoding.EncodeToString(make([]byte, n)) }
	const shape = `expected "whsec_" followed by the base64 of 24 to 64 random bytes, as createWebhookSubscriber makes when no secret is given`
	tests := []struct {
		secret  string
		wantErr string
	}{
		{secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
		{secret: "whsec_" + b64(24)},
		{secret: "whsec_" + b64(64)},
		{secret: "", wantErr: "webhook secret is empty: " + shape},
		{secret: "s3cret", wantErr: "webhook secret must start with whsec_: " + shape},
		{secret: b64(32), wantErr: "webhook secret must start with whsec_"},
		{secret: "WHSEC_" + b64(32), wantErr: "webhook secret must start with whsec_"},
		{secret: "whsec_", wantErr: "webhook secret holds 0 bytes: " + shape},
		{secret: "whsec_" + b64(23), wantErr: "webhook secret holds 23 bytes"},
		{secret: "whsec_" + b64(65), wantErr: "webhook secret holds 65 bytes"},
		{secret: "whsec_" + strings.TrimRight(b64(32), "="), wantErr: "webhook secret is not valid base64 after whsec_"},
		{secret: "whsec_" + b64(32) + "\n", wantErr: "webhook secret is not valid base64 after whsec_"},
		{secret: "whsec_" + strings.ReplaceAll(b64(33), "A", "-"), wantErr: "webhook secret is not valid base64 after whsec_"},
	}
	for _, tt := range tests {
		err := ValidateWebhookSecret(tt.secret)
		if tt.wantErr == "" {
			require.NoError(t, err, tt.secret)
			continue
		}
		require.ErrorContains(t, err, tt.wantErr, tt.secret)
	}
}

func TestNewWebhookSecret(t *testing.T) {
	t.Parallel()
	a, err := NewWebhookSecret()
	require.NoError(t, err)
	b, err := NewWebhookSecret()
	require.NoError(t, err)
	require.NotEqual(t, a, b)
	for _, s := range []string{a, b} {
		require.NoError(t, ValidateWebhookSecret(s))
		require.Len(t, s, len("whsec_")+44, "32 bytes")
		_, err := standardwebhooks.NewWebhook(s)
		require.NoError(t, err, "the library reads it")
	}
}

// acceptWebhook is a receiver's handler that answers 200 to everything.
func acceptWebhook(http.ResponseWriter, *http.Request, []byte) {}
