package jobs

import (
	"context"
	crand "crypto/rand"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"erp/db"
	"erp/db/catalog"
)

// ExampleIDPrefix starts the webhook-id (and CloudEvents id) of every
// example SendExample sends, "example_" and 26 random base32 characters:
// a real delivery's is "dlv_…" (WebhookMessageID) or a replay's "rpl_…",
// so a receiver that de-duplicates by webhook-id never drops a real event
// for an example, nor the other way round.
const ExampleIDPrefix = "example_"

// exampleEntity is the entity of an example event: its id and entityId
// are 0, which no journal event has.
const exampleEntity = "example"

// ExampleEvent is the example event of eventType created at now, as
// SendExample sends it and TestCondition's example alternative evaluates
// it: id, entity id and actor none (0, 0, nil), entity "example", payload
// catalog.Example(eventType), processed at now. Errors: *db.InputError on
// "type" when the catalog lacks eventType (the message lists its types).
func ExampleEvent(eventType string, now time.Time) (db.Event, error) {
	typ, ok := catalog.Lookup(eventType)
	if !ok {
		return db.Event{}, &db.InputError{Field: "type",
			Msg: fmt.Sprintf("event type %q is not in the catalog: use one of %s", eventType, strings.Join(catalog.Names(), ", "))}
	}
	return db.Event{Type: eventType, Entity: exampleEntity, Payload: typ.Example, CreatedAt: now, ProcessedAt: &now}, nil
}

// SendExample sends the catalog example of eventType to the webhook
// subscriber named subscriber, once, built and signed as a delivery of a journal event
// would be (the subscriber's format, secrets, rotation grace, timeout and
// the address guard), whatever the subscriber's filters. The event's id,
// entityId and HeaderEventID are 0, its entity "example", its payload
// catalog.Example(eventType); the request carries HeaderTest (a
// CloudEvent also the CloudEventsTestExtension attribute) and a webhook-id
// of ExampleIDPrefix. Nothing is journaled and no delivery is made: the
// attempt alone is logged (db.ExampleAttempts), and pruned with the
// attempt log. No transaction or connection is held during the request,
// which the subscriber's timeout bounds. A failed request is the
// returned attempt's Error, not an error. Errors: *db.InputError on
// "type" (not in the catalog; the message lists the known types) or on
// "subscriber" (not a webhook; paused or disabled, as a conflict: resume
// it first), db.ErrNotFound (no subscriber of that name).
func (d *Dispatcher) SendExample(ctx context.Context, subscriber string, eventType string) (db.AttemptLog, error) {
	ev, err := ExampleEvent(eventType, d.now())
	if err != nil {
		return db.AttemptLog{}, err
	}
	sub, err := db.SubscriberByName(ctx, d.pool, subscriber)
	if err != nil {
		return db.AttemptLog{}, err
	}
	switch {
	case sub.Kind != db.SubscriberWebhook:
		return db.AttemptLog{}, &db.InputError{Field: "subscriber",
			Msg: fmt.Sprintf("subscriber %s is a %s subscriber: examples are sent to webhooks only", sub.Name, sub.Kind)}
	case sub.Paused:
		return db.AttemptLog{}, &db.InputError{Field: "subscriber", Conflict: true,
			Msg: fmt.Sprintf("webhook %s is paused or disabled: resume it first (resumeSubscriber)", sub.Name)}
	}
	target, err := db.WebhookTargetOf(ctx, d.pool, sub.ID)
	if err != nil {
		return db.AttemptLog{}, err
	}
	msgID := ExampleIDPrefix + strings.ToLower(crand.Text())
	l, startedAt, err := db.StartExampleAttempt(ctx, d.pool, sub.ID, eventType, msgID, d.instance)
	if err != nil {
		return db.AttemptLog{}, err
	}
	body, err := json.Marshal(feedView(ev))
	if err != nil {
		return db.AttemptLog{}, fmt.Errorf("marshal example of %s: %w", eventType, err)
	}
	we := d.webhookEvent(ev)
	we.Example = true
	res := d.webhooks.Send(ctx, webhookConfig(target, sub, msgID, we), 0, body)

	a := db.Attempt{Status: db.DeliveryDelivered, Duration: res.Duration, ResponseStatus: res.Status, ResponseBody: res.Body}
	if res.Err != nil {
		a.Status, a.Error = db.DeliveryFailed, res.Err.Error()
	}
	// Recorded even when ctx ended meanwhile: the request went out.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	if err := db.FinishAttempt(rctx, d.pool, l, a); err != nil {
		return db.AttemptLog{}, err
	}
	out := db.AttemptLog{ExampleOf: &eventType, MessageID: &msgID, Attempt: 1, Instance: d.instance,
		StartedAt: startedAt, Status: a.Status, DurationMs: new(int32(a.Duration / time.Millisecond))}
	if a.ResponseStatus != 0 {
		out.ResponseStatus = new(int32(a.ResponseStatus))
		out.ResponseBody = &a.ResponseBody
	}
	if a.Error != "" {
		out.Error = &a.Error
	}
	return out, nil
}
