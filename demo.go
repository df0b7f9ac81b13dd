package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // the journal table is shown in Moscow time even where the system has no tzdata
)

// Demo timing: the HTTP client gives up on one request after
// demoRequestTimeout; the replay waits up to demoDrainTimeout, polling every
// demoPollInterval, for the server to process every event.
const (
	demoRequestTimeout = 30 * time.Second
	demoDrainTimeout   = 30 * time.Second
	demoPollInterval   = 100 * time.Millisecond
	// demoTableRows is how many of the newest journal events the replay prints.
	demoTableRows = 30
	// demoSeriesStart is where the seed's sales and production orders
	// continue the old system's numbering (ЗК-…-000401, ПЗ-…-000401).
	demoSeriesStart = 401
	// demoShopFirst is the sync_id of the seed's first shop order, the one
	// with two lines.
	demoShopFirst = "shop-demo-0001"
	// demoMainWarehouse receives purchases and supplies production: the
	// server's material issues (ВЦ) leave from it.
	demoMainWarehouse = "СКЛ-1"
	// demoSpareSKU is a material also sold as it is (a spare fittings kit):
	// orders for it are not planned for production. Three CRM orders and
	// the fourth shop order are for it, so that, as in the seed, 13
	// production orders precede the first shop order's (ПЗ-…-000414 and 415
	// for ЗК-…-000418) and the last shop order's is ПЗ-…-000418.
	demoSpareSKU   = "МАТ-ФУРН"
	demoSparePrice = "450.00"
)

// demoTableHeader is the header of the old system's "Поток событий" screen.
const demoTableHeader = "| № | Событие | Объект | Данные | Создано | Обработано | Кто |\n|---|---|---|---|---|---|---|\n"

// runDemo is the demo subcommand: it replays the seed's business day against
// the running server at cfg.DemoURL and prints the resulting journal to
// stdout. The token is cfg.DemoToken or DATA_DIR/admin-token.
func runDemo(ctx context.Context, cfg config, logger *slog.Logger) error {
	token, err := demoToken(cfg)
	if err != nil {
		return err
	}
	logger.Info("demo: replaying the seed's business day", slog.String("url", cfg.DemoURL))
	sum, err := replayDemo(ctx, cfg.DemoURL, token, os.Stdout)
	if err != nil {
		var opErr *net.OpError
		if errors.As(err, &opErr) {
			return fmt.Errorf("%w (is the server running at %s? start it with make run)", err, cfg.DemoURL)
		}
		return err
	}
	logger.Info("demo: done", slog.Int("events", sum.Events), slog.Int("duplicates", sum.Duplicates))
	return nil
}

// demoToken returns the bearer token the demo uses: cfg.DemoToken, else the
// trimmed contents of DATA_DIR/admin-token, which the server writes on its
// first start.
func demoToken(cfg config) (string, error) {
	if t := strings.TrimSpace(cfg.DemoToken); t != "" {
		return t, nil
	}
	path := filepath.Join(cfg.DataDir, adminTokenFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("no token for the demo: set DEMO_TOKEN (the server's ADMIN_TOKEN) or start the server first with `make run`, which writes %s", path)
	}
	if err != nil {
		return "", fmt.Errorf("read demo token: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("no token for the demo: %s is empty; set DEMO_TOKEN", path)
	}
	return token, nil
}

// demoSummary counts what one replay did.
type demoSummary struct {
	// Year is the year of the number series the replay set (ЗК-<Year>-…).
	Year int
	// ItemsCreated and ItemsExisting count items by whether this replay
	// created them or found them (CONFLICT) from an earlier run; the same
	// for warehouses.
	ItemsCreated, ItemsExisting           int
	WarehousesCreated, WarehousesExisting int
	// Created counts new documents per number prefix: ЗК, ПЗ, ЗП, ПР, ВЦ.
	// ПЗ and ВЦ are made by the server's planning chain, not by the
	// replay; they are counted from this run's journal.
	Created map[string]int
	// Received counts receiveOrder calls; Duplicates those answered
	// duplicate: true, whose external ids are in DuplicateIDs in sending
	// order.
	Received     int
	Duplicates   int
	DuplicateIDs []string
	// ShopOrders are the shop sync_ids sent, in sending order.
	ShopOrders []string
	// Events is how many journal events this replay wrote; all of them were
	// processed when it returned.
	Events int
}

// line is the summary as the demo prints it, in Russian like the table.
func (s demoSummary) line() string {
	var docs []string
	for _, p := range []string{"ЗП", "ПР", "ЗК", "ПЗ", "ВЦ"} {
		docs = append(docs, fmt.Sprintf("%s %d", p, s.Created[p]))
	}
	return fmt.Sprintf("Итог: документов создано — %s; заказов получено %d, из них повторов %d; событий обработано %d.",
		strings.Join(docs, ", "), s.Received, s.Duplicates, s.Events)
}

// demoItem is one item of the demo's master data. BOM lists, for a finished
// product, the materials one unit is made of (quantities in thousandths of
// the material's unit); materials have none.
type demoItem struct {
	SKU, Name, Unit string
	BOM             []demoBOMLine
}

type demoBOMLine struct {
	SKU   string
	Milli int64 // quantity per unit of the product, in thousandths
}

var (
	demoProducts = []demoItem{
		{SKU: "СТЛ-01", Name: "Стол обеденный из дуба", Unit: "шт", BOM: []demoBOMLine{{"МАТ-ДУБ", 6_500}, {"МАТ-ЛАК", 800}}},
		{SKU: "СТУ-02", Name: "Стул венский", Unit: "шт", BOM: []demoBOMLine{{"МАТ-ДУБ", 3_200}}},
		{SKU: "ШКФ-03", Name: "Шкаф двухстворчатый", Unit: "шт", BOM: []demoBOMLine{{"МАТ-ЛДСП", 4_000}, {"МАТ-КРОМ", 18_500}}},
		{SKU: "КМД-04", Name: "Комод на четыре ящика", Unit: "шт", BOM: []demoBOMLine{{"МАТ-ЛДСП", 3_000}, {"МАТ-ФУРН", 1_000}}},
	}
	demoMaterials = []demoItem{
		{SKU: "МАТ-ДУБ", Name: "Брус дубовый 50×50 мм", Unit: "м"},
		{SKU: "МАТ-ЛАК", Name: "Лак мебельный полуматовый", Unit: "кг"},
		{SKU: "МАТ-ЛДСП", Name: "ЛДСП 16 мм, лист 2800×2070", Unit: "шт"},
		{SKU: "МАТ-КРОМ", Name: "Кромка ПВХ 2 мм", Unit: "м"},
		{SKU: "МАТ-ФУРН", Name: "Фурнитура мебельная, комплект", Unit: "шт"},
	}
	demoWarehouses = []struct{ Code, Name string }{
		{demoMainWarehouse, "Основной склад"},
		{"СКЛ-2", "Склад материалов"},
	}
	demoCustomers = []string{
		"ООО «Уютный дом»", "ИП Кузнецов И. П.", "ООО «Мебель-Центр»", "АО «Гостиница Волга»",
		"ООО «Кафе Берёзка»", "ИП Соколова Е. А.", "ООО «Офис-Сервис»", "МБОУ «Школа № 12»",
	}
)

// demoLine is a LineInput of the API: quantity and price as Decimal strings.
type demoLine struct {
	SKU      string `json:"sku"`
	Quantity string `json:"quantity"`
	Price    string `json:"price,omitempty"`
}

// demoQty formats thousandths as a Decimal with three places: 6500 → "6.500".
func demoQty(milli int64) string { return fmt.Sprintf("%d.%03d", milli/1000, milli%1000) }

// replayDemo replays the seed's business day through the GraphQL API at
// endpoint as the user of token: master data with the products' bills of
// materials and the warehouse that supplies production, number series
// continuing at 401, two purchase orders and a receipt, 16 CRM orders, a
// manual order and 5 shop orders. The server plans the received orders
// itself: a production order ПЗ per line of a product with a bill of
// materials, and a material issue ВЦ per production order, journaled by the
// system. The replay then waits until the server has processed every
// event, prints the newest journal events as the old "Поток событий" table
// and a summary line to out, and checks that no event was processed before
// it was created.
//
// Re-running it is safe: existing master data is reused (bills of materials
// are set again, unchanged) and the CRM orders and shop-demo-0001 come back
// as duplicates, planned nothing again. Errors name the step; a GraphQL
// error is a *demoError carrying extensions.code.
func replayDemo(ctx context.Context, endpoint, token string, out io.Writer) (demoSummary, error) {
	c := &demoClient{
		endpoint: endpoint,
		token:    token,
		http:     &http.Client{Timeout: demoRequestTimeout},
	}
	sum := demoSummary{Year: time.Now().Year(), Created: map[string]int{}}

	baseline, err := c.newestEventID(ctx)
	if err != nil {
		return sum, fmt.Errorf("read journal head: %w", err)
	}

	// 1. Master data; CONFLICT means an earlier run made it.
	for _, it := range append(append([]demoItem{}, demoProducts...), demoMaterials...) {
		_, err := demoCall[struct{}](ctx, c, `mutation($in: ItemInput!) { createItem(input: $in) { id } }`,
			map[string]any{"in": map[string]any{"sku": it.SKU, "name": it.Name, "unit": it.Unit}})
		switch {
		case err == nil:
			sum.ItemsCreated++
		case demoCode(err) == "CONFLICT":
			sum.ItemsExisting++
		default:
			return sum, fmt.Errorf("create item %s: %w", it.SKU, err)
		}
	}
	for _, wh := range demoWarehouses {
		_, err := demoCall[struct{}](ctx, c, `mutation($in: WarehouseInput!) { createWarehouse(input: $in) { id } }`,
			map[string]any{"in": map[string]any{"code": wh.Code, "name": wh.Name}})
		switch {
		case err == nil:
			sum.WarehousesCreated++
		case demoCode(err) == "CONFLICT":
			sum.WarehousesExisting++
		default:
			return sum, fmt.Errorf("create warehouse %s: %w", wh.Code, err)
		}
	}

	// What the products are made of, and where their materials come from:
	// with these the server plans received orders by itself.
	for _, p := range demoProducts {
		components := make([]map[string]any, len(p.BOM))
		for i, m := range p.BOM {
			components[i] = map[string]any{"sku": m.SKU, "quantity": demoQty(m.Milli)}
		}
		if _, err := demoCall[struct{}](ctx, c, `mutation($sku: String!, $c: [ComponentInput!]!) { setBillOfMaterials(sku: $sku, components: $c) { id } }`,
			map[string]any{"sku": p.SKU, "c": components}); err != nil {
			return sum, fmt.Errorf("set bill of materials of %s: %w", p.SKU, err)
		}
	}
	if _, err := demoCall[struct{}](ctx, c, `mutation($code: String!) { setProductionWarehouse(code: $code) { id } }`,
		map[string]any{"code": demoMainWarehouse}); err != nil {
		return sum, fmt.Errorf("mark %s as supplying production: %w", demoMainWarehouse, err)
	}

	// 2. The seed's sales and production orders continue from 401;
	// CONFLICT means this year's series is past that already.
	for _, prefix := range []string{"ЗК", "ПЗ"} {
		_, err := demoCall[struct{}](ctx, c, `mutation($p: String!, $y: Int!, $s: Int!) { setNumberSeriesStart(prefix: $p, year: $y, start: $s) }`,
			map[string]any{"p": prefix, "y": sum.Year, "s": demoSeriesStart})
		if err != nil && demoCode(err) != "CONFLICT" {
			return sum, fmt.Errorf("set number series %s-%d start: %w", prefix, sum.Year, err)
		}
	}

	// 3. Materials bought from two suppliers; the first delivery arrives.
	type doc struct {
		ID     string `json:"id"`
		Number string `json:"number"`
	}
	purchases := []struct {
		supplier string
		lines    []demoLine
	}{
		{"ООО «ЛесТорг»", []demoLine{{"МАТ-ДУБ", demoQty(250_000), "480.00"}, {"МАТ-ЛАК", demoQty(30_000), "760.00"}}},
		{"ООО «Плитмаркет»", []demoLine{{"МАТ-ЛДСП", demoQty(60_000), "2150.00"}, {"МАТ-КРОМ", demoQty(500_000), "12.50"}, {"МАТ-ФУРН", demoQty(40_000), "350.00"}}},
	}
	var firstPurchase doc
	for i, p := range purchases {
		res, err := demoCall[struct{ CreatePurchaseOrder doc }](ctx, c,
			`mutation($in: PurchaseOrderInput!) { createPurchaseOrder(input: $in) { id number } }`,
			map[string]any{"in": map[string]any{"supplier": p.supplier, "lines": p.lines}})
		if err != nil {
			return sum, fmt.Errorf("create purchase order to %s: %w", p.supplier, err)
		}
		sum.Created["ЗП"]++
		if i == 0 {
			firstPurchase = res.CreatePurchaseOrder
		}
	}
	const moveMutation = `mutation($in: WarehouseMoveInput!) { createWarehouseMove(input: $in) { id number } }`
	if _, err := demoCall[struct{ CreateWarehouseMove doc }](ctx, c, moveMutation, map[string]any{"in": map[string]any{
		"kind": "RECEIPT", "toWarehouse": demoMainWarehouse, "lines": purchases[0].lines, "purchaseOrderId": firstPurchase.ID,
	}}); err != nil {
		return sum, fmt.Errorf("receive purchase order %s: %w", firstPurchase.Number, err)
	}
	sum.Created["ПР"]++

	// receive sends one integration order and counts the answer.
	receive := func(source, externalID, customer string, lines []demoLine) error {
		res, err := demoCall[struct {
			ReceiveOrder struct {
				Duplicate bool `json:"duplicate"`
			}
		}](ctx, c, `mutation($in: ReceiveOrderInput!) { receiveOrder(input: $in) { duplicate } }`,
			map[string]any{"in": map[string]any{"source": source, "externalId": externalID, "customer": customer, "lines": lines}})
		if err != nil {
			return err
		}
		sum.Received++
		if res.ReceiveOrder.Duplicate {
			sum.Duplicates++
			sum.DuplicateIDs = append(sum.DuplicateIDs, externalID)
		} else {
			sum.Created["ЗК"]++
		}
		return nil
	}

	// 4. Sixteen orders the CRM took over the last weeks, one line each;
	// every fifth is for spare fittings, the others for furniture.
	for i := range 16 {
		externalID := strconv.Itoa(51000 + i)
		p := demoProducts[i%len(demoProducts)]
		lines := []demoLine{{p.SKU, demoQty(int64(1+i%3) * 1000), "18500.00"}}
		if i%5 == 4 {
			lines = []demoLine{{demoSpareSKU, demoQty(int64(1+i%3) * 1000), demoSparePrice}}
		}
		if err := receive("CRM", externalID, demoCustomers[i%len(demoCustomers)], lines); err != nil {
			return sum, fmt.Errorf("receive crm order %s: %w", externalID, err)
		}
	}

	// 5. A manual order, so the first shop order is the seed's ЗК-…-000418.
	if _, err := demoCall[struct{ CreateSalesOrder doc }](ctx, c,
		`mutation($in: SalesOrderInput!) { createSalesOrder(input: $in) { id number } }`,
		map[string]any{"in": map[string]any{"customer": "ИП Смирнов А. В.", "lines": []demoLine{{"КМД-04", demoQty(2000), "21400.00"}}}}); err != nil {
		return sum, fmt.Errorf("create manual sales order: %w", err)
	}
	sum.Created["ЗК"]++

	// 6. Five shop orders today; the first has two lines, the fourth is for
	// spare fittings. As in the seed's journal, the orders of the past weeks
	// are planned before today's arrive, and each shop order is planned and
	// its materials issued before the next one comes in, so the numbers
	// come out as the seed's (ПЗ-…-000414 and 415 for ЗК-…-000418).
	if err := c.waitProcessed(ctx); err != nil {
		return sum, err
	}
	for i := range 5 {
		syncID := demoShopFirst
		lines := []demoLine{{demoProducts[0].SKU, demoQty(1000), "15900.00"}, {demoProducts[1].SKU, demoQty(4000), "15900.00"}}
		if i > 0 {
			var err error
			if syncID, err = demoSyncID(); err != nil {
				return sum, err
			}
			lines = []demoLine{{demoProducts[i%len(demoProducts)].SKU, demoQty(int64(1+i%2) * 1000), "15900.00"}}
			if i == 3 {
				lines = []demoLine{{demoSpareSKU, demoQty(2000), demoSparePrice}}
			}
		}
		sum.ShopOrders = append(sum.ShopOrders, syncID)
		if err := receive("SHOP", syncID, demoCustomers[(i+3)%len(demoCustomers)], lines); err != nil {
			return sum, fmt.Errorf("receive shop order %s: %w", syncID, err)
		}
		if err := c.waitProcessed(ctx); err != nil {
			return sum, err
		}
	}

	// 7. Everything is processed now, the planning chain included (no event
	// is left unprocessed before its last stage has journaled): count what
	// the chain made and show the journal as the old screen did.
	events, err := c.eventsAfter(ctx, baseline)
	if err != nil {
		return sum, fmt.Errorf("read this run's events: %w", err)
	}
	sum.Events = len(events)
	for _, ev := range events {
		if ev.Type != "doc.created" {
			continue
		}
		var p struct {
			No string `json:"no"`
		}
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			return sum, fmt.Errorf("event %s payload: %w", ev.ID, err)
		}
		if prefix, _, ok := strings.Cut(p.No, "-"); ok && (prefix == "ПЗ" || prefix == "ВЦ") {
			sum.Created[prefix]++
		}
	}
	newest, err := demoCall[demoEventsData](ctx, c, demoEventsQuery, map[string]any{"first": demoTableRows})
	if err != nil {
		return sum, fmt.Errorf("read newest events: %w", err)
	}
	rows := make([]demoEvent, len(newest.Events.Edges))
	for i, e := range newest.Events.Edges {
		rows[i] = e.Node
	}
	if err := writeDemoTable(out, rows); err != nil {
		return sum, fmt.Errorf("print journal: %w", err)
	}
	if _, err := fmt.Fprintln(out, sum.line()); err != nil {
		return sum, fmt.Errorf("print summary: %w", err)
	}

	// 8. The old system's defect must not be back: processed before created.
	if err := verifyDemoEvents(append(events, rows...)); err != nil {
		return sum, fmt.Errorf("verify journal: %w", err)
	}
	return sum, nil
}

// demoSyncID makes a shop sync_id like the seed's: "shop-" and 12 hex digits.
func demoSyncID() (string, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("make shop sync id: %w", err)
	}
	return "shop-" + hex.EncodeToString(b), nil
}

// demoEvent is a journal event as the events query returns it.
type demoEvent struct {
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

type demoEventsData struct {
	Events struct {
		Edges []struct {
			Node demoEvent `json:"node"`
		} `json:"edges"`
		PageInfo struct {
			HasNextPage bool    `json:"hasNextPage"`
			EndCursor   *string `json:"endCursor"`
		} `json:"pageInfo"`
	} `json:"events"`
}

const demoEventsQuery = `query($first: Int, $after: String, $filter: EventFilter) {
  events(first: $first, after: $after, filter: $filter) {
    edges { node { id type entity entityId object payload createdAt processedAt actor { displayName } } }
    pageInfo { hasNextPage endCursor }
  }
}`

// verifyDemoEvents returns an error for an event that is unprocessed or
// processed before it was created.
func verifyDemoEvents(events []demoEvent) error {
	for _, ev := range events {
		if ev.ProcessedAt == nil {
			return fmt.Errorf("event %s (%s, %s) is not processed", ev.ID, ev.Type, ev.Object)
		}
		if ev.ProcessedAt.Before(ev.CreatedAt) {
			return fmt.Errorf("event %s (%s, %s) processed at %s before it was created at %s",
				ev.ID, ev.Type, ev.Object, ev.ProcessedAt.Format(time.RFC3339Nano), ev.CreatedAt.Format(time.RFC3339Nano))
		}
	}
	return nil
}

// writeDemoTable prints events as the old "Поток событий" screen: Markdown
// rows under the seed's Russian header, times in Moscow time to the minute,
// the payload in PostgreSQL's jsonb spacing, "—" for the system as actor.
func writeDemoTable(w io.Writer, events []demoEvent) error {
	loc, err := time.LoadLocation("Europe/Moscow")
	zoneNote := ""
	if err != nil {
		loc, zoneNote = time.UTC, "(время UTC: нет данных о часовом поясе Europe/Moscow)\n"
	}
	var b strings.Builder
	b.WriteString("Поток событий\n")
	b.WriteString(zoneNote)
	b.WriteString(demoTableHeader)
	for _, ev := range events {
		processed := ""
		if ev.ProcessedAt != nil {
			processed = ev.ProcessedAt.In(loc).Format("02.01.2006 15:04")
		}
		actor := "—"
		if ev.Actor != nil {
			actor = ev.Actor.DisplayName
		}
		cells := []string{ev.ID, ev.Type, ev.Object, seedJSON(ev.Payload),
			ev.CreatedAt.In(loc).Format("02.01.2006 15:04"), processed, actor}
		for i, c := range cells {
			cells[i] = strings.ReplaceAll(c, "|", `\|`)
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	_, err = io.WriteString(w, b.String())
	return err
}

// seedJSON re-renders a JSON value with the spacing of PostgreSQL's jsonb
// text, as the seed shows payloads ({"id": 46, "no": "ВЦ-…"}), keeping the
// key order. Invalid JSON is returned as it came.
func seedJSON(raw json.RawMessage) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var b strings.Builder
	type frame struct {
		object bool
		n      int // tokens written in this container (keys and values)
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return b.String()
		}
		if err != nil {
			return string(raw)
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			b.WriteRune(rune(d))
			continue
		}
		if len(stack) > 0 {
			top := &stack[len(stack)-1]
			switch {
			case top.object && top.n%2 == 1:
				b.WriteString(": ")
			case top.n > 0:
				b.WriteString(", ")
			}
			top.n++
		}
		switch v := tok.(type) {
		case json.Delim:
			b.WriteRune(rune(v))
			stack = append(stack, frame{object: v == '{'})
		case string:
			s, _ := json.Marshal(v)
			b.Write(s)
		case json.Number:
			b.WriteString(v.String())
		case bool:
			b.WriteString(strconv.FormatBool(v))
		case nil:
			b.WriteString("null")
		}
	}
}

// demoClient talks GraphQL over HTTP to one endpoint as one user.
type demoClient struct {
	endpoint string
	token    string
	http     *http.Client
}

// demoError is the GraphQL errors of one response (or a refused request,
// e.g. HTTP 401 with a GraphQL error body).
type demoError struct {
	Status int // HTTP status
	Errors []demoErrorEntry
}

type demoErrorEntry struct {
	Message    string         `json:"message"`
	Path       []any          `json:"path"`
	Extensions map[string]any `json:"extensions"`
}

// Code is extensions.code of the first error, "" when it has none.
func (e *demoError) Code() string {
	if len(e.Errors) == 0 {
		return ""
	}
	code, _ := e.Errors[0].Extensions["code"].(string)
	return code
}

func (e *demoError) Error() string {
	msgs := make([]string, len(e.Errors))
	for i, x := range e.Errors {
		code, _ := x.Extensions["code"].(string)
		if code == "" {
			code = "NO_CODE"
		}
		msgs[i] = code + ": " + x.Message
		if field, ok := x.Extensions["field"].(string); ok && field != "" {
			msgs[i] += " (field " + field + ")"
		}
	}
	return strings.Join(msgs, "; ")
}

// demoCode is the extensions.code of err when it is a *demoError, else "".
func demoCode(err error) string {
	var e *demoError
	if errors.As(err, &e) {
		return e.Code()
	}
	return ""
}

// post sends one GraphQL request and returns its data. GraphQL errors in the
// response, whatever the HTTP status, are a *demoError; a response that is
// not GraphQL JSON is an error with its status and the start of its body.
func (c *demoClient) post(ctx context.Context, query string, vars map[string]any) (json.RawMessage, error) {
	body, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.token)
	res, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 32<<20))
	if err != nil {
		return nil, fmt.Errorf("read response: %w", err)
	}
	var gr struct {
		Data   json.RawMessage  `json:"data"`
		Errors []demoErrorEntry `json:"errors"`
	}
	if err := json.Unmarshal(raw, &gr); err != nil {
		snippet := string(raw)
		if len(snippet) > 200 {
			snippet = snippet[:200] + "…"
		}
		return nil, fmt.Errorf("http %d from %s: not a GraphQL response: %q", res.StatusCode, c.endpoint, snippet)
	}
	if len(gr.Errors) > 0 {
		return nil, &demoError{Status: res.StatusCode, Errors: gr.Errors}
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("http %d from %s without GraphQL errors", res.StatusCode, c.endpoint)
	}
	return gr.Data, nil
}

// demoCall posts query and decodes its data into a T.
func demoCall[T any](ctx context.Context, c *demoClient, query string, vars map[string]any) (T, error) {
	var v T
	data, err := c.post(ctx, query, vars)
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return v, fmt.Errorf("decode response data: %w", err)
	}
	return v, nil
}

// newestEventID is the id of the newest journal event, 0 for none.
func (c *demoClient) newestEventID(ctx context.Context) (int64, error) {
	res, err := demoCall[demoEventsData](ctx, c, demoEventsQuery, map[string]any{"first": 1})
	if err != nil || len(res.Events.Edges) == 0 {
		return 0, err
	}
	return strconv.ParseInt(res.Events.Edges[0].Node.ID, 10, 64)
}

// eventsAfter returns every journal event with an id greater than id,
// newest first, paging through the events query.
func (c *demoClient) eventsAfter(ctx context.Context, id int64) ([]demoEvent, error) {
	var all []demoEvent
	vars := map[string]any{"first": 500}
	for {
		res, err := demoCall[demoEventsData](ctx, c, demoEventsQuery, vars)
		if err != nil {
			return nil, err
		}
		for _, e := range res.Events.Edges {
			n, err := strconv.ParseInt(e.Node.ID, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("event id %q: %w", e.Node.ID, err)
			}
			if n <= id {
				return all, nil
			}
			all = append(all, e.Node)
		}
		if !res.Events.PageInfo.HasNextPage || res.Events.PageInfo.EndCursor == nil {
			return all, nil
		}
		vars["after"] = *res.Events.PageInfo.EndCursor
	}
}

// waitProcessed polls every demoPollInterval until no event is unprocessed,
// for at most demoDrainTimeout.
func (c *demoClient) waitProcessed(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, demoDrainTimeout)
	defer cancel()
	tick := time.NewTicker(demoPollInterval)
	defer tick.Stop()
	for {
		res, err := demoCall[demoEventsData](ctx, c, demoEventsQuery,
			map[string]any{"first": 1, "filter": map[string]any{"processed": false}})
		if err == nil && len(res.Events.Edges) == 0 {
			return nil
		}
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("wait for processing: %w", err)
		}
		select {
		case <-ctx.Done():
			if len(res.Events.Edges) > 0 {
				ev := res.Events.Edges[0].Node
				return fmt.Errorf("wait for processing: event %s (%s, %s) still unprocessed after %s: %w",
					ev.ID, ev.Type, ev.Object, demoDrainTimeout, ctx.Err())
			}
			return fmt.Errorf("wait for processing: %w", ctx.Err())
		case <-tick.C:
		}
	}
}
