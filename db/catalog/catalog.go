// Package catalog declares every event type the journal writes, once: its
// name, a description, the version of its payload, the payload's JSON
// Schema (draft 2020-12, schemas/<name>.json), an example payload and, for
// a type on its way out, when it was deprecated and what replaces it.
//
// The GraphQL eventTypes query, GET /schemas/events/<name>.json, the
// AsyncAPI document and the CloudEvents dataschema attribute are all built
// from Types; the test harness (app/apptest) validates every event a test
// wrote against its type's schema with a Validator.
package catalog

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"erp/db"
)

//go:embed schemas/*.json
var schemaFiles embed.FS

// Deprecation says a type is on its way out: the server still journals it
// (or did until Since) and subscribers may still name it, with a warning.
type Deprecation struct {
	Since      time.Time
	ReplacedBy string // the type to use instead; "" when there is none
}

// Type is one event type of the catalog.
type Type struct {
	Name        string // e.g. "doc.created"
	Description string
	// Version is the payload's version, from 1. It grows with every change
	// to Schema; a change that is not additive (a field removed, renamed
	// or retyped) comes as a new type instead, and the old one deprecated.
	Version int
	// Schema is the payload's published JSON Schema (draft 2020-12, in the
	// part draft-07 shares, which AsyncAPI 3.0 uses): open, so that a
	// field added in a later version still validates at a receiver. The
	// file it comes from is closed (additionalProperties: false), and the
	// Validator uses that form, so that the server's tests catch a field
	// it sends but does not list.
	Schema json.RawMessage
	// Example is a payload that validates against Schema.
	Example    json.RawMessage
	Deprecated *Deprecation

	closed json.RawMessage // schemas/<Name>.json
}

// declared lists the types in the order documentation shows them; Schema
// comes from schemas/<Name>.json.
var declared = []Type{
	{Name: db.EventDocCreated, Version: 1,
		Description: "A document was created: a sales, production or purchase order, or a warehouse move (receipt, issue to production, shipment). Entity is the document's table.",
		Example:     json.RawMessage(`{"id": 46, "no": "ВЦ-2026-000045", "entity": "wh_move"}`)},
	{Name: db.EventStatusChanged, Version: 1,
		Description: "A document's status changed (e.g. a sales order new -> accepted, a move draft -> posted). Reason comes with cancellations and reversals.",
		Example:     json.RawMessage(`{"id": 22, "no": "ЗК-2026-000422", "entity": "sales_order", "from": "new", "to": "cancelled", "reason": "customer withdrew"}`)},
	{Name: db.EventOrderReceived, Version: 1,
		Description: "An integration (the web shop or the CRM) sent a sales order; a doc.created of the same order comes with it. The external id is sync_id for the shop, crm_order_id for the CRM.",
		Example:     json.RawMessage(`{"lines": 1, "source": "shop", "sync_id": "shop-7826d8468b3d", "order_id": 22}`)},
	{Name: db.EventRedelivered, Version: 1,
		Description: "An operator asked for the delivery of an event to a subscriber to be made again. Entity and entity id are those of the event delivered again.",
		Example:     json.RawMessage(`{"event_id": 46, "subscriber": "crm"}`)},
	{Name: db.EventReplayStarted, Version: 1,
		Description: "A replay of a subscriber started: the processed events of a range are delivered to it again. Entity is subscribers.",
		Example:     json.RawMessage(`{"replay_id": 3, "subscriber": "crm", "total": 120, "from": "2026-11-01T00:00:00Z"}`)},
	{Name: db.EventReplayFinished, Version: 1,
		Description: "A replay of a subscriber ended: done, cancelled or failed. Entity is subscribers.",
		Example:     json.RawMessage(`{"replay_id": 3, "subscriber": "crm", "status": "done", "total": 120, "done": 120, "dead": 0}`)},
	{Name: db.EventSubscriberDisabled, Version: 1,
		Description: "The server disabled a webhook: its receiver answered 410 Gone, or no delivery arrived for WEBHOOK_DISABLE_AFTER. Journaled by the system (no actor).",
		Example:     json.RawMessage(`{"subscriber": "crm", "reason": "failing", "since": "2026-11-08T09:30:00Z"}`)},
	{Name: db.EventSubscriberEnabled, Version: 1,
		Description: "A paused or disabled subscriber was resumed; was_disabled is the reason the server had disabled it, or null.",
		Example:     json.RawMessage(`{"subscriber": "crm", "was_disabled": "failing"}`)},
	{Name: db.EventSubscriberSecretRotated, Version: 1,
		Description: "A webhook's secret was rotated (rotateWebhookSecret); until previous_valid_until its requests carry the signatures of both secrets. No secret is journaled.",
		Example:     json.RawMessage(`{"subscriber": "crm", "previous_valid_until": "2026-11-09T09:30:00Z"}`)},
	{Name: db.EventUserCreated, Version: 1,
		Description: "A user or integration account was created. Entity is users.",
		Example:     json.RawMessage(`{"login": "shop", "role": "integration", "sources": ["shop"]}`)},
	{Name: db.EventUserRoleChanged, Version: 1,
		Description: "A user's role changed. Entity is users.",
		Example:     json.RawMessage(`{"role": "planner", "sources": null}`)},
	{Name: db.EventUserSourcesChanged, Version: 1,
		Description: "The order sources an integration account may send were set. Entity is users.",
		Example:     json.RawMessage(`{"sources": ["shop", "crm"]}`)},
	{Name: db.EventTokenIssued, Version: 1,
		Description: "An API token was issued to a user (the token itself is never journaled). Entity is users.",
		Example:     json.RawMessage(`{"token_id": 7, "name": "shop sync", "expires_at": "2027-11-13T00:00:00Z"}`)},
	{Name: db.EventTokenRevoked, Version: 1,
		Description: "An API token was revoked. Entity is users.",
		Example:     json.RawMessage(`{"token_id": 7}`)},
}

// schemas reads schemas/<name>.json of every declared type, once: the
// closed form as the file has it, and the open one published.
var schemas = sync.OnceValues(func() (map[string][2]json.RawMessage, error) {
	out := map[string][2]json.RawMessage{}
	for _, t := range declared {
		b, err := schemaFiles.ReadFile("schemas/" + t.Name + ".json")
		if err != nil {
			return nil, fmt.Errorf("read schema of %s: %w", t.Name, err)
		}
		var s any
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("parse schema of %s: %w", t.Name, err)
		}
		open, err := json.Marshal(opened(s))
		if err != nil {
			return nil, err
		}
		out[t.Name] = [2]json.RawMessage{b, open}
	}
	return out, nil
})

// opened returns schema s without its "additionalProperties": false, at
// every level.
func opened(s any) any {
	switch v := s.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			if k == "additionalProperties" && x == false {
				continue
			}
			out[k] = opened(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = opened(x)
		}
		return out
	}
	return s
}

// Types returns every type of the catalog, deprecated ones included, in
// the order of the documentation. The slice is the caller's; the JSON in it
// is shared and must not be changed.
func Types() []Type {
	s, err := schemas()
	if err != nil {
		panic(err) // an embedded file is missing: a build mistake the package's tests catch
	}
	types := slices.Clone(declared)
	for i := range types {
		types[i].closed, types[i].Schema = s[types[i].Name][0], s[types[i].Name][1]
	}
	return types
}

// Names returns the name of every type, sorted.
func Names() []string {
	names := make([]string, 0, len(declared))
	for _, t := range declared {
		names = append(names, t.Name)
	}
	slices.Sort(names)
	return names
}

// Lookup returns the type named name; ok is false when the catalog has no
// such type.
func Lookup(name string) (t Type, ok bool) {
	i := slices.IndexFunc(declared, func(t Type) bool { return t.Name == name })
	if i < 0 {
		return Type{}, false
	}
	return Types()[i], true
}

// Example returns the example payload of type name, a JSON object; the
// error names the type when the catalog lacks it.
func Example(name string) (json.RawMessage, error) {
	t, ok := Lookup(name)
	if !ok {
		return nil, fmt.Errorf("event type %q is not in the catalog", name)
	}
	return t.Example, nil
}

// Validator checks payloads against their type's schema. Its schemas are
// compiled once (NewValidator); it is safe for concurrent use.
type Validator struct {
	schemas map[string]*jsonschema.Schema
}

// NewValidator compiles the closed schema of every type (a field the
// schema does not list fails), with the "format" keyword asserted
// (date-time must be RFC 3339). It fails only when a schema of the
// catalog is not valid JSON Schema 2020-12.
func NewValidator() (*Validator, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	v := &Validator{schemas: map[string]*jsonschema.Schema{}}
	for _, t := range Types() {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(t.closed))
		if err != nil {
			return nil, fmt.Errorf("parse schema of %s: %w", t.Name, err)
		}
		url := "urn:erp:event:" + t.Name
		if err := c.AddResource(url, doc); err != nil {
			return nil, fmt.Errorf("add schema of %s: %w", t.Name, err)
		}
		if v.schemas[t.Name], err = c.Compile(url); err != nil {
			return nil, fmt.Errorf("compile schema of %s: %w", t.Name, err)
		}
	}
	return v, nil
}

// Validate checks payload, a JSON document, against the schema of type
// name. The error says which: a type the catalog lacks, JSON that does not
// parse, or the schema's violations (with their JSON pointers).
func (v *Validator) Validate(name string, payload []byte) error {
	s, ok := v.schemas[name]
	if !ok {
		return fmt.Errorf("event type %q is not in the catalog", name)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return fmt.Errorf("%s payload is not JSON: %w", name, err)
	}
	if err := s.Validate(doc); err != nil {
		return fmt.Errorf("%s payload does not match its schema: %w", name, err)
	}
	return nil
}

// EventSchema returns the JSON Schema (draft 2020-12) of a whole event of
// type name as the server sends it: a webhook's body, the data of a
// CloudEvents delivery, an eventProcessed result. Its payload property is
// the type's Schema; deprecated is set for a deprecated type. The error
// names the type when the catalog lacks it.
func EventSchema(name string) ([]byte, error) {
	t, ok := Lookup(name)
	if !ok {
		return nil, fmt.Errorf("event type %q is not in the catalog", name)
	}
	s, err := eventSchema(t)
	if err != nil {
		return nil, err
	}
	s["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	return json.MarshalIndent(s, "", "  ")
}

// eventSchema is EventSchema of t without "$schema", for embedding.
func eventSchema(t Type) (map[string]any, error) {
	var payload map[string]any
	if err := json.Unmarshal(t.Schema, &payload); err != nil {
		return nil, fmt.Errorf("parse schema of %s: %w", t.Name, err)
	}
	delete(payload, "$schema")
	id := map[string]any{"type": "string", "pattern": "^[0-9]+$"}
	s := map[string]any{
		"title":       fmt.Sprintf("%s v%d", t.Name, t.Version),
		"description": t.Description,
		"type":        "object",
		"required":    []string{"id", "type", "entity", "entityId", "object", "payload", "createdAt", "processedAt", "actor"},
		"properties": map[string]any{
			"id":          id,
			"type":        map[string]any{"const": t.Name},
			"entity":      map[string]any{"type": "string", "description": "the table the event is about, e.g. sales_orders"},
			"entityId":    id,
			"object":      map[string]any{"type": "string", "description": `"<entity> #<entityId>"`},
			"payload":     payload,
			"createdAt":   map[string]any{"type": "string", "format": "date-time"},
			"processedAt": map[string]any{"type": []string{"string", "null"}, "format": "date-time"},
			"actor": map[string]any{
				"description": "the user who caused the event; null: the system",
				"oneOf": []any{map[string]any{"type": "null"}, map[string]any{
					"type": "object", "required": []string{"id", "login", "displayName"},
					"properties": map[string]any{"id": id, "login": map[string]any{"type": "string"}, "displayName": map[string]any{"type": "string"}},
				}},
			},
		},
	}
	payload["examples"] = []any{t.Example}
	if t.Deprecated != nil {
		s["deprecated"] = true
	}
	return s, nil
}

// DeprecationWarnings returns a sentence for each name in names that is a
// deprecated type of the catalog, saying since when and what replaces it;
// names the catalog lacks or does not deprecate give none.
func DeprecationWarnings(names []string) []string {
	var out []string
	for _, n := range names {
		t, ok := Lookup(n)
		if !ok || t.Deprecated == nil {
			continue
		}
		w := fmt.Sprintf("event type %s is deprecated since %s", n, t.Deprecated.Since.Format(time.DateOnly))
		if t.Deprecated.ReplacedBy != "" {
			w += "; use " + t.Deprecated.ReplacedBy
		}
		out = append(out, w)
	}
	return out
}
