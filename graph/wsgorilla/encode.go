package wsgorilla

import (
	"encoding/json"
	"reflect"
	"sync"
)

// envelope locates the fields of a message struct that has the shape of
// gqlgen's (unexported) message types of both subprotocols:
//
//	struct {
//		Payload json.RawMessage `json:"payload,omitempty"`
//		ID      string          `json:"id,omitempty"`
//		Type    <string kind>   `json:"type"`
//	}
type envelope struct{ payload, id, typ int }

// envelopes caches, per message type, its *envelope, or nil for a type of
// another shape.
var envelopes sync.Map // reflect.Type → *envelope

var rawMessageType = reflect.TypeFor[json.RawMessage]()

func envelopeOf(t reflect.Type) *envelope {
	if e, ok := envelopes.Load(t); ok {
		return e.(*envelope)
	}
	var e *envelope
	if t.Kind() == reflect.Struct {
		f := envelope{-1, -1, -1}
		for i := range t.NumField() {
			sf := t.Field(i)
			switch {
			case sf.Name == "Payload" && sf.Type == rawMessageType && sf.Tag.Get("json") == "payload,omitempty":
				f.payload = i
			case sf.Name == "ID" && sf.Type.Kind() == reflect.String && sf.Tag.Get("json") == "id,omitempty":
				f.id = i
			case sf.Name == "Type" && sf.Type.Kind() == reflect.String && sf.Tag.Get("json") == "type":
				f.typ = i
			}
		}
		if f.payload >= 0 && f.id >= 0 && f.typ >= 0 {
			e = &f
		}
	}
	envelopes.Store(t, e)
	return e
}

// encodeMessage encodes an outgoing message as JSON and returns its type
// and id. gqlgen hands both subprotocols' messages over as structs whose
// payload is JSON it encoded itself with encoding/json (a response, an
// error, an ack) or decoded from the client (a pong echoing a ping's
// payload); those are written around that payload as is, rather than
// re-encoded by reflection (which would validate and compact the payload
// a second time) and parsed back for their type and id: on a busy feed
// that cost a fifth of the server's CPU. Any other value goes through
// json.Marshal.
func encodeMessage(v any) (b []byte, typ, id string, err error) {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer && !rv.IsNil() {
		rv = rv.Elem()
	}
	if rv.IsValid() {
		if e := envelopeOf(rv.Type()); e != nil {
			payload := rv.Field(e.payload).Bytes()
			id, typ = rv.Field(e.id).String(), rv.Field(e.typ).String()
			return encodeEnvelope(typ, id, payload), typ, id, nil
		}
	}
	if b, err = json.Marshal(v); err != nil {
		return nil, "", "", err
	}
	var m struct {
		Type string `json:"type"`
		ID   string `json:"id"`
	}
	_ = json.Unmarshal(b, &m)
	return b, m.Type, m.ID, nil
}

// appendString appends s as a JSON string: as is when it needs no
// escaping (message types, the usual operation ids), else as
// encoding/json writes it.
func appendString(b []byte, s string) []byte {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x7f || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// encodeEnvelope encodes the message {"payload":…,"id":…,"type":…} of both
// subprotocols, payload (raw JSON) and id left out when empty.
func encodeEnvelope(typ, id string, payload []byte) []byte {
	b := make([]byte, 0, len(payload)+len(id)+len(typ)+32)
	b = append(b, '{')
	if len(payload) > 0 {
		b = append(b, `"payload":`...)
		b = append(b, payload...)
		b = append(b, ',')
	}
	if id != "" {
		b = append(b, `"id":`...)
		b = appendString(b, id)
		b = append(b, ',')
	}
	b = append(b, `"type":`...)
	b = appendString(b, typ)
	return append(b, '}')
}
