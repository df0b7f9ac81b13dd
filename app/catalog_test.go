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
