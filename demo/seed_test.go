package demo

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The seed screens: the ERP's "Поток событий" page filtered by one event
// type, as testdata/README.md describes them.
const (
	seedOrderReceived = "seed-order-received.txt"
	seedDocCreated    = "seed-doc-created.txt"
)

// seedScreen is a seed screen: its first line (what the outbox is), the
// table as printed, and the events of its rows, newest first.
type seedScreen struct {
	intro  string
	table  string
	events []Event
}

// readSeed parses testdata/name. It fails the test on a row that does not
// have the seven columns or whose times do not parse.
func readSeed(t *testing.T, name string) seedScreen {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	intro, table, ok := strings.Cut(string(raw), "\n")
	require.True(t, ok, "%s: no table after the first line", name)
	s := seedScreen{intro: intro, table: table}
	loc, err := time.LoadLocation(tableZone)
	require.NoError(t, err)
	lines := strings.Split(table, "\n")
	require.GreaterOrEqual(t, len(lines), 3, "%s: title and header", name)
	for _, l := range lines[3:] {
		cells := strings.Split(strings.TrimSuffix(strings.TrimPrefix(l, "| "), " |"), " | ")
		require.Len(t, cells, 7, "%s: row %q", name, l)
		ev := Event{ID: cells[0], Type: cells[1], Object: cells[2], Payload: json.RawMessage(cells[3])}
		ev.Entity, ev.EntityID, ok = strings.Cut(ev.Object, " #")
		require.True(t, ok, "%s: object %q", name, ev.Object)
		ev.CreatedAt, err = time.ParseInLocation(tableTimeLayout, cells[4], loc)
		require.NoError(t, err, "%s: row %q", name, l)
		processed, err := time.ParseInLocation(tableTimeLayout, cells[5], loc)
		require.NoError(t, err, "%s: row %q", name, l)
		ev.ProcessedAt = &processed
		if cells[6] != systemActor {
			ev.Actor = &Actor{DisplayName: cells[6]}
		}
		s.events = append(s.events, ev)
	}
	return s
}

// payload decodes an event's payload, numbers as json.Number.
func payload(t *testing.T, ev Event) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(ev.Payload))
	dec.UseNumber()
	var m map[string]any
	require.NoError(t, dec.Decode(&m), "event %s payload %s", ev.ID, ev.Payload)
	return m
}

// TestWriteTableIsTheSeedScreen: the seed's rows, printed by WriteTable,
// are the seed's table byte for byte — title, header, cells, time zone and
// format, payload spacing and the system's "—".
func TestWriteTableIsTheSeedScreen(t *testing.T) {
	t.Parallel()
	for _, name := range []string{seedOrderReceived, seedDocCreated} {
		s := readSeed(t, name)
		require.NotEmpty(t, s.events, name)
		require.True(t, strings.HasPrefix(s.table, TableTitle+TableHeader), "%s: header", name)
		var b strings.Builder
		require.NoError(t, WriteTable(&b, s.events))
		require.Equal(t, s.table+"\n", b.String(), name)
	}
}

// TestVerifyEventsCatchesTheSeedsDefect: the old system showed CRM orders
// processed before they were created; the replay's check refuses the first
// of them, № 78, and passes the shop orders and the documents.
func TestVerifyEventsCatchesTheSeedsDefect(t *testing.T) {
	t.Parallel()
	received := readSeed(t, seedOrderReceived)
	err := verifyEvents(received.events)
	require.ErrorContains(t, err, "event 78 (order.received, sales_orders #14) processed at")
	require.ErrorContains(t, err, "before it was created")
	require.NoError(t, verifyEvents(received.events[:5]), "the shop orders")
	require.NoError(t, verifyEvents(readSeed(t, seedDocCreated).events))

	ev := received.events[0]
	ev.ProcessedAt = nil
	require.ErrorContains(t, verifyEvents([]Event{ev}), "event 132 (order.received, sales_orders #22) is not processed")
}

// TestDayIsTheSeedsDay: day.json sends the orders the seed's journal
// received, in its order, with as many lines, and its counts give the
// seed's numbers.
func TestDayIsTheSeedsDay(t *testing.T) {
	t.Parallel()
	day, err := SeedDay()
	require.NoError(t, err)

	// order.received, oldest first: sales orders #1…#16 from the CRM, #18…
	// from the shop; #17 is the manual order, which is not received.
	evs := readSeed(t, seedOrderReceived).events
	slices.Reverse(evs)
	require.Len(t, evs, len(day.CRMOrders)+len(day.ShopOrders))
	for i, o := range day.CRMOrders {
		ev, p := evs[i], payload(t, evs[i])
		require.Equal(t, "sales_orders", ev.Entity)
		require.Equal(t, strconv.Itoa(i+1), ev.EntityID, "CRM order %s", o.ExternalID)
		require.Equal(t, json.Number(o.ExternalID), p["crm_order_id"], "sales_orders #%s", ev.EntityID)
		require.Equal(t, json.Number(strconv.Itoa(len(o.Lines))), p["lines"], "CRM order %s", o.ExternalID)
	}
	firstShop := len(day.CRMOrders) + 2 // after the manual order
	syncID := regexp.MustCompile(`^shop-[0-9a-f]{12}$`)
	for i, o := range day.ShopOrders {
		ev, p := evs[len(day.CRMOrders)+i], payload(t, evs[len(day.CRMOrders)+i])
		require.Equal(t, strconv.Itoa(firstShop+i), ev.EntityID, "shop order %d", i+1)
		require.Equal(t, "shop", p["source"])
		require.Equal(t, json.Number(strconv.Itoa(len(o.Lines))), p["lines"], "shop order %d", i+1)
		if o.ExternalID != "" {
			require.Equal(t, o.ExternalID, p["sync_id"], "shop order %d", i+1)
		} else {
			require.Regexp(t, syncID, p["sync_id"], "the seed's sync_id")
			id, err := newSyncID()
			require.NoError(t, err)
			require.Regexp(t, syncID, id, "a fresh sync_id has the seed's form")
		}
	}

	// doc.created, oldest first: the first shop order is ЗК-…-<start+CRM
	// orders+1>, and every ЗК is followed by one ПЗ per line of a product
	// (the materials sold as they are get none), numbered on from the
	// CRM orders' production orders.
	boms := map[string]bool{}
	for _, p := range day.Products() {
		boms[p.SKU] = true
	}
	planned := func(o Order) int {
		n := 0
		for _, l := range o.Lines {
			if boms[l.SKU] {
				n++
			}
		}
		return n
	}
	nextPZ := day.NumberSeries.Start
	for _, o := range day.CRMOrders {
		nextPZ += planned(o)
	}
	docs := readSeed(t, seedDocCreated).events
	slices.Reverse(docs)
	var orders []string // ЗК numbers, oldest first
	pzAfter := map[string][]int{}
	for _, ev := range docs {
		no, _ := payload(t, ev)["no"].(string)
		m := regexp.MustCompile(`^(ЗК|ПЗ)-\d{4}-(\d{6})$`).FindStringSubmatch(no)
		if m == nil {
			continue
		}
		seq, err := strconv.Atoi(m[2])
		require.NoError(t, err)
		if m[1] == "ЗК" {
			orders = append(orders, no)
			continue
		}
		require.NotEmpty(t, orders, "%s before any ЗК", no)
		pzAfter[orders[len(orders)-1]] = append(pzAfter[orders[len(orders)-1]], seq)
	}
	require.Len(t, orders, len(day.ShopOrders))
	require.Equal(t, "000418", orders[0][len(orders[0])-6:])
	require.Equal(t, 418, day.NumberSeries.Start+len(day.CRMOrders)+1, "ЗК of the first shop order")
	for i, o := range day.ShopOrders {
		var want []int
		for range planned(o) {
			want = append(want, nextPZ)
			nextPZ++
		}
		require.Equal(t, want, pzAfter[orders[i]], "ПЗ of %s (shop order %d)", orders[i], i+1)
	}

	// The replay counts the planning chain's documents from doc.created.
	n, err := countPlanned(docs)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"ПЗ": 5, "ВЦ": 9}, n)
}
