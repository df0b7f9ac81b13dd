package jobs

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	cloudevent "github.com/cloudevents/sdk-go/v2/event"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Headers of the Standard Webhooks spec, sent with every webhook request
// whatever its format: a receiver de-duplicates by HeaderWebhookID and
// verifies the signature with the spec's library of its language, e.g. in
// Go standardwebhooks.NewWebhook(secret).Verify(body, r.Header).
const (
	// HeaderWebhookID is the delivery's stable id (WebhookConfig.MessageID):
	// every retry and redelivery of one delivery carries the same one.
	HeaderWebhookID = standardwebhooks.HeaderWebhookID
	// HeaderWebhookTimestamp is the time of signing in unix seconds.
	HeaderWebhookTimestamp = standardwebhooks.HeaderWebhookTimestamp
	// HeaderWebhookSignature is "v1," + base64(HMAC-SHA256(key, id + "." +
	// timestamp + "." + body)); absent when the subscriber has no secret;
	// two of them, space-separated (the new secret's first), during a
	// rotation's grace period.
	HeaderWebhookSignature = standardwebhooks.HeaderWebhookSignature
)

// WebhookFormat is the shape of a webhook request's body; the zero value
// is WebhookFormatStandard. It is stored as its string (a text column).
type WebhookFormat string

const (
	// WebhookFormatStandard sends the event as JSON (the events feed's
	// shape), Content-Type application/json.
	WebhookFormatStandard WebhookFormat = "standard_webhooks"
	// WebhookFormatCloudEvents sends a CloudEvents 1.0 event in structured
	// mode, Content-Type application/cloudevents+json: id is the delivery's
	// id, source the sender's (WithCloudEventsSource, "/erp" by default),
	// type the event type, subject "<entity>/<entity id>", time the event's
	// creation, dataschema the URL of the event's JSON Schema (when the
	// server has PUBLIC_URL), data the event as JSON (the standard format's
	// body, which that schema describes).
	WebhookFormatCloudEvents WebhookFormat = "cloudevents"
)

// ParseWebhookFormat returns the format named s ("" is the standard one);
// the error lists the known names.
func ParseWebhookFormat(s string) (WebhookFormat, error) {
	switch f := WebhookFormat(s); f {
	case "", WebhookFormatStandard:
		return WebhookFormatStandard, nil
	case WebhookFormatCloudEvents:
		return f, nil
	}
	return "", fmt.Errorf("webhook format %q is unknown: use %s or %s", s, WebhookFormatStandard, WebhookFormatCloudEvents)
}

// WebhookEvent describes the journal event a request carries, for the
// formats whose envelope names it (CloudEvents). Type, Entity, EntityID and
// CreatedAt come from the events row.
type WebhookEvent struct {
	Type      string
	Entity    string
	EntityID  int64
	CreatedAt time.Time
	// DataSchema is the CloudEvents dataschema, the absolute URL of the
	// JSON Schema the data (the whole event) adheres to; empty: none.
	DataSchema string
	// Example marks a catalog example sent by sendExampleEvent, not a
	// journal event: a request carries HeaderTest, a CloudEvent the
	// extension attribute CloudEventsTestExtension, both true.
	Example bool
}

// CloudEventsTestExtension is the CloudEvents extension attribute, a
// boolean, that marks an example sent by sendExampleEvent (extension
// names are lowercase alphanumeric).
const CloudEventsTestExtension = "erptest"

// dataSchemaURL is the URL GET /schemas/events/<type>.json answers on the
// server at publicURL; "" when publicURL is.
func dataSchemaURL(publicURL, eventType string) string {
	if publicURL == "" {
		return ""
	}
	return publicURL + "/schemas/events/" + url.PathEscape(eventType) + ".json"
}

// defaultCloudEventsSource is the CloudEvents source when the sender is
// given none: a URI-reference naming this system.
const defaultCloudEventsSource = "/erp"

// webhookSecretPrefix starts every secret of the Standard Webhooks form.
const webhookSecretPrefix = "whsec_"

// Bounds of a secret's key in bytes, those the Standard Webhooks spec
// recommends; NewWebhookSecret makes 32.
const (
	minWebhookKey = 24
	maxWebhookKey = 64
	newWebhookKey = 32
)

// WebhookMessageID is the stable id of the delivery of event eventID to
// subscriber subscriberID, "dlv_<event id>_<subscriber id>" (e.g.
// "dlv_46_3"): the value for WebhookConfig.MessageID, the same at every
// attempt and redelivery, distinct for two subscribers of one event.
func WebhookMessageID(eventID, subscriberID int64) string {
	return "dlv_" + strconv.FormatInt(eventID, 10) + "_" + strconv.FormatInt(subscriberID, 10)
}

// ValidateWebhookSecret reports whether s is a Standard Webhooks secret:
// "whsec_" followed by the standard base64 (with padding) of 24 to 64 bytes.
func ValidateWebhookSecret(s string) error {
	const shape = `"whsec_" followed by the base64 of 24 to 64 random bytes, as createWebhookSubscriber makes when no secret is given`
	if s == "" {
		return errors.New("webhook secret is empty: expected " + shape)
	}
	b64, ok := strings.CutPrefix(s, webhookSecretPrefix)
	if !ok {
		return errors.New("webhook secret must start with whsec_: expected " + shape)
	}
	// Go's decoder skips line breaks; other languages' libraries may not.
	key, err := base64.StdEncoding.Strict().DecodeString(b64)
	if err != nil || strings.ContainsAny(b64, "\r\n") {
		return errors.New("webhook secret is not valid base64 after whsec_: expected " + shape)
	}
	if len(key) < minWebhookKey || len(key) > maxWebhookKey {
		return fmt.Errorf("webhook secret holds %d bytes: expected %s", len(key), shape)
	}
	return nil
}

// NewWebhookSecret returns a new random secret, "whsec_" + the base64 of
// 32 bytes from crypto/rand.
func NewWebhookSecret() (string, error) {
	key := make([]byte, newWebhookKey)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("new webhook secret: %w", err)
	}
	return webhookSecretPrefix + base64.StdEncoding.EncodeToString(key), nil
}

// webhookSigner returns the Standard Webhooks signer of secret. A secret of
// the whsec_<base64> form signs with the key it encodes, as every Standard
// Webhooks library reads it; any other non-empty secret (one stored without
// ValidateWebhookSecret) signs with its bytes as they are, which a receiver
// verifies with the secret "whsec_" + base64(secret).
func webhookSigner(secret string) (*standardwebhooks.Webhook, error) {
	if b64, ok := strings.CutPrefix(secret, webhookSecretPrefix); ok {
		if _, err := base64.StdEncoding.DecodeString(b64); err == nil {
			return standardwebhooks.NewWebhook(secret)
		}
	}
	return standardwebhooks.NewWebhookRaw([]byte(secret))
}

// webhookSignature is the webhook-signature header's value: the signature
// with secret and, when previous is set, a space and the one with previous,
// the spec's form for several keys.
func webhookSignature(secret, previous, msgID string, at time.Time, payload []byte) (string, error) {
	var sigs []string
	for _, s := range []string{secret, previous} {
		if s == "" {
			continue
		}
		signer, err := webhookSigner(s)
		if err != nil {
			return "", err
		}
		sig, err := signer.Sign(msgID, at, payload)
		if err != nil {
			return "", err
		}
		sigs = append(sigs, sig)
	}
	return strings.Join(sigs, " "), nil
}

// webhookPayload returns the request body and its Content-Type for format:
// body as it is, or wrapped in a CloudEvents envelope.
func webhookPayload(format WebhookFormat, source, messageID string, ev WebhookEvent, body []byte) ([]byte, string, error) {
	switch format {
	case "", WebhookFormatStandard:
		return body, "application/json", nil
	case WebhookFormatCloudEvents:
		e := cloudevent.New(cloudevent.CloudEventsVersionV1)
		e.SetID(messageID)
		e.SetSource(source)
		e.SetType(ev.Type)
		if ev.Entity != "" {
			e.SetSubject(ev.Entity + "/" + strconv.FormatInt(ev.EntityID, 10))
		}
		if !ev.CreatedAt.IsZero() {
			e.SetTime(ev.CreatedAt)
		}
		if ev.DataSchema != "" {
			e.SetDataSchema(ev.DataSchema)
		}
		if ev.Example {
			e.SetExtension(CloudEventsTestExtension, true)
		}
		// json.RawMessage, not []byte: the SDK would base64 a []byte
		// (data_base64) instead of embedding the JSON as data.
		if err := e.SetData(cloudevent.ApplicationJSON, json.RawMessage(body)); err != nil {
			return nil, "", fmt.Errorf("webhook cloudevent %s: set data: %w", messageID, err)
		}
		if err := e.Validate(); err != nil {
			return nil, "", fmt.Errorf("webhook cloudevent %s is invalid: %w", messageID, err)
		}
		out, err := json.Marshal(e)
		if err != nil {
			return nil, "", fmt.Errorf("webhook cloudevent %s: encode: %w", messageID, err)
		}
		return out, cloudevent.ApplicationCloudEventsJSON, nil
	}
	return nil, "", fmt.Errorf("webhook format %q is unknown: use %s or %s", format, WebhookFormatStandard, WebhookFormatCloudEvents)
}
