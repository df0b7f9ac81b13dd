package app_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"erp/app/apptest"
	"erp/db/catalog"
)

// The catalog is readable by every signed-in role, and the schema served
// for a type validates the events of that type the server sends.
func TestEventTypesAndTheirSchemas(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	viewer := apptest.RoleToken(t, s, "viewer", "VIEWER")
	got := apptest.GQL[struct {
		EventTypes []struct {
			Name       string
			Version    int
			Schema     json.RawMessage
			Example    json.RawMessage
			Deprecated bool
		}
	}](t, s.As(viewer), `{ eventTypes { name version schema example deprecated } }`, nil)
	require.Len(t, got.EventTypes, len(catalog.Names()))
	require.Equal(t, "doc.created", got.EventTypes[0].Name)
	require.JSONEq(t, `{"id": 46, "no": "ВЦ-2026-000045", "entity": "wh_move"}`, string(got.EventTypes[0].Example))

	apptest.SeedItem(t, s)
	apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": "ООО Ромашка"})
	apptest.WaitAllProcessed(t, s)
	events := apptest.GQL[struct {
		Events struct {
			Edges []struct{ Node json.RawMessage }
		}
	}](t, s, `{ events(filter: {types: ["doc.created"]}) { edges { node {
		id type entity entityId object payload createdAt processedAt actor { id login displayName } } } } }`, nil)
	require.NotEmpty(t, events.Events.Edges)

	get := func(token, path string) (int, []byte) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.URL+path, nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, b
	}
	code, body := get(viewer, "/schemas/events/doc.created.json")
	require.Equal(t, http.StatusOK, code, string(body))
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	require.NoError(t, c.AddResource("doc.created.json", doc))
	schema, err := c.Compile("doc.created.json")
	require.NoError(t, err)
	for _, e := range events.Events.Edges {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(e.Node))
		require.NoError(t, err)
		require.NoError(t, schema.Validate(v), string(e.Node))
	}

	code, _ = get("", "/schemas/events/doc.created.json")
	require.Equal(t, http.StatusUnauthorized, code)
	code, body = get(viewer, "/schemas/events/doc.create.json")
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, string(body), `no event type "doc.create.json"`)
}

// GET /asyncapi.json is an AsyncAPI 3.0.0 document with the webhook,
// feed, feedSSE and nats channels, each with a message per type of the
// catalog (webhook and nats one more per type for the CloudEvents format,
// with its content type; the feed's without headers); like the schemas it
// needs a signed-in token.
func TestAsyncAPIDocument(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	viewer := apptest.RoleToken(t, s, "viewer", "VIEWER")
	get := func(token string) (int, []byte) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.URL+"/asyncapi.json", nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, b
	}
	code, _ := get("")
	require.Equal(t, http.StatusUnauthorized, code)
	code, body := get(viewer)
	require.Equal(t, http.StatusOK, code, string(body))

	var doc struct {
		AsyncAPI string
		Channels map[string]struct {
			Address  *string
			Messages map[string]struct {
				Ref string `json:"$ref"`
			}
		}
		Operations map[string]struct {
			Action  string
			Channel struct {
				Ref string `json:"$ref"`
			}
		}
		Components struct {
			Messages map[string]json.RawMessage
			Schemas  map[string]json.RawMessage
		}
	}
	require.NoError(t, json.Unmarshal(body, &doc))
	require.Equal(t, "3.0.0", doc.AsyncAPI)
	names := catalog.Names()
	require.Len(t, doc.Components.Messages, 5*len(names), "per type: webhook and nats, each plain and CloudEvent, and the feed's")
	for _, n := range names {
		require.Contains(t, doc.Components.Schemas, n)
	}
	require.Len(t, doc.Channels, 4)
	for ch, want := range map[string][]string{
		"webhook": {"webhook.doc.created", "webhook.doc.created.cloudevent"},
		"nats":    {"nats.doc.created", "nats.doc.created.cloudevent"},
		"feed":    {"feed.doc.created"},
		"feedSSE": {"feed.doc.created"},
	} {
		require.Contains(t, doc.Channels, ch)
		require.Len(t, doc.Channels[ch].Messages, len(want)*len(names), ch)
		for _, m := range want {
			require.Equal(t, "#/components/messages/"+m, doc.Channels[ch].Messages[m].Ref, ch)
		}
		op := doc.Operations["receive-"+ch]
		require.Equal(t, "receive", op.Action, ch)
		require.Equal(t, "#/channels/"+ch, op.Channel.Ref, ch)
	}
	var message struct {
		ContentType string
		Headers     *struct {
			Ref string `json:"$ref"`
		}
	}
	for name, want := range map[string]struct{ contentType, headers string }{
		"webhook.doc.created":            {"application/json", "#/components/schemas/WebhookHeaders"},
		"nats.doc.created.cloudevent":    {"application/cloudevents+json", "#/components/schemas/NatsHeaders"},
		"webhook.doc.created.cloudevent": {"application/cloudevents+json", "#/components/schemas/WebhookHeaders"},
	} {
		require.NoError(t, json.Unmarshal(doc.Components.Messages[name], &message))
		require.Equal(t, want.contentType, message.ContentType, name)
		require.NotNil(t, message.Headers, name)
		require.Equal(t, want.headers, message.Headers.Ref, name)
	}
	message.Headers = nil
	require.NoError(t, json.Unmarshal(doc.Components.Messages["feed.doc.created"], &message))
	require.Nil(t, message.Headers, "the live feed has no headers")
	var feed struct {
		Payload struct {
			Properties struct {
				Data struct {
					Properties struct {
						EventProcessed struct {
							Required   []string
							Properties map[string]json.RawMessage
						}
					}
				}
			}
		}
	}
	require.NoError(t, json.Unmarshal(doc.Components.Messages["feed.doc.created"], &feed))
	processed := feed.Payload.Properties.Data.Properties.EventProcessed
	require.Contains(t, processed.Properties, "cursor", "a feed result says where to resume")
	require.Contains(t, processed.Properties, "payload")
	require.Empty(t, processed.Required, "a result has the fields the subscription selected")
	require.Nil(t, doc.Channels["webhook"].Address, "a webhook's URL is the subscriber's")
	require.Equal(t, "{subjectPrefix}.{entity}.{entityId}.{type}", *doc.Channels["nats"].Address)
}
