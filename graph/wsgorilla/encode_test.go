package wsgorilla

import (
	"encoding/json"
	"testing"
)

// gqlgenMessage has the shape of gqlgen's message types of both
// subprotocols (graphqltransportwsMessage, graphqlwsMessage).
type gqlgenMessage struct {
	Payload json.RawMessage `json:"payload,omitempty"`
	ID      string          `json:"id,omitempty"`
	Type    messageType     `json:"type"`
	noOp    bool            //nolint:unused // gqlgen's types have it; the shape stays theirs
}

type messageType string

func (t messageType) MarshalText() ([]byte, error) { return []byte(string(t)), nil }

func TestEncodeMessageMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	tests := []any{
		&gqlgenMessage{Type: "next", ID: "1", Payload: json.RawMessage(`{"data":{"eventProcessed":{"id":"7"}},"extensions":{"requestId":"r"}}`)},
		&gqlgenMessage{Type: "connection_ack"},
		&gqlgenMessage{Type: "complete", ID: `a"b\c<d>&é` + "\n"},
		&gqlgenMessage{Type: "pong", Payload: json.RawMessage(`{ "x" : [1, 2] }`)},
		gqlgenMessage{Type: "error", ID: "9", Payload: json.RawMessage(`[{"message":"boom"}]`)},
		map[string]string{"type": "ka"}, // any other value
	}
	for _, v := range tests {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got, typ, id, err := encodeMessage(v)
		if err != nil {
			t.Fatalf("encodeMessage(%+v): %v", v, err)
		}
		var g, w map[string]any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("encodeMessage(%+v) = %s, not JSON: %v", v, got, err)
		}
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		gs, _ := json.Marshal(g)
		ws, _ := json.Marshal(w)
		if string(gs) != string(ws) {
			t.Errorf("encodeMessage(%+v) = %s, want %s", v, got, want)
		}
		if typ != w["type"] {
			t.Errorf("encodeMessage(%+v) type %q, want %q", v, typ, w["type"])
		}
		if wid, _ := w["id"].(string); id != wid {
			t.Errorf("encodeMessage(%+v) id %q, want %q", v, id, wid)
		}
	}
}

func BenchmarkEncodeMessageNext(b *testing.B) {
	m := &gqlgenMessage{Type: "next", ID: "1", Payload: json.RawMessage(`{"data":{"eventProcessed":{"id":"1234","type":"doc.created","object":"sales_orders #22"}},"extensions":{"requestId":"3f1c2d7e-0c55-4a4e-9d0e-5f0b6a1c9e21"}}`)}
	b.Run("encodeMessage", func(b *testing.B) {
		for b.Loop() {
			_, _, _, _ = encodeMessage(m)
		}
	})
	b.Run("json.Marshal+Unmarshal", func(b *testing.B) {
		for b.Loop() {
			out, _ := json.Marshal(m)
			var t struct{ Type, ID string }
			_ = json.Unmarshal(out, &t)
		}
	})
}
