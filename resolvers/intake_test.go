package resolvers_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"erp/app/apptest"
)

const receiveOrders = `mutation($in: [ReceiveOrderInput!]!) { receiveOrders(inputs: $in) { duplicate order { id number customer } } }`

type intakeAnswer struct {
	Duplicate bool
	Order     struct{ ID, Number, Customer string }
}

func shopOrder(syncID, customer, sku string) map[string]any {
	return map[string]any{"source": "SHOP", "externalId": syncID, "customer": customer,
		"lines": []map[string]any{{"sku": sku, "quantity": "1"}}}
}

// journalFootprint counts sales orders, events and dispatch jobs.
func journalFootprint(t *testing.T, s *apptest.Server) [3]int {
	t.Helper()
	var f [3]int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM sales_orders), (SELECT count(*) FROM events),
		(SELECT count(*) FROM river_job WHERE kind = 'dispatch_event')`).Scan(&f[0], &f[1], &f[2]))
	return f
}

// receiveOrders takes 250 orders in three transactions: each input is
// answered in its place, refused inputs with their error at their path and
// nothing written, repeats as duplicates of the same order, and the new
// orders numbered without a gap in input order, each with its doc.created
// and order.received. Sending the call again writes nothing.
func TestReceiveOrdersAnswersEachInput(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	before := apptest.GQL[struct{ ReceiveOrder intakeAnswer }](t, s,
		`mutation { receiveOrder(input: {source: SHOP, externalId: "sent-before", customer: "Старый", lines: [{sku: "A1", quantity: "1"}]}) { duplicate order { id number customer } } }`, nil).ReceiveOrder

	const n = 250
	in := make([]map[string]any, n)
	for i := range in {
		in[i] = shopOrder(fmt.Sprintf("bulk-%d", i), fmt.Sprintf("Клиент %d", i), "A1")
	}
	in[5] = shopOrder("bulk-5", "Клиент 5", "NOPE")                                                         // unknown item
	in[7] = shopOrder("bulk-3", "Клиент 3", "A1")                                                           // a repeat of input 3
	in[9] = shopOrder("bulk-3", "Другой", "A1")                                                             // input 3's key with other data
	in[120] = map[string]any{"source": "CRM", "externalId": "x1", "customer": "C", "lines": in[0]["lines"]} // not a CRM number
	in[240] = shopOrder("sent-before", "Старый", "A1")                                                      // received by an earlier call
	apptest.WaitAllProcessed(t, s)
	start := journalFootprint(t, s)

	_, res := s.Do(t, s.Token, receiveOrders, map[string]any{"in": in})
	var data struct{ ReceiveOrders []*intakeAnswer }
	require.NoError(t, json.Unmarshal(res.Data, &data))
	require.Len(t, data.ReceiveOrders, n)

	wantErr := map[int][2]string{
		5:   {"BAD_USER_INPUT", "inputs.5.lines.0.sku"},
		9:   {"CONFLICT", "inputs.9.customer"},
		120: {"BAD_USER_INPUT", "inputs.120.externalId"},
	}
	require.Len(t, res.Errors, len(wantErr), "%+v", res.Errors)
	for _, e := range res.Errors {
		require.Len(t, e.Path, 2, e.Message)
		require.Equal(t, "receiveOrders", e.Path[0])
		i := int(e.Path[1].(float64))
		want, ok := wantErr[i]
		require.True(t, ok, "error at input %d: %s", i, e.Message)
		require.Equal(t, want[0], e.Extensions["code"], "input %d: %s", i, e.Message)
		require.Equal(t, want[1], e.Extensions["field"], "input %d: %s", i, e.Message)
		require.Nil(t, data.ReceiveOrders[i], "input %d is refused", i)
		if i == 9 {
			require.Contains(t, e.Message, data.ReceiveOrders[3].Order.Number, "the conflict names the order by its number")
			require.NotContains(t, e.Message, "pending")
		}
	}

	var year int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT extract(year FROM now())::int`).Scan(&year))
	next := 2 // "sent-before" took 000001
	for i, a := range data.ReceiveOrders {
		switch {
		case wantErr[i] != [2]string{}:
		case i == 7:
			require.True(t, a.Duplicate)
			require.Equal(t, data.ReceiveOrders[3].Order, a.Order, "a repeat in the call answers the first one's order")
		case i == 240:
			require.True(t, a.Duplicate)
			require.Equal(t, before.Order, a.Order)
		default:
			require.False(t, a.Duplicate, "input %d", i)
			require.Equal(t, fmt.Sprintf("Клиент %d", i), a.Order.Customer)
			require.Equal(t, fmt.Sprintf("ЗК-%d-%06d", year, next), a.Order.Number, "input %d: numbers follow the inputs", i)
			next++
		}
	}
	created := next - 2
	require.Equal(t, n-len(wantErr)-2, created)
	end := journalFootprint(t, s)
	require.Equal(t, start[0]+created, end[0], "one order per new input")
	var perOrder int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM events e JOIN sales_orders o ON o.id = e.entity_id
		WHERE e.entity = 'sales_orders' AND e.type IN ('doc.created', 'order.received') AND o.external_id LIKE 'bulk-%'`).Scan(&perOrder))
	require.Equal(t, 2*created, perOrder, "doc.created and order.received of each new order")

	// Again: every input is a duplicate or refused as before; nothing new.
	apptest.WaitAllProcessed(t, s)
	again := journalFootprint(t, s)
	_, res = s.Do(t, s.Token, receiveOrders, map[string]any{"in": in})
	require.Len(t, res.Errors, len(wantErr))
	data.ReceiveOrders = nil
	require.NoError(t, json.Unmarshal(res.Data, &data))
	for i, a := range data.ReceiveOrders {
		if wantErr[i] == [2]string{} {
			require.True(t, a.Duplicate, "input %d", i)
		}
	}
	after := journalFootprint(t, s)
	require.Equal(t, again[:2], after[:2], "a repeated call writes nothing")
}

// More inputs than one call takes is refused before anything is written.
func TestReceiveOrdersRefusesTooManyInputs(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	in := make([]map[string]any, 1001)
	for i := range in {
		in[i] = shopOrder(fmt.Sprintf("many-%d", i), "X", "A1")
	}
	start := journalFootprint(t, s)
	e := apptest.GQLErr(t, s, receiveOrders, map[string]any{"in": in})
	require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"], e.Message)
	require.Equal(t, "inputs", e.Extensions["field"])
	require.Equal(t, start, journalFootprint(t, s))
}
