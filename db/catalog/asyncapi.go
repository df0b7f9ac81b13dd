package catalog

import (
	"encoding/json"
	"fmt"
)

// AsyncAPIVersion is the version of the AsyncAPI specification AsyncAPI
// follows.
const AsyncAPIVersion = "3.0.0"

// AsyncAPI returns an AsyncAPI 3.0.0 document (JSON) of the ways the server
// sends its events: the channels webhook (HTTP POST to a subscriber's URL,
// Standard Webhooks headers), feed (the GraphQL subscription
// eventProcessed over a websocket) and nats (JetStream subjects
// <subjectPrefix>.<entity>.<entityId>.<type>), each with a receive
// operation. components.messages has one message per type of Types, named
// by the type, whose payload is the type's whole event (EventSchema, in
// components.schemas) or, for webhook and nats with format CLOUDEVENTS,
// the CloudEvent carrying it. The error is that of a schema of the catalog
// that does not parse, a build mistake the package's tests catch.
func AsyncAPI() ([]byte, error) {
	messages := map[string]any{}
	refs := map[string]any{}
	schemas := map[string]any{
		"CloudEvent": map[string]any{
			"description": "a CloudEvents 1.0 event in structured mode (application/cloudevents+json), sent instead of the bare event with format CLOUDEVENTS",
			"type":        "object",
			"required":    []string{"specversion", "id", "source", "type", "data"},
			"properties": map[string]any{
				"specversion":     map[string]any{"const": "1.0"},
				"id":              map[string]any{"type": "string", "description": "the delivery's id, as webhook-id and Nats-Msg-Id"},
				"source":          map[string]any{"type": "string", "description": `the sender's, "/erp" by default`},
				"type":            map[string]any{"type": "string", "description": "the event type"},
				"subject":         map[string]any{"type": "string", "description": "<entity>/<entityId>"},
				"time":            map[string]any{"type": "string", "format": "date-time", "description": "the event's createdAt"},
				"datacontenttype": map[string]any{"const": "application/json"},
				"dataschema":      map[string]any{"type": "string", "format": "uri", "description": "<PUBLIC_URL>/schemas/events/<type>.json, the schema data adheres to (the type's whole event); absent when the server has no PUBLIC_URL"},
				"erptest":         map[string]any{"type": "boolean", "description": "true on an example sent by sendExampleEvent (no journal event); absent otherwise"},
				"data":            map[string]any{"description": "the event"},
			},
		},
	}
	for _, t := range Types() {
		s, err := eventSchema(t)
		if err != nil {
			return nil, err
		}
		schemas[t.Name] = s
		ref := map[string]any{"$ref": "#/components/schemas/" + t.Name}
		m := map[string]any{
			"name":    t.Name,
			"title":   fmt.Sprintf("%s v%d", t.Name, t.Version),
			"summary": t.Description,
			"headers": map[string]any{"$ref": "#/components/schemas/Headers"},
			"payload": map[string]any{"oneOf": []any{ref, map[string]any{
				"allOf": []any{
					map[string]any{"$ref": "#/components/schemas/CloudEvent"},
					map[string]any{"properties": map[string]any{"type": map[string]any{"const": t.Name}, "data": ref}},
				},
			}}},
		}
		if t.Deprecated != nil {
			m["description"] = "Deprecated: " + DeprecationWarnings([]string{t.Name})[0] + "."
		}
		messages[t.Name] = m
		refs[t.Name] = map[string]any{"$ref": "#/components/messages/" + t.Name}
	}
	str := func(d string) map[string]any { return map[string]any{"type": "string", "description": d} }
	schemas["Headers"] = map[string]any{
		"description": "the headers of a delivery; which come depends on the channel",
		"type":        "object",
		"properties": map[string]any{
			"webhook-id":        str("webhook: the delivery's stable id, the same at every retry and redelivery: dlv_<event id>_<subscriber id> (a replay's rpl_<replay id>_<event id>_<subscriber id>); de-duplicate by it"),
			"webhook-timestamp": str("webhook: the attempt's time, unix seconds"),
			"webhook-signature": str("webhook: v1,<base64 HMAC-SHA256 of id.timestamp.body>; two, space-separated, during a secret rotation"),
			"X-Erp-Event-Id":    str("webhook: the journal event's id, decimal"),
			"Nats-Msg-Id":       str("nats: the delivery's stable id, as webhook-id; JetStream de-duplicates by it"),
			"Erp-Event-Id":      str("nats: the journal event's id, decimal"),
			"Erp-Event-Type":    str("nats: the event type"),
			"Erp-Event-Time":    str("nats: the event's creation, RFC 3339, UTC"),
			"Content-Type":      str("webhook and nats: application/json, or application/cloudevents+json with format CLOUDEVENTS"),
			"traceparent":       str("webhook and nats: W3C trace context of the delivery's span, when tracing is on"),
		},
	}
	channels := map[string]any{
		"webhook": map[string]any{
			"address":     nil,
			"title":       "Webhook",
			"description": "An HTTP POST to the URL of a webhook subscriber (createWebhookSubscriber), one event a request, with the Standard Webhooks headers webhook-id, webhook-timestamp and webhook-signature. The body is the event as JSON (application/json), or with format CLOUDEVENTS a CloudEvent in structured mode (application/cloudevents+json) whose data is the event. A 2xx answer is the delivery; others are retried. See docs/webhooks.md.",
			"messages":    refs,
		},
		"feed": map[string]any{
			"address":     "/graphql",
			"title":       "Live feed",
			"description": "The GraphQL subscription eventProcessed(after: <cursor>) over a websocket at /graphql, subprotocol graphql-transport-ws (next messages) or the legacy graphql-ws (data messages): each result's data.eventProcessed is the event, with the fields the subscription selected (never a CloudEvent). Resume after a disconnection with the last event's cursor. See docs/live-feed.md.",
			"messages":    refs,
		},
		"nats": map[string]any{
			"address":     "{subjectPrefix}.{entity}.{entityId}.{type}",
			"title":       "NATS JetStream",
			"description": "A NATS subscriber (createNatsSubscriber) publishes each event to its JetStream stream on this subject, with the headers Nats-Msg-Id, Erp-Event-Id, Erp-Event-Type and Erp-Event-Time. The body is the event as JSON, or a CloudEvent in structured mode with format CLOUDEVENTS. The type's dot is a subject separator. See docs/nats.md.",
			"parameters": map[string]any{
				"subjectPrefix": map[string]any{"description": "the subscriber's subjectPrefix, e.g. erp.journal"},
				"entity":        map[string]any{"description": "the table the event is about, e.g. sales_orders"},
				"entityId":      map[string]any{"description": "the id of the entity, decimal"},
				"type":          map[string]any{"description": "the event type, e.g. order.received"},
			},
			"messages": refs,
		},
	}
	operations := map[string]any{}
	for name, summary := range map[string]string{
		"webhook": "A webhook subscriber receives the events its filter takes.",
		"feed":    "A client subscribed to eventProcessed receives each processed event it may read.",
		"nats":    "A JetStream consumer receives the events a NATS subscriber published.",
	} {
		operations["receive-"+name] = map[string]any{
			"action":  "receive",
			"summary": summary,
			"channel": map[string]any{"$ref": "#/channels/" + name},
		}
	}
	doc := map[string]any{
		"asyncapi": AsyncAPIVersion,
		"info": map[string]any{
			"title":       "ERP events",
			"version":     "1.0.0",
			"description": "The events the ERP journals and how it delivers them: webhooks, the GraphQL live feed and NATS JetStream. Generated from the event catalog; GET /schemas/events/<type>.json serves each type's schema alone.",
		},
		"channels":   channels,
		"operations": operations,
		"components": map[string]any{"messages": messages, "schemas": schemas},
	}
	return json.MarshalIndent(doc, "", "  ")
}
