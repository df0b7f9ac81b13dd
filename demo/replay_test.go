package demo_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"erp/app/apptest"
	"erp/db/pgtest"
	"erp/demo"
)

// TestMain gives the replay tests their databases (db/pgtest).
func TestMain(m *testing.M) { pgtest.Main(m) }

func demoJournal(t *testing.T, s *apptest.Server) []demo.Event {
	t.Helper()
	res := apptest.GQL[struct {
		Events struct {
			Edges []struct {
				Node demo.Event `json:"node"`
			} `json:"edges"`
			PageInfo struct {
				HasNextPage bool `json:"hasNextPage"`
			} `json:"pageInfo"`
		} `json:"events"`
	}](t, s, `{ events(first: 500) {
		edges { node { id type entity entityId object payload createdAt processedAt actor { displayName } } }
		pageInfo { hasNextPage } } }`, nil)
	require.False(t, res.Events.PageInfo.HasNextPage, "journal longer than one page of 500")
	out := make([]demo.Event, len(res.Events.Edges))
	for i, e := range res.Events.Edges {
		out[len(out)-1-i] = e.Node
	}
	return out
}

// decodePayload decodes an event payload keeping numbers as json.Number, so
// that a number and a string of digits stay apart.
func decodePayload(t *testing.T, raw json.RawMessage) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	require.NoError(t, dec.Decode(&m), "payload %s", raw)
	return m
}

// docEntities maps the doc.created payload entity to its table and the
// number prefixes its documents take.
var docEntities = map[string]struct {
	table    string
	prefixes []string
}{
	"sales_order":    {"sales_orders", []string{"ЗК"}},
	"prod_order":     {"plan_prod_orders", []string{"ПЗ"}},
	"wh_move":        {"wh_moves", []string{"ПР", "ВЦ", "ОТ"}},
	"purchase_order": {"wh_purchase_orders", []string{"ЗП"}},
}

var docNumber = regexp.MustCompile(`^(ЗК|ПЗ|ЗП|ПР|ВЦ|ОТ)-(\d{4})-(\d{6})$`)

func TestDemoReplay(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	endpoint := s.URL + "/graphql"

	// A wrong token is refused with the server's code and writes nothing.
	_, err := demo.Replay(t.Context(), endpoint, "not-a-token", &bytes.Buffer{})
	require.Error(t, err)
	require.Equal(t, "UNAUTHENTICATED", demo.Code(err), "error: %v", err)
	require.Empty(t, demoJournal(t, s))

	var out bytes.Buffer
	sum, err := demo.Replay(t.Context(), endpoint, s.Token, &out)
	require.NoError(t, err, "output:\n%s", out.String())
	year := sum.Year
	// 13 CRM orders and 4 shop orders are for furniture, one of them with
	// two lines: 18 production orders, each with one material issue.
	require.Equal(t, map[string]int{"ЗК": 22, "ПЗ": 18, "ЗП": 2, "ПР": 1, "ВЦ": 18}, sum.Created)
	require.Equal(t, 21, sum.Received)
	require.Zero(t, sum.Duplicates)
	require.Equal(t, 9, sum.ItemsCreated)
	require.Equal(t, 2, sum.WarehousesCreated)
	// The afternoon acts on this run's shop orders 2 (ЗК-…-000419, planned
	// as ПЗ-…-000416 with ВЦ-…-000016; shipped as ОТ-…-000001), 4 (spare
	// fittings, ЗК-…-000421: cancelled) and 5 (ЗК-…-000422, ПЗ-…-000418,
	// ВЦ-…-000018) and on its second purchase order: the delivery
	// ПР-…-000002, the finished goods ПР-…-000003 and 4, the reversal 5.
	require.Equal(t, afternoonWant(year, 2, 5, 419, 422, 416, 418, 16, 18, 1, 421), sum.Afternoon)

	all := demoJournal(t, s)
	require.Len(t, all, sum.Events)
	journal := all[:len(all)-sum.Afternoon.Events] // the seed's day
	require.Len(t, journal, 22+21+21+18+2+1+18+1,
		"doc.created per document plus order.received and its acceptance's doc.status_changed per integration order, "+
			"and the received purchase order's doc.status_changed")
	requireAfternoonEvents(t, all[len(journal):], sum.Afternoon)

	// The printed table: the seed's header, 30 rows, the summary last.
	text := out.String()
	require.Contains(t, text, "| № | Событие | Объект | Данные | Создано | Обработано | Кто |\n|---|---|---|---|---|---|---|\n")
	t.Logf("demo output:\n%s", text)
	// The rows are the newest journal events, newest first; the planning
	// chain's documents are the system's ("—").
	rowStart := regexp.MustCompile(`^\| (\d+) \| `)
	var rows []string
	for _, l := range strings.Split(text, "\n") {
		if m := rowStart.FindStringSubmatch(l); m != nil {
			ev := all[len(all)-1-len(rows)]
			require.Equal(t, ev.ID, m[1], "row %q", l)
			actor := "Администратор"
			if systemMade(t, ev) {
				actor = "—"
			}
			require.True(t, strings.HasSuffix(l, " | "+actor+" |"), "row %q", l)
			rows = append(rows, l)
		}
	}
	require.Len(t, rows, demo.TableRows)
	// The table opens with the afternoon, newest first: the purchase order
	// the reversal took back to open on top, then the reversal of the
	// afternoon's delivery, the delivery's receipt the afternoon's first
	// event. Ids are not gapless (a dispatch that rolls back and runs again
	// takes new ones); numbers are.
	require.Equal(t, 18, sum.Afternoon.Events)
	require.Regexp(t, `^\| \d+ \| doc\.status_changed \| wh_purchase_orders #\d+ \| .*"to": "open"`, rows[0])
	require.Regexp(t, fmt.Sprintf(`^\| \d+ \| doc\.created \| wh_moves #\d+ \| \{"id": \d+, "no": "ПР-%d-000005", "entity": "wh_move"\}`, year), rows[1])
	require.Regexp(t, fmt.Sprintf(`^\| \d+ \| doc\.created \| wh_moves #\d+ \| \{"id": \d+, "no": "ПР-%d-000002", "entity": "wh_move"\}`, year), rows[17])
	// The seed's day follows; its last events are the planning chain's and
	// the acceptances, in whatever order their dispatches committed, the
	// last material issue ВЦ-…-000018 among them.
	lastIssue := regexp.MustCompile(fmt.Sprintf(`\| wh_moves #(\d+) \| \{"id": \d+, "no": "ВЦ-%d-000018", "entity": "wh_move"\}`, year))
	require.True(t, slices.ContainsFunc(rows[18:], lastIssue.MatchString), "the seed day's rows hold ВЦ-…-000018:\n%s", strings.Join(rows[18:], "\n"))
	require.True(t, strings.HasSuffix(text, sum.Line()+"\n"), "output ends with the summary:\n%s", text)
	require.Contains(t, sum.Line(), fmt.Sprintf("после обеда — ПР 4, ОТ 1: выполнено ПЗ 2 (проведено ВЦ 2), отгружен ЗК-%d-000419, "+
		"отменён ЗК-%d-000421, сторнирован ПР-%d-000002; событий обработано 122.", year, year, year))

	// The payloads have the seed screens' shapes, key order included: the
	// seed shows jsonb's order, and so must the journal. (The seed's CRM
	// payloads are the old system's, without source and order_id.)
	seedShapes := seedPayloadShapes(t)
	require.Len(t, seedShapes, 2, "doc.created and shop order.received shapes in the seed")
	shapesSeen := map[string]bool{}
	for _, ev := range all {
		if want, ok := seedShapes[payloadShape(t, ev)]; ok {
			require.Equal(t, want, payloadKeys(t, ev.Payload), "event %s payload %s", ev.ID, ev.Payload)
			shapesSeen[payloadShape(t, ev)] = true
		}
	}
	require.Len(t, shapesSeen, 2, "the journal has events of both seed shapes")

	numbers := map[string][]int{}  // prefix → sequence numbers in journal order
	orderNumber := map[int64]int{} // sales order id → its ЗК number
	var received []map[string]any
	for _, ev := range journal {
		require.NotNil(t, ev.ProcessedAt, "event %s unprocessed", ev.ID)
		require.False(t, ev.ProcessedAt.Before(ev.CreatedAt), "event %s processed %s before created %s", ev.ID, ev.ProcessedAt, ev.CreatedAt)
		if systemMade(t, ev) {
			require.Nil(t, ev.Actor, "event %s (%s) was the planning chain's, the system's", ev.ID, ev.Payload)
		} else {
			require.NotNil(t, ev.Actor, "event %s has no actor", ev.ID)
			require.Equal(t, "Администратор", ev.Actor.DisplayName)
		}
		require.Equal(t, ev.Entity+" #"+ev.EntityID, ev.Object)
		entityID, err := strconv.ParseInt(ev.EntityID, 10, 64)
		require.NoError(t, err)
		p := decodePayload(t, ev.Payload)

		switch ev.Type {
		case "doc.created":
			require.ElementsMatch(t, []string{"id", "no", "entity"}, mapKeys(p), "payload %s", ev.Payload)
			require.Equal(t, json.Number(ev.EntityID), p["id"], "payload %s", ev.Payload)
			entity, ok := docEntities[p["entity"].(string)]
			require.True(t, ok, "unknown entity in %s", ev.Payload)
			require.Equal(t, entity.table, ev.Entity)
			no, _ := p["no"].(string)
			m := docNumber.FindStringSubmatch(no)
			require.NotNil(t, m, "number %q", no)
			require.Contains(t, entity.prefixes, m[1], "number %q of %s", no, ev.Entity)
			require.Equal(t, strconv.Itoa(year), m[2], "number %q", no)
			seq, err := strconv.Atoi(m[3])
			require.NoError(t, err)
			numbers[m[1]] = append(numbers[m[1]], seq)
			if m[1] == "ЗК" {
				orderNumber[entityID] = seq
			}
		case "doc.status_changed":
			if ev.Entity == "wh_purchase_orders" {
				// The receipt brought every line of its purchase order.
				require.Equal(t, map[string]any{"id": json.Number(ev.EntityID), "no": p["no"], "entity": "purchase_order",
					"from": "open", "to": "received"}, p)
				break
			}
			// order_acceptance's, for each received order.
			require.Equal(t, "sales_orders", ev.Entity)
			require.Equal(t, map[string]any{"id": json.Number(ev.EntityID), "no": p["no"], "entity": "sales_order",
				"from": "new", "to": "accepted"}, p)
		case "order.received":
			require.Equal(t, "sales_orders", ev.Entity)
			require.Equal(t, json.Number(ev.EntityID), p["order_id"], "payload %s", ev.Payload)
			received = append(received, p)
		default:
			t.Fatalf("unexpected event type %q", ev.Type)
		}
	}

	// order.received: 16 CRM orders, then 5 shop orders, in the seed's shapes.
	require.Len(t, received, 21)
	for i, p := range received[:16] {
		want := map[string]any{
			"lines":        json.Number("1"),
			"source":       "crm",
			"crm_order_id": json.Number(strconv.Itoa(51000 + i)),
			"order_id":     p["order_id"],
		}
		require.Equal(t, want, p)
		require.Equal(t, json.Number(strconv.Itoa(i+1)), p["order_id"], "CRM order %d is sales_orders #%d as in the seed", 51000+i, i+1)
	}
	shopID := regexp.MustCompile(`^shop-[0-9a-f]{12}$`)
	for i, p := range received[16:] {
		want := map[string]any{
			"lines":    json.Number("1"),
			"source":   "shop",
			"sync_id":  sum.ShopOrders[i],
			"order_id": p["order_id"],
		}
		if i == 0 {
			require.Equal(t, "shop-demo-0001", p["sync_id"])
			want["lines"] = json.Number("2")
		} else {
			require.Regexp(t, shopID, p["sync_id"])
		}
		require.Equal(t, want, p)
	}

	// Numbering continues the old system's: the first shop order is the
	// seed's sales_orders #18, ЗК-<year>-000418.
	first := received[16]["order_id"].(json.Number)
	require.Equal(t, json.Number("18"), first)
	require.Equal(t, 418, orderNumber[18])
	require.Equal(t, seqFrom(401, 22), numbers["ЗК"])
	require.Equal(t, seqFrom(1, 2), numbers["ЗП"])
	require.Equal(t, seqFrom(1, 1), numbers["ПР"])
	// The planning chain's documents are numbered at their commits, which
	// concurrent dispatches make in any order: the numbers are gapless
	// from the series' start, not in journal order.
	slices.Sort(numbers["ПЗ"])
	slices.Sort(numbers["ВЦ"])
	require.Equal(t, seqFrom(401, 18), numbers["ПЗ"])
	require.Equal(t, seqFrom(1, 18), numbers["ВЦ"])

	// The planning chain: every line of a received order for a product
	// with a bill of materials has one ПЗ, and every ПЗ one ВЦ issuing its
	// components from the production warehouse.
	plan := checkDemoPlanning(t, s, all)
	require.Len(t, plan, 18)
	// As in the seed: the first shop order (ЗК-…-000418) is planned as
	// ПЗ-…-000414 and 415, the order after the spare fittings (#22) as
	// plan_prod_orders #18, ПЗ-…-000418.
	require.Equal(t, []string{fmt.Sprintf("ПЗ-%d-000414", year), fmt.Sprintf("ПЗ-%d-000415", year)},
		[]string{plan[demoLineKey{18, 1}].Number, plan[demoLineKey{18, 2}].Number})
	require.Equal(t, demoPlanned{ID: "18", Number: fmt.Sprintf("ПЗ-%d-000418", year)}, plan[demoLineKey{22, 1}])
	_, planned := plan[demoLineKey{21, 1}]
	require.False(t, planned, "spare fittings are sold as they are, not made")

	// The subscriber accepted the shop order, which kept both its lines.
	so := apptest.GQL[struct {
		SalesOrder struct {
			Number, Status, Source string
			ExternalID             string `json:"externalId"`
			Lines                  []struct{ SKU string }
		}
	}](t, s, `{ salesOrder(id: 18) { number status source externalId lines { sku } } }`, nil).SalesOrder
	require.Equal(t, fmt.Sprintf("ЗК-%d-000418", year), so.Number)
	require.Equal(t, "accepted", so.Status)
	require.Equal(t, "shop", so.Source)
	require.Equal(t, "shop-demo-0001", so.ExternalID)
	require.Len(t, so.Lines, 2)

	// A second run succeeds: the CRM orders and shop-demo-0001 are
	// duplicates and journal nothing; the fresh shop orders are new.
	sum2, err := demo.Replay(t.Context(), endpoint, s.Token, &bytes.Buffer{})
	require.NoError(t, err)
	wantDup := []string{}
	for i := range 16 {
		wantDup = append(wantDup, strconv.Itoa(51000+i))
	}
	wantDup = append(wantDup, "shop-demo-0001")
	require.Equal(t, 17, sum2.Duplicates)
	require.Equal(t, wantDup, sum2.DuplicateIDs)
	require.Zero(t, sum2.ItemsCreated)
	require.Equal(t, 9, sum2.ItemsExisting)
	require.Equal(t, 2, sum2.WarehousesExisting)
	require.Equal(t, map[string]int{"ЗК": 5, "ПЗ": 3, "ЗП": 2, "ПР": 1, "ВЦ": 3}, sum2.Created)
	// The second afternoon acts on the second run's own documents: its
	// shop orders 2, 4 and 5 (ЗК-…-000424, 426, 427; the shop-demo-0001
	// duplicate is ЗК-…-000418 again) with their ПЗ-…-000419 and 421, and
	// its second purchase order, ЗП-…-000004.
	require.Equal(t, afternoonWant(year, 7, 10, 424, 427, 419, 421, 19, 21, 2, 426), sum2.Afternoon)

	journal2 := demoJournal(t, s)
	require.Len(t, journal2, len(all)+sum2.Events)
	requireAfternoonEvents(t, journal2[len(journal2)-sum2.Afternoon.Events:], sum2.Afternoon)
	// The duplicates planned nothing again: the new production orders are
	// all for this run's new orders (sales_orders #23…).
	plan2 := checkDemoPlanning(t, s, journal2)
	require.Len(t, plan2, 18+3)
	for k, p := range plan2 {
		if old, ok := plan[k]; ok {
			require.Equal(t, old, p)
		} else {
			require.Greater(t, k.order, int64(22), "%s planned for an order of the first run", p.Number)
		}
	}
	seen := map[string]int{}
	for _, ev := range journal2 {
		require.NotNil(t, ev.ProcessedAt)
		if ev.Type != "order.received" {
			continue
		}
		p := decodePayload(t, ev.Payload)
		key := fmt.Sprint(p["source"], ":", p["crm_order_id"], p["sync_id"])
		seen[key]++
		require.Equal(t, 1, seen[key], "order %s journalled twice", key)
	}
	require.Len(t, seen, 21+4)
}

// afternoonWant is the afternoon's summary on a fresh database, from the
// sequence numbers of its documents: the delivery (ПР receipt) and its
// reversal (ПР reversal), the two sales orders produced (ЗК) with their
// production orders (ПЗ) and material issues (ВЦ), the shipped sales order
// (the first produced) and its shipment (ОТ), the cancelled sales order.
func afternoonWant(year, receipt, reversal, so1, so2, pz1, pz2, vc1, vc2, shipment, cancelled int) demo.AfternoonSummary {
	no := func(prefix string, n int) string { return fmt.Sprintf("%s-%d-%06d", prefix, year, n) }
	return demo.AfternoonSummary{
		Created:   map[string]int{"ПР": 4, "ОТ": 1},
		Receipt:   no("ПР", receipt),
		Reversal:  no("ПР", reversal),
		Produced:  []string{no("ЗК", so1), no("ЗК", so2)},
		Completed: []string{no("ПЗ", pz1), no("ПЗ", pz2)},
		Issued:    []string{no("ВЦ", vc1), no("ВЦ", vc2)},
		Shipped:   no("ЗК", so1),
		Shipment:  no("ОТ", shipment),
		Cancelled: no("ЗК", cancelled),
		Events:    18,
	}
}

// requireAfternoonEvents checks the afternoon's events, oldest first,
// against what it did (a): the delivery and its purchase order's status,
// for each production order its release (moving its sales order
// in_production), the issue posted, the completion and the receipt of the
// finished goods, the shipment shipping its order, the cancellation, the
// reversal; every one the admin's, none of them the system's.
func requireAfternoonEvents(t *testing.T, events []demo.Event, a demo.AfternoonSummary) {
	t.Helper()
	type want struct{ typ, table, no, from, to, reason string }
	created := func(table, no string) want { return want{"doc.created", table, no, "", "", ""} }
	changed := func(table, no, from, to string) want { return want{"doc.status_changed", table, no, from, to, ""} }
	wants := []want{created("wh_moves", a.Receipt), changed("wh_purchase_orders", "ЗП-", "open", "received")}
	for i, pz := range a.Completed {
		wants = append(wants,
			changed("plan_prod_orders", pz, "planned", "released"),
			changed("sales_orders", a.Produced[i], "accepted", "in_production"),
			changed("wh_moves", a.Issued[i], "draft", "posted"),
			changed("plan_prod_orders", pz, "released", "completed"),
			created("wh_moves", "ПР-"))
	}
	day, err := demo.SeedDay()
	require.NoError(t, err)
	cancelled := changed("sales_orders", a.Cancelled, "accepted", "cancelled")
	cancelled.reason = day.Afternoon.Cancellation.Reason
	reversed := changed("wh_moves", a.Receipt, "posted", "reversed")
	reversed.reason = day.Afternoon.ReversalReason
	// The reversal takes the purchase order back to open: nothing of it
	// is received any more.
	reopened := changed("wh_purchase_orders", "ЗП-", "received", "open")
	reopened.reason = day.Afternoon.ReversalReason
	wants = append(wants,
		created("wh_moves", a.Shipment),
		changed("sales_orders", a.Shipped, "in_production", "shipped"),
		cancelled, reversed,
		created("wh_moves", a.Reversal),
		reopened)
	require.Len(t, events, len(wants))
	for i, ev := range events {
		w := wants[i]
		p := decodePayload(t, ev.Payload)
		got := want{typ: ev.Type, table: ev.Entity, no: p["no"].(string)}
		if strings.HasSuffix(w.no, "-") { // a number the afternoon does not report: its prefix
			require.Regexp(t, "^"+w.no+`\d{4}-\d{6}$`, got.no, "event %s payload %s", ev.ID, ev.Payload)
			got.no = w.no
		}
		got.from, _ = p["from"].(string)
		got.to, _ = p["to"].(string)
		got.reason, _ = p["reason"].(string)
		require.Equal(t, w, got, "afternoon event %d: %s %s %s", i+1, ev.Type, ev.Object, ev.Payload)
		require.NotNil(t, ev.Actor, "event %s", ev.ID)
		require.Equal(t, "Администратор", ev.Actor.DisplayName)
		require.NotNil(t, ev.ProcessedAt, "event %s unprocessed", ev.ID)
	}
}

// systemMade reports whether ev is the doc.created of a document the
// planning chain makes (ПЗ, ВЦ) or order_acceptance's doc.status_changed
// of a sales order (new → accepted), which the system journals, not a user.
func systemMade(t *testing.T, ev demo.Event) bool {
	t.Helper()
	if ev.Type == "doc.status_changed" {
		return ev.Entity == "sales_orders" && decodePayload(t, ev.Payload)["to"] == "accepted"
	}
	if ev.Type != "doc.created" {
		return false
	}
	no, _ := decodePayload(t, ev.Payload)["no"].(string)
	return strings.HasPrefix(no, "ПЗ-") || strings.HasPrefix(no, "ВЦ-")
}

// demoLineKey is a sales order line: order id, line number.
type demoLineKey struct {
	order int64
	line  int
}

// demoPlanned is the production order planned for a sales order line.
type demoPlanned struct{ ID, Number string }

// checkDemoPlanning checks the planning chain's documents in the journal
// through the API: one ПЗ per line of every received order whose item has a
// bill of materials (none for others), for the line's item and quantity;
// one ВЦ per ПЗ, from the production warehouse, answering the ПЗ's
// doc.created, with the bill's components for the ordered quantity. It
// returns the ПЗ by sales order line.
func checkDemoPlanning(t *testing.T, s *apptest.Server, journal []demo.Event) map[demoLineKey]demoPlanned {
	t.Helper()
	day, err := demo.SeedDay()
	require.NoError(t, err)
	boms := map[string][]demo.Component{}
	for _, p := range day.Products() {
		boms[p.SKU] = p.BillOfMaterials
	}
	type docLine struct {
		LineNo   int `json:"lineNo"`
		SKU      string
		Quantity string
	}
	type prodOrder struct {
		ID, Number, SKU, Quantity string
		SalesOrderID              string `json:"salesOrderId"`
		SalesOrderLineNo          *int   `json:"salesOrderLineNo"`
	}
	type move struct {
		Number, Kind      string
		FromWarehouse     string `json:"fromWarehouse"`
		ProductionOrderID string `json:"productionOrderId"`
		SourceEventID     string `json:"sourceEventId"`
		Lines             []docLine
	}
	want := map[demoLineKey]docLine{} // lines to be planned
	got := map[demoLineKey]demoPlanned{}
	prodOrders := map[string]prodOrder{} // by id
	prodEvent := map[string]string{}     // production order id → its doc.created event id
	issues := map[string][]move{}        // by production order id
	for _, ev := range journal {
		p := decodePayload(t, ev.Payload)
		switch {
		case ev.Type == "order.received":
			so := apptest.GQL[struct {
				SalesOrder struct{ Lines []docLine } `json:"salesOrder"`
			}](t, s, `query($id: ID!) { salesOrder(id: $id) { lines { lineNo sku quantity } } }`, map[string]any{"id": ev.EntityID}).SalesOrder
			id, err := strconv.ParseInt(ev.EntityID, 10, 64)
			require.NoError(t, err)
			for _, l := range so.Lines {
				if boms[l.SKU] != nil {
					want[demoLineKey{id, l.LineNo}] = l
				}
			}
		case ev.Type == "doc.created" && p["entity"] == "prod_order":
			po := apptest.GQL[struct {
				ProductionOrder prodOrder `json:"productionOrder"`
			}](t, s, `query($id: ID!) { productionOrder(id: $id) { id number sku quantity salesOrderId salesOrderLineNo } }`,
				map[string]any{"id": ev.EntityID}).ProductionOrder
			require.NotNil(t, po.SalesOrderLineNo, "%s was not planned for a sales order line", po.Number)
			order, err := strconv.ParseInt(po.SalesOrderID, 10, 64)
			require.NoError(t, err)
			k := demoLineKey{order, *po.SalesOrderLineNo}
			_, dup := got[k]
			require.False(t, dup, "sales order %d line %d planned twice", k.order, k.line)
			got[k] = demoPlanned{ID: po.ID, Number: po.Number}
			prodOrders[po.ID] = po
			prodEvent[po.ID] = ev.ID
		case ev.Type == "doc.created" && p["entity"] == "wh_move":
			mv := apptest.GQL[struct {
				WarehouseMove move `json:"warehouseMove"`
			}](t, s, `query($id: ID!) { warehouseMove(id: $id) { number kind fromWarehouse productionOrderId sourceEventId lines { lineNo sku quantity } } }`,
				map[string]any{"id": ev.EntityID}).WarehouseMove
			if mv.Kind == "ISSUE_TO_PRODUCTION" {
				issues[mv.ProductionOrderID] = append(issues[mv.ProductionOrderID], mv)
			}
		}
	}
	require.Len(t, got, len(want), "one production order per line of a product")
	for k, l := range want {
		planned, ok := got[k]
		require.True(t, ok, "sales order %d line %d (%s) not planned", k.order, k.line, l.SKU)
		po := prodOrders[planned.ID]
		require.Equal(t, l.SKU, po.SKU, po.Number)
		require.True(t, decimal.RequireFromString(l.Quantity).Equal(decimal.RequireFromString(po.Quantity)), po.Number)

		require.Len(t, issues[po.ID], 1, "%s has %d material issues", po.Number, len(issues[po.ID]))
		mv := issues[po.ID][0]
		require.Equal(t, day.ProductionWarehouse, mv.FromWarehouse, mv.Number)
		require.Equal(t, prodEvent[po.ID], mv.SourceEventID, "%s answers the doc.created of %s", mv.Number, po.Number)
		bom := boms[po.SKU]
		require.Len(t, mv.Lines, len(bom), mv.Number)
		for i, m := range bom {
			qty := decimal.RequireFromString(m.Quantity).Mul(decimal.RequireFromString(po.Quantity))
			require.Equal(t, m.SKU, mv.Lines[i].SKU, mv.Number)
			require.True(t, qty.Equal(decimal.RequireFromString(mv.Lines[i].Quantity)),
				"%s line %d: %s, want %s", mv.Number, i+1, mv.Lines[i].Quantity, qty)
		}
	}
	return got
}

// seedDir holds the seed screens, relative to this test's package directory.
const seedDir = "testdata"

// seedPayloadShapes returns, for each payload shape of the seed screens
// (payloadShape) other than the CRM's, the payload keys in the order the
// seed shows them, checking that every row of a shape has the same.
func seedPayloadShapes(t *testing.T) map[string][]string {
	t.Helper()
	shapes := map[string][]string{}
	for _, name := range []string{"seed-order-received.txt", "seed-doc-created.txt"} {
		raw, err := os.ReadFile(filepath.Join(seedDir, name))
		require.NoError(t, err)
		for _, l := range strings.Split(string(raw), "\n") {
			cells := strings.Split(l, " | ")
			if len(cells) != 7 || !strings.HasPrefix(cells[0], "| ") || cells[1] == "Событие" {
				continue
			}
			ev := demo.Event{Type: cells[1], Payload: json.RawMessage(cells[3])}
			shape := payloadShape(t, ev)
			if shape == "order.received/" {
				continue // the old system's CRM rows
			}
			keys := payloadKeys(t, ev.Payload)
			if want, ok := shapes[shape]; ok {
				require.Equal(t, want, keys, "%s: row %q", name, l)
			}
			shapes[shape] = keys
		}
	}
	return shapes
}

// payloadShape is an event's type, and for order.received its source:
// "doc.created", "order.received/shop".
func payloadShape(t *testing.T, ev demo.Event) string {
	t.Helper()
	if ev.Type != "order.received" {
		return ev.Type
	}
	source, _ := decodePayload(t, ev.Payload)["source"].(string)
	return ev.Type + "/" + source
}

// payloadKeys returns the keys of a JSON object in the order they appear.
func payloadKeys(t *testing.T, raw json.RawMessage) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	require.NoError(t, err, "payload %s", raw)
	require.Equal(t, json.Delim('{'), tok, "payload %s", raw)
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		require.NoError(t, err, "payload %s", raw)
		keys = append(keys, tok.(string))
		var v json.RawMessage
		require.NoError(t, dec.Decode(&v), "payload %s", raw)
	}
	return keys
}

func seqFrom(start, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = start + i
	}
	return s
}

func mapKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}
