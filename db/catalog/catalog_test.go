package catalog_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"erp/db/catalog"
)

func TestCatalogExamplesValidate(t *testing.T) {
	t.Parallel()
	v, err := catalog.NewValidator()
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, typ := range catalog.Types() {
		require.False(t, seen[typ.Name], "type %s declared twice", typ.Name)
		seen[typ.Name] = true
		require.NotEmpty(t, typ.Description, typ.Name)
		require.GreaterOrEqual(t, typ.Version, 1, typ.Name)
		require.NoError(t, v.Validate(typ.Name, typ.Example), "example of %s", typ.Name)
		if typ.Deprecated != nil && typ.Deprecated.ReplacedBy != "" {
			_, ok := catalog.Lookup(typ.Deprecated.ReplacedBy)
			require.True(t, ok, "%s is replaced by %s, which the catalog lacks", typ.Name, typ.Deprecated.ReplacedBy)
		}
	}
	require.True(t, slices.IsSorted(catalog.Names()))
}

func TestValidatorRefuses(t *testing.T) {
	t.Parallel()
	v, err := catalog.NewValidator()
	require.NoError(t, err)
	tests := []struct {
		typ, payload, want string
	}{
		{"doc.created", `{"id": 1, "no": "ЗК-2026-000001", "entity": "invoice"}`, "does not match"},
		{"doc.created", `{"id": 1, "entity": "sales_order"}`, "does not match"},
		{"doc.created", `{"id": 1, "no": "ЗК-2026-000001", "entity": "sales_order", "extra": 1}`, "does not match"},
		{"order.received", `{"lines": 1, "source": "crm", "sync_id": "shop-1", "order_id": 2}`, "does not match"},
		{"subscriber.disabled", `{"subscriber": "a", "reason": "gone", "since": "yesterday"}`, "does not match"},
		{"doc.create", `{}`, "not in the catalog"},
		{"token.revoked", `{`, "not JSON"},
	}
	for _, tt := range tests {
		err := v.Validate(tt.typ, []byte(tt.payload))
		require.ErrorContains(t, err, tt.want, "%s %s", tt.typ, tt.payload)
	}
}

// TestEventSchema checks the schema of a whole event validates the event a
// webhook carries and refuses one of another type.
func TestEventSchema(t *testing.T) {
	t.Parallel()
	b, err := catalog.EventSchema("doc.created")
	require.NoError(t, err)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	require.NoError(t, c.AddResource("event.json", doc))
	s, err := c.Compile("event.json")
	require.NoError(t, err)
	event := func(typ string) any {
		var v any
		require.NoError(t, json.Unmarshal([]byte(`{"id": "5", "type": "`+typ+`", "entity": "wh_moves", "entityId": "46",
			"object": "wh_moves #46", "payload": {"id": 46, "no": "ВЦ-2026-000045", "entity": "wh_move"},
			"createdAt": "2026-11-13T17:20:00Z", "processedAt": null, "actor": {"id": "1", "login": "admin", "displayName": "Администратор"}}`), &v))
		return v
	}
	require.NoError(t, s.Validate(event("doc.created")))
	require.Error(t, s.Validate(event("doc.status_changed")))
	_, err = catalog.EventSchema("nope")
	require.ErrorContains(t, err, `"nope" is not in the catalog`)
}

// Not parallel: it deprecates a type of the package's catalog for a while.
func TestDeprecationWarnings(t *testing.T) {
	require.Empty(t, catalog.DeprecationWarnings([]string{"doc.created", "nope"}))
	since := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	defer catalog.Deprecate("order.received", catalog.Deprecation{Since: since, ReplacedBy: "doc.created"})()
	got := catalog.DeprecationWarnings([]string{"doc.created", "order.received"})
	require.Equal(t, []string{"event type order.received is deprecated since 2026-11-01; use doc.created"}, got)
	typ, ok := catalog.Lookup("order.received")
	require.True(t, ok)
	require.Equal(t, since, typ.Deprecated.Since)
	b, err := catalog.EventSchema("order.received")
	require.NoError(t, err)
	require.Contains(t, string(b), `"deprecated": true`)
}
