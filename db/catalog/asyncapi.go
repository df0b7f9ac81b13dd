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
// eventProcessed over a websocket), feedSSE (the same over Server-Sent
// Events, with an HTTP binding: POST) and nats (JetStream subjects
// <subjectPrefix>.<entity>.<entityId>.<type>), each with a receive
// operation. Per type of Types, components.messages has webhook.<type>
// and nats.<type> (the whole event, EventSchema, in components.schemas;
// application/json) and their <...>.cloudevent (the CloudEvent carrying
// it; application/cloudevents+json), with the channel's headers
// (WebhookHeaders, NatsHeaders), and feed.<type>, for both feed channels:
// the GraphQL result carrying the event's selected fields and cursor, no
// headers. The error is that of a schema of the catalog that
// does not parse, a build mistake the package's tests catch.
func AsyncAPI() ([]byte, error) {
	messages := map[string]any{}
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
	str := func(d string) map[string]any { return map[string]any{"type": "string", "description": d} }
	headers := func(description string, h map[string]any) map[string]any {
		return map[string]any{"description": description, "type": "object", "properties": h}
	}
	schemas["WebhookHeaders"] = headers("the headers of a webhook request", map[string]any{
		"webhook-id":        str("the delivery's stable id, the same at every retry and redelivery: dlv_<event id>_<subscriber id> (a replay's rpl_<replay id>_<event id>_<subscriber id>); de-duplicate by it"),
		"webhook-timestamp": str("the attempt's time, unix seconds"),
		"webhook-signature": str("v1,<base64 HMAC-SHA256 of id.timestamp.body>; two, space-separated, during a secret rotation"),
		"X-Erp-Event-Id":    str("the journal event's id, decimal"),
		"Content-Type":      str("application/json, or application/cloudevents+json with format CLOUDEVENTS"),
		"User-Agent":        str("erp-webhook/1"),
		"X-Erp-Test":        str(`"true" on a catalog example sent by sendExampleEvent (no journal event); absent otherwise`),
		"traceparent":       str("W3C trace context of the delivery's span, when tracing is on"),
	})
	schemas["NatsHeaders"] = headers("the headers of a JetStream message", map[string]any{
		"Nats-Msg-Id":          str("the delivery's stable id, as a webhook's webhook-id; JetStream de-duplicates by it"),
		"Nats-Expected-Stream": str("the subscriber's stream: a publish that another stream would store fails"),
		"Erp-Event-Id":         str("the journal event's id, decimal"),
		"Erp-Event-Type":       str("the event type"),
		"Erp-Event-Time":       str("the event's creation, RFC 3339, UTC"),
		"Content-Type":         str("application/json, or application/cloudevents+json with format CLOUDEVENTS"),
		"traceparent":          str("W3C trace context of the delivery's span, when tracing is on"),
	})
	// Each channel has messages of its own: a webhook's and a JetStream
	// message's headers differ, the feed has none, and the format
	// CLOUDEVENTS is a message of its own with its content type.
	refs := map[string]map[string]any{"webhook": {}, "nats": {}, "feed": {}}
	for _, t := range Types() {
		s, err := eventSchema(t)
		if err != nil {
			return nil, err
		}
		schemas[t.Name] = s
		event := map[string]any{"$ref": "#/components/schemas/" + t.Name}
		cloudEvent := map[string]any{"allOf": []any{
			map[string]any{"$ref": "#/components/schemas/CloudEvent"},
			map[string]any{"properties": map[string]any{"type": map[string]any{"const": t.Name}, "data": event}},
		}}
		message := func(name, contentType string, payload any, headers string) {
			m := map[string]any{
				"name":        name,
				"title":       fmt.Sprintf("%s v%d", t.Name, t.Version),
				"summary":     t.Description,
				"contentType": contentType,
				"payload":     payload,
			}
			if headers != "" {
				m["headers"] = map[string]any{"$ref": "#/components/schemas/" + headers}
			}
			if t.Deprecated != nil {
				m["description"] = "Deprecated: " + DeprecationWarnings([]string{t.Name})[0] + "."
			}
			messages[name] = m
		}
		for _, ch := range []struct{ channel, headers string }{{"webhook", "WebhookHeaders"}, {"nats", "NatsHeaders"}} {
			plain, ce := ch.channel+"."+t.Name, ch.channel+"."+t.Name+".cloudevent"
			message(plain, "application/json", event, ch.headers)
			message(ce, "application/cloudevents+json", cloudEvent, ch.headers)
			refs[ch.channel][plain] = map[string]any{"$ref": "#/components/messages/" + plain}
			refs[ch.channel][ce] = map[string]any{"$ref": "#/components/messages/" + ce}
		}
		message("feed."+t.Name, "application/json", feedResult(s), "")
		refs["feed"]["feed."+t.Name] = map[string]any{"$ref": "#/components/messages/feed." + t.Name}
	}
	channels := map[string]any{
		"webhook": map[string]any{
			"address":     nil,
			"title":       "Webhook",
			"description": "An HTTP POST to the URL of a webhook subscriber (createWebhookSubscriber), one event a request, with the Standard Webhooks headers webhook-id, webhook-timestamp and webhook-signature. The body is the event as JSON (application/json), or with format CLOUDEVENTS a CloudEvent in structured mode (application/cloudevents+json) whose data is the event. A 2xx answer is the delivery; others are retried. See docs/webhooks.md.",
			"messages":    refs["webhook"],
		},
		"feed": map[string]any{
			"address":     "/graphql",
			"title":       "Live feed",
			"description": "The GraphQL subscription eventProcessed(after: <cursor>) over a websocket at /graphql, subprotocol graphql-transport-ws (next messages) or the legacy graphql-ws (data messages): each result's data.eventProcessed is the event, with the fields the subscription selected (never a CloudEvent), and no headers. Resume after a disconnection with the last event's cursor. See docs/live-feed.md.",
			"messages":    refs["feed"],
		},
		"feedSSE": map[string]any{
			"address":     "/graphql",
			"title":       "Live feed over SSE",
			"description": "The same subscription over Server-Sent Events (graphql-sse, distinct connections mode), for clients behind proxies that break websockets: POST /graphql with Accept: text/event-stream, Authorization: Bearer <token> and the subscription as the JSON body; each event: next carries a result whose data.eventProcessed is the event, as on the websocket. A stream that ends with event: complete is finished; one that ends without it was cut (slow consumer, token revoked, role changed, server shutting down: its last next event carries the reason as an error) and resumes with after: <the last cursor received>. See docs/live-feed.md.",
			"messages":    refs["feed"],
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
			"messages": refs["nats"],
		},
	}
	operations := map[string]any{}
	for name, summary := range map[string]string{
		"webhook": "A webhook subscriber receives the events its filter takes.",
		"feed":    "A client subscribed to eventProcessed receives each processed event it may read.",
		"feedSSE": "A client subscribed to eventProcessed over SSE receives each processed event it may read.",
		"nats":    "A JetStream consumer receives the events a NATS subscriber published.",
	} {
		operations["receive-"+name] = map[string]any{
			"action":  "receive",
			"summary": summary,
			"channel": map[string]any{"$ref": "#/channels/" + name},
		}
	}
	post := map[string]any{"http": map[string]any{"method": "POST", "bindingVersion": "0.3.0"}}
	operations["receive-feedSSE"].(map[string]any)["bindings"] = post
	operations["receive-webhook"].(map[string]any)["bindings"] = post
	doc := map[string]any{
		"asyncapi": AsyncAPIVersion,
		"info": map[string]any{
			"title":       "ERP events",
			"version":     "1.0.0",
			"description": "The events the ERP journals and how it delivers them: webhooks, the GraphQL live feed (websocket or SSE) and NATS JetStream. Generated from the event catalog; GET /schemas/events/<type>.json serves each type's schema alone.",
		},
		"channels":   channels,
		"operations": operations,
		"components": map[string]any{"messages": messages, "schemas": schemas},
	}
	return json.MarshalIndent(doc, "", "  ")
}

// feedResult is the schema of a live feed's result carrying an event
// whose whole schema is event: a GraphQL response whose
// data.eventProcessed has the fields the subscription selected (any of
// event's, none required) and cursor, where to resume.
func feedResult(event map[string]any) map[string]any {
	props := map[string]any{"cursor": map[string]any{"type": "string",
		"description": "the event's position in the feed: resume with eventProcessed(after: cursor)"}}
	for k, v := range event["properties"].(map[string]any) {
		props[k] = v
	}
	return map[string]any{
		"description": "a GraphQL response: the payload of a graphql-transport-ws next or graphql-ws data message, or the data of an SSE next event",
		"type":        "object",
		"properties": map[string]any{
			"data": map[string]any{"type": "object", "properties": map[string]any{
				"eventProcessed": map[string]any{
					"title":       event["title"],
					"description": "the fields the subscription selected",
					"type":        "object",
					"properties":  props,
				},
			}},
			"errors":     map[string]any{"type": "array", "description": "GraphQL errors, each with extensions.code; a stream cut by the server ends with one"},
			"extensions": map[string]any{"type": "object"},
		},
	}
}
