package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// demoJournalEvent is an event as the test reads it back through the API.
type demoJournalEvent struct {
	ID          string          `json:"id"`
	Type        string          `json:"type"`
	Entity      string          `json:"entity"`
	EntityID    string          `json:"entityId"`
	Object      string          `json:"object"`
	Payload     json.RawMessage `json:"payload"`
	CreatedAt   time.Time       `json:"createdAt"`
	ProcessedAt *time.Time      `json:"processedAt"`
	Actor       *struct {
		DisplayName string `json:"displayName"`
	} `json:"actor"`
}

// demoJournal returns the whole journal (at most 500 events), oldest first.
func demoJournal(t *testing.T, s *testServer) []demoJournalEvent {
	t.Helper()
	res := gql[struct {
		Events struct {
			Edges []struct {
				Node demoJournalEvent `json:"node"`
			} `json:"edges"`
			PageInfo struct {
				HasNextPage bool `json:"hasNextPage"`
			} `json:"pageInfo"`
		} `json:"events"`
	}](t, s, `{ events(first: 500) {
		edges { node { id type entity entityId object payload createdAt processedAt actor { displayName } } }
		pageInfo { hasNextPage } } }`, nil)
	require.False(t, res.Events.PageInfo.HasNextPage, "journal longer than one page of 500")
	out := make([]demoJournalEvent, len(res.Events.Edges))
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
	"wh_move":        {"wh_moves", []string{"ПР", "ВЦ"}},
	"purchase_order": {"wh_purchase_orders", []string{"ЗП"}},
}

var docNumber = regexp.MustCompile(`^(ЗК|ПЗ|ЗП|ПР|ВЦ)-(\d{4})-(\d{6})$`)

func TestDemoReplay(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, serverOpts{})
	endpoint := s.URL + "/graphql"

	// A wrong token is refused with the server's code and writes nothing.
	_, err := replayDemo(t.Context(), endpoint, "not-a-token", &bytes.Buffer{})
	require.Error(t, err)
	require.Equal(t, "UNAUTHENTICATED", demoCode(err), "error: %v", err)
	require.Empty(t, demoJournal(t, s))

	var out bytes.Buffer
	sum, err := replayDemo(t.Context(), endpoint, s.Token, &out)
	require.NoError(t, err, "output:\n%s", out.String())
	year := sum.Year
	require.Equal(t, map[string]int{"ЗК": 22, "ПЗ": 6, "ЗП": 2, "ПР": 1, "ВЦ": 10}, sum.Created)
	require.Equal(t, 21, sum.Received)
	require.Zero(t, sum.Duplicates)
	require.Equal(t, 9, sum.ItemsCreated)
	require.Equal(t, 2, sum.WarehousesCreated)

	journal := demoJournal(t, s)
	require.Len(t, journal, sum.Events)
	require.Len(t, journal, 22+21+6+2+1+10, "doc.created per document plus order.received per integration order")

	// The printed table: the seed's header, 30 rows, the summary last.
	text := out.String()
	require.Contains(t, text, "| № | Событие | Объект | Данные | Создано | Обработано | Кто |\n|---|---|---|---|---|---|---|\n")
	t.Logf("demo output:\n%s", text)
	rowStart := regexp.MustCompile(`^\| \d+ \| `)
	var rows int
	for _, l := range strings.Split(text, "\n") {
		if rowStart.MatchString(l) {
			rows++
			require.True(t, strings.HasSuffix(l, " | Администратор |"), "row %q", l)
		}
	}
	require.Equal(t, demoTableRows, rows)
	require.Contains(t, text, fmt.Sprintf(`{"id": %s, "no": "ВЦ-%d-000010", "entity": "wh_move"}`, journal[len(journal)-1].EntityID, year))
	require.True(t, strings.HasSuffix(text, sum.line()+"\n"), "output ends with the summary:\n%s", text)

	numbers := map[string][]int{}  // prefix → sequence numbers in journal order
	orderNumber := map[int64]int{} // sales order id → its ЗК number
	var received []map[string]any
	for _, ev := range journal {
		require.NotNil(t, ev.ProcessedAt, "event %s unprocessed", ev.ID)
		require.False(t, ev.ProcessedAt.Before(ev.CreatedAt), "event %s processed %s before created %s", ev.ID, ev.ProcessedAt, ev.CreatedAt)
		require.NotNil(t, ev.Actor, "event %s has no actor", ev.ID)
		require.Equal(t, "Администратор", ev.Actor.DisplayName)
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
	require.Equal(t, seqFrom(401, 6), numbers["ПЗ"])
	require.Equal(t, seqFrom(1, 2), numbers["ЗП"])
	require.Equal(t, seqFrom(1, 1), numbers["ПР"])
	require.Equal(t, seqFrom(1, 10), numbers["ВЦ"])

	// The subscriber accepted the shop order, which kept both its lines.
	so := gql[struct {
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
	sum2, err := replayDemo(t.Context(), endpoint, s.Token, &bytes.Buffer{})
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
	require.Equal(t, map[string]int{"ЗК": 5, "ПЗ": 4, "ЗП": 2, "ПР": 1, "ВЦ": 7}, sum2.Created)

	journal2 := demoJournal(t, s)
	require.Len(t, journal2, len(journal)+sum2.Events)
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

func TestDemoToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()

	_, err := demoToken(config{DataDir: dir})
	require.ErrorContains(t, err, "DEMO_TOKEN")
	require.ErrorContains(t, err, "make run")

	require.NoError(t, os.WriteFile(filepath.Join(dir, adminTokenFile), []byte("  file-token\n"), 0o600))
	got, err := demoToken(config{DataDir: dir})
	require.NoError(t, err)
	require.Equal(t, "file-token", got)

	got, err = demoToken(config{DataDir: dir, DemoToken: "env-token"})
	require.NoError(t, err)
	require.Equal(t, "env-token", got)
}

func TestDemoSeedJSON(t *testing.T) {
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
