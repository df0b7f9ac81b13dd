package demo

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSeedJSON(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{`{"id":46,"no":"ВЦ-2026-000045","entity":"wh_move"}`, `{"id": 46, "no": "ВЦ-2026-000045", "entity": "wh_move"}`},
		{`{"lines": 1, "source": "crm", "crm_order_id": 51015, "order_id": 16}`, `{"lines": 1, "source": "crm", "crm_order_id": 51015, "order_id": 16}`},
		{`{"a":[1,{"b":null,"c":true}],"d":{}}`, `{"a": [1, {"b": null, "c": true}], "d": {}}`},
		{`not json`, `not json`},
	}
	for _, tt := range tests {
		if got := seedJSON(json.RawMessage(tt.in)); got != tt.want {
			t.Errorf("seedJSON(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// TestWriteTableCells: an unprocessed event has an empty Обработано, a "|"
// in a cell is escaped so the row keeps seven columns, times are Moscow's.
func TestWriteTableCells(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 11, 13, 14, 16, 59, 0, time.UTC)
	var b strings.Builder
	require.NoError(t, WriteTable(&b, []Event{{
		ID: "7", Type: "order.received", Object: "sales_orders #3",
		Payload:   json.RawMessage(`{"customer":"A|B"}`),
		CreatedAt: created, Actor: &Actor{DisplayName: "Оператор"},
	}}))
	require.Equal(t, TableTitle+TableHeader+
		`| 7 | order.received | sales_orders #3 | {"customer": "A\|B"} | 13.11.2026 17:16 |  | Оператор |`+"\n", b.String())
}
