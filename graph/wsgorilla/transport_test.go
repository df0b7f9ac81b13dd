package wsgorilla

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// A result written around shared data is byte for byte the message
// encoding/json would make of the response, on both subprotocols.
func TestSharedFrameMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	data := json.RawMessage(`{"eventProcessed":{"id":"7","payload":{"no":"ЗК-2026-000401"}}}`)
	tests := []struct {
		id   string
		resp *graphql.Response
	}{
		{"1", &graphql.Response{Data: data}},
		{"1", &graphql.Response{Data: data, Extensions: map[string]any{"requestId": "r-1"}}},
		{`a"b<c>`, &graphql.Response{Data: data, Extensions: map[string]any{"requestId": "r\n", "b": "é&"}}},
		{"2", &graphql.Response{Data: data, Extensions: map[string]any{"requestId": "r", "n": 3}}},
	}
	for _, legacy := range []bool{false, true} {
		s := &socket{legacy: legacy}
		for _, tt := range tests {
			parts, ok := s.sharedFrame(tt.id, tt.resp)
			if !ok {
				t.Fatalf("sharedFrame(%q, %+v): not shareable", tt.id, tt.resp)
			}
			payload, err := json.Marshal(tt.resp)
			if err != nil {
				t.Fatal(err)
			}
			want, err := json.Marshal(struct {
				Payload json.RawMessage `json:"payload"`
				ID      string          `json:"id"`
				Type    string          `json:"type"`
			}{payload, tt.id, s.dataType()})
			if err != nil {
				t.Fatal(err)
			}
			if got := bytes.Join(parts, nil); !bytes.Equal(got, want) {
				t.Errorf("sharedFrame(%q, %+v)\ngot  %s\nwant %s", tt.id, tt.resp, got, want)
			}
		}
	}
	withErrors := &graphql.Response{Data: data, Errors: gqlerror.List{{Message: "boom"}}}
	if _, ok := (&socket{}).sharedFrame("1", withErrors); ok {
		t.Error("a response with errors is written as encoding/json makes it, not around its data")
	}
}
