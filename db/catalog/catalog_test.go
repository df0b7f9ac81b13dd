package catalog_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
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

// TestPublishedSchemasAreOpenAndPortable checks what receivers get: a
// payload with a field added in a later version still validates against
// the published schema (while the tests' Validator refuses it), and every
// keyword is one JSON Schema draft-07 (AsyncAPI 3.0's schema format) and
// 2020-12 read alike, so the AsyncAPI document's schemas mean the same to
// either kind of validator.
func TestPublishedSchemasAreOpenAndPortable(t *testing.T) {
	t.Parallel()
	portable := map[string]bool{"$schema": true, "type": true, "description": true, "required": true, "properties": true,
		"minimum": true, "enum": true, "format": true, "items": true, "not": true, "const": true, "oneOf": true,
		"pattern": true, "additionalProperties": true, "examples": true}
	var walk func(path string, s any)
	walk = func(path string, s any) {
		m, ok := s.(map[string]any)
		if !ok {
			return
		}
		for k, v := range m {
			switch k {
			case "properties":
				for name, p := range v.(map[string]any) {
					walk(path+"/properties/"+name, p)
				}
				continue
			case "enum", "const", "examples":
				continue
			}
			require.True(t, portable[k], "%s: keyword %q is not in the part of JSON Schema draft-07 and 2020-12 share", path, k)
			switch x := v.(type) {
			case []any:
				for i, e := range x {
					walk(path+"/"+k+"/"+strconv.Itoa(i), e)
				}
			default:
				walk(path+"/"+k, x)
			}
		}
	}
	v, err := catalog.NewValidator()
	require.NoError(t, err)
	for _, typ := range catalog.Types() {
		var s any
		require.NoError(t, json.Unmarshal(typ.Schema, &s))
		walk(typ.Name, s)
		require.NotContains(t, string(typ.Schema), `"additionalProperties":false`, typ.Name)

		var example map[string]any
		require.NoError(t, json.Unmarshal(typ.Example, &example))
		example["added_in_a_later_version"] = 1
		later, err := json.Marshal(example)
		require.NoError(t, err)
		c := jsonschema.NewCompiler()
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(typ.Schema))
		require.NoError(t, err)
		require.NoError(t, c.AddResource("published.json", doc))
		published, err := c.Compile("published.json")
		require.NoError(t, err)
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(later))
		require.NoError(t, err)
		require.NoError(t, published.Validate(inst), "%s: the published schema refuses an added field", typ.Name)
		require.Error(t, v.Validate(typ.Name, later), "%s: the tests' validator lets an unlisted field through", typ.Name)
	}
}
