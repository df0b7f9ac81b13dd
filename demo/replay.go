package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// requestTimeout is how long the client waits for one response: the demo's
// requests are small, a slower answer means the server is stuck.
const requestTimeout = 30 * time.Second

// TableRows is how many of the newest journal events the replay prints,
// about what the seed's screens show: the afternoon's and the end of the
// seed's day.
const TableRows = 30

// Summary counts what one replay did.
type Summary struct {
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
	// Afternoon is what the afternoon after the seed's day did; its
	// documents are not in Created.
	Afternoon AfternoonSummary
	// Events is how many journal events this replay wrote, the afternoon's
	// included; all of them were processed when it returned.
	Events int
}

// AfternoonSummary is what one replay's afternoon (Day.Afternoon) did, by
// document number (ЗК-2026-000419).
type AfternoonSummary struct {
	// Created counts its new documents per number prefix: ПР (the
	// delivery, a receipt of finished goods per completed production order,
	// the delivery's reversal) and ОТ (the shipment).
	Created map[string]int
	// Receipt is the delivery received and then reversed by Reversal.
	Receipt, Reversal string
	// Produced are the sales orders whose production orders were released
	// and completed, Completed those production orders and Issued their
	// material issues posted, in that order.
	Produced, Completed, Issued []string
	// Shipped is the sales order shipped by Shipment.
	Shipped, Shipment string
	// Cancelled is the sales order cancelled.
	Cancelled string
	// Events is how many journal events the afternoon wrote, the newest of
	// the replay's.
	Events int
}

// Line is the summary as the demo prints it, in Russian like the table.
func (s Summary) Line() string {
	var docs []string
	for _, p := range []string{"ЗП", "ПР", "ЗК", "ПЗ", "ВЦ"} {
		docs = append(docs, fmt.Sprintf("%s %d", p, s.Created[p]))
	}
	a := s.Afternoon
	return fmt.Sprintf("Итог: документов создано — %s; заказов получено %d, из них повторов %d; "+
		"после обеда — ПР %d, ОТ %d: выполнено ПЗ %d (проведено ВЦ %d), отгружен %s, отменён %s, сторнирован %s; "+
		"событий обработано %d.",
		strings.Join(docs, ", "), s.Received, s.Duplicates,
		a.Created["ПР"], a.Created["ОТ"], len(a.Completed), len(a.Issued), a.Shipped, a.Cancelled, a.Receipt,
		s.Events)
}

// Replay replays the seed's business day (SeedDay) through the GraphQL API
// at endpoint as the user of token: master data with the products' bills of
// materials and the warehouse that supplies production, number series
// continuing the old system's, the purchase orders and a receipt, the CRM
// orders, a manual order and the shop orders. The server plans the
// received orders itself: a production order ПЗ per line of a product with
// a bill of materials, and a draft material issue ВЦ per production order,
// journaled by the system. Then the afternoon (Day.Afternoon) acts on
// this run's shop orders: a second delivery ПР, two production orders
// released, their issues posted and the orders completed (a ПР of finished
// goods each), one order shipped (ОТ), one cancelled, the delivery
// reversed. Replay waits until the server has processed every event of
// this run (at most 30 s at a time; the error then names the events still
// unprocessed and what they wait for), prints the newest TableRows journal
// events as the seed's table and the summary line to out, and checks that
// no event was processed before it was created.
//
// Re-running it is safe: existing master data is reused (bills of materials
// are set again, unchanged) and the CRM orders and the shop orders with a
// fixed sync_id come back as duplicates and plan nothing again; the
// afternoon acts on the run's own new shop orders and delivery. Errors name
// the step; a GraphQL error is an *Error carrying extensions.code.
func Replay(ctx context.Context, endpoint, token string, out io.Writer) (Summary, error) {
	day, err := SeedDay()
	if err != nil {
		return Summary{}, err
	}
	r := &replay{
		c:     &client{endpoint: endpoint, token: token, http: &http.Client{Timeout: requestTimeout}},
		day:   day,
		sum:   Summary{Year: time.Now().Year(), Created: map[string]int{}, Afternoon: AfternoonSummary{Created: map[string]int{}}},
		drain: drainTimeout,
	}
	err = r.run(ctx, out)
	return r.sum, err
}

// replay is one run of the day: the client, the day, what it counted, and
// the documents the afternoon acts on.
type replay struct {
	c   *client
	day Day
	sum Summary
	// drain bounds each wait for this run's events to be processed.
	drain time.Duration
	// baseline is the newest journal event's id when the run began: the
	// run's events are the ones after it; afternoonAfter the same for the
	// afternoon's.
	baseline, afternoonAfter int64
	// purchaseOrders are this run's, in Day.PurchaseOrders' order;
	// shopOrders the sales orders of Day.ShopOrders, a duplicate's too.
	purchaseOrders, shopOrders []doc
}

func (r *replay) run(ctx context.Context, out io.Writer) error {
	baseline, err := r.c.newestEventID(ctx)
	if err != nil {
		return fmt.Errorf("read journal head: %w", err)
	}
	r.baseline = baseline
	if err := r.masterData(ctx); err != nil {
		return err
	}
	if err := r.numberSeries(ctx); err != nil {
		return err
	}
	if err := r.purchases(ctx); err != nil {
		return err
	}
	if err := r.orders(ctx); err != nil {
		return err
	}
	if err := r.afternoon(ctx); err != nil {
		return err
	}
	return r.report(ctx, out)
}

// masterData creates the items and warehouses (CONFLICT means an earlier
// run made them), sets the products' bills of materials and marks the
// production warehouse: with these the server plans received orders by
// itself.
func (r *replay) masterData(ctx context.Context) error {
	for _, it := range r.day.Items {
		created, err := r.create(ctx, `mutation($in: ItemInput!) { createItem(input: $in) { id } }`,
			map[string]any{"in": map[string]any{"sku": it.SKU, "name": it.Name, "unit": it.Unit}})
		if err != nil {
			return fmt.Errorf("create item %s: %w", it.SKU, err)
		}
		count(created, &r.sum.ItemsCreated, &r.sum.ItemsExisting)
	}
	for _, wh := range r.day.Warehouses {
		created, err := r.create(ctx, `mutation($in: WarehouseInput!) { createWarehouse(input: $in) { id } }`,
			map[string]any{"in": map[string]any{"code": wh.Code, "name": wh.Name}})
		if err != nil {
			return fmt.Errorf("create warehouse %s: %w", wh.Code, err)
		}
		count(created, &r.sum.WarehousesCreated, &r.sum.WarehousesExisting)
	}
	for _, p := range r.day.Products() {
		if err := r.c.exec(ctx, `mutation($sku: String!, $c: [ComponentInput!]!) { setBillOfMaterials(sku: $sku, components: $c) { id } }`,
			map[string]any{"sku": p.SKU, "c": p.BillOfMaterials}); err != nil {
			return fmt.Errorf("set bill of materials of %s: %w", p.SKU, err)
		}
	}
	wh := r.day.ProductionWarehouse
	if err := r.c.exec(ctx, `mutation($code: String!) { setProductionWarehouse(code: $code) { id } }`,
		map[string]any{"code": wh}); err != nil {
		return fmt.Errorf("mark %s as supplying production: %w", wh, err)
	}
	return nil
}

// create runs a create mutation and reports whether it created the record;
// CONFLICT (the record exists) is not an error, since the replay is re-run
// on the same database.
func (r *replay) create(ctx context.Context, mutation string, vars map[string]any) (bool, error) {
	err := r.c.exec(ctx, mutation, vars)
	switch {
	case err == nil:
		return true, nil
	case Code(err) == "CONFLICT":
		return false, nil
	default:
		return false, err
	}
}

func count(created bool, createdN, existingN *int) {
	if created {
		*createdN++
	} else {
		*existingN++
	}
}

// numberSeries makes this year's series continue the old system's
// numbering; CONFLICT means this year's series is past that already.
func (r *replay) numberSeries(ctx context.Context) error {
	ns := r.day.NumberSeries
	for _, prefix := range ns.Prefixes {
		err := r.c.exec(ctx, `mutation($p: String!, $y: Int!, $s: Int!) { setNumberSeriesStart(prefix: $p, year: $y, start: $s) }`,
			map[string]any{"p": prefix, "y": r.sum.Year, "s": ns.Start})
		if err != nil && Code(err) != "CONFLICT" {
			return fmt.Errorf("set number series %s-%d start: %w", prefix, r.sum.Year, err)
		}
	}
	return nil
}

// doc is a created document as the create mutations return it.
type doc struct {
	ID     string `json:"id"`
	Number string `json:"number"`
}

// purchases orders the materials from the suppliers and receives one
// purchase order.
func (r *replay) purchases(ctx context.Context) error {
	r.purchaseOrders = make([]doc, len(r.day.PurchaseOrders))
	for i, p := range r.day.PurchaseOrders {
		res, err := call[struct{ CreatePurchaseOrder doc }](ctx, r.c,
			`mutation($in: PurchaseOrderInput!) { createPurchaseOrder(input: $in) { id number } }`,
			map[string]any{"in": map[string]any{"supplier": p.Supplier, "lines": p.Lines}})
		if err != nil {
			return fmt.Errorf("create purchase order to %s: %w", p.Supplier, err)
		}
		r.sum.Created["ЗП"]++
		r.purchaseOrders[i] = res.CreatePurchaseOrder
	}
	if _, err := r.receipt(ctx, r.day.Receipt); err != nil {
		return err
	}
	r.sum.Created["ПР"]++
	return nil
}

// receipt receives every line of one of this run's purchase orders and
// returns the receipt ПР.
func (r *replay) receipt(ctx context.Context, rc Receipt) (doc, error) {
	po := r.purchaseOrders[rc.PurchaseOrder-1]
	res, err := call[struct{ CreateWarehouseMove doc }](ctx, r.c,
		`mutation($in: WarehouseMoveInput!) { createWarehouseMove(input: $in) { id number } }`,
		map[string]any{"in": map[string]any{
			"kind": "RECEIPT", "toWarehouse": rc.ToWarehouse, "lines": r.day.PurchaseOrders[rc.PurchaseOrder-1].Lines, "purchaseOrderId": po.ID,
		}})
	if err != nil {
		return doc{}, fmt.Errorf("receive purchase order %s: %w", po.Number, err)
	}
	return res.CreateWarehouseMove, nil
}

// orders sends the CRM orders, the manual order and the shop orders. As in
// the seed's journal, the orders of the past weeks are planned before
// today's arrive, and each shop order is planned and its materials issued
// before the next one comes in: the planning chain numbers its ПЗ and ВЦ in
// the order it sees them, so this is what makes the numbers come out as the
// seed's (ПЗ-…-000414 and 415 for ЗК-…-000418).
func (r *replay) orders(ctx context.Context) error {
	for _, o := range r.day.CRMOrders {
		if _, err := r.receive(ctx, "CRM", o.ExternalID, o); err != nil {
			return fmt.Errorf("receive crm order %s: %w", o.ExternalID, err)
		}
	}
	mo := r.day.ManualOrder
	if err := r.c.exec(ctx, `mutation($in: SalesOrderInput!) { createSalesOrder(input: $in) { id number } }`,
		map[string]any{"in": map[string]any{"customer": mo.Customer, "lines": mo.Lines}}); err != nil {
		return fmt.Errorf("create manual sales order: %w", err)
	}
	r.sum.Created["ЗК"]++
	if err := r.c.waitProcessed(ctx, r.baseline, r.drain); err != nil {
		return err
	}
	for _, o := range r.day.ShopOrders {
		syncID := o.ExternalID
		if syncID == "" {
			var err error
			if syncID, err = newSyncID(); err != nil {
				return err
			}
		}
		r.sum.ShopOrders = append(r.sum.ShopOrders, syncID)
		so, err := r.receive(ctx, "SHOP", syncID, o)
		if err != nil {
			return fmt.Errorf("receive shop order %s: %w", syncID, err)
		}
		r.shopOrders = append(r.shopOrders, so)
		if err := r.c.waitProcessed(ctx, r.baseline, r.drain); err != nil {
			return err
		}
	}
	return nil
}

// receive sends one integration order, counts the answer and returns the
// sales order (the first one for a duplicate).
func (r *replay) receive(ctx context.Context, source, externalID string, o Order) (doc, error) {
	res, err := call[struct {
		ReceiveOrder struct {
			Order     doc  `json:"order"`
			Duplicate bool `json:"duplicate"`
		}
	}](ctx, r.c, `mutation($in: ReceiveOrderInput!) { receiveOrder(input: $in) { order { id number } duplicate } }`,
		map[string]any{"in": map[string]any{"source": source, "externalId": externalID, "customer": o.Customer, "lines": o.Lines}})
	if err != nil {
		return doc{}, err
	}
	r.sum.Received++
	if res.ReceiveOrder.Duplicate {
		r.sum.Duplicates++
		r.sum.DuplicateIDs = append(r.sum.DuplicateIDs, externalID)
	} else {
		r.sum.Created["ЗК"]++
	}
	return res.ReceiveOrder.Order, nil
}

// newSyncID makes a shop sync_id like the seed's: "shop-" and 12 hex digits.
func newSyncID() (string, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("make shop sync id: %w", err)
	}
	return "shop-" + hex.EncodeToString(b), nil
}

// report counts the planning chain's documents among this run's events,
// prints the newest events and the summary, and checks the journal. It runs
// when everything is processed, the planning chain included (an event stays
// unprocessed until its subscribers, which journal the chain's next
// documents, are done).
func (r *replay) report(ctx context.Context, out io.Writer) error {
	events, err := r.c.eventsAfter(ctx, r.baseline)
	if err != nil {
		return fmt.Errorf("read this run's events: %w", err)
	}
	r.sum.Events = len(events)
	for _, ev := range events {
		id, err := strconv.ParseInt(ev.ID, 10, 64)
		if err != nil {
			return fmt.Errorf("parse event id %q: %w", ev.ID, err)
		}
		if id > r.afternoonAfter {
			r.sum.Afternoon.Events++
		}
	}
	planned, err := countPlanned(events)
	if err != nil {
		return err
	}
	for prefix, n := range planned {
		r.sum.Created[prefix] += n
	}
	rows, err := r.c.newest(ctx, TableRows)
	if err != nil {
		return fmt.Errorf("read newest events: %w", err)
	}
	if err := WriteTable(out, rows); err != nil {
		return fmt.Errorf("print journal: %w", err)
	}
	if _, err := fmt.Fprintln(out, r.sum.Line()); err != nil {
		return fmt.Errorf("print summary: %w", err)
	}
	if err := verifyEvents(append(events, rows...)); err != nil {
		return fmt.Errorf("verify journal: %w", err)
	}
	return nil
}

// countPlanned counts the doc.created events of the planning chain's
// documents (ПЗ, ВЦ) by number prefix; the replay never creates them, so
// only the journal tells how many the server made.
func countPlanned(events []Event) (map[string]int, error) {
	n := map[string]int{}
	for _, ev := range events {
		if ev.Type != "doc.created" {
			continue
		}
		var p struct {
			No string `json:"no"`
		}
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			return nil, fmt.Errorf("decode payload of event %s: %w", ev.ID, err)
		}
		if prefix, _, ok := strings.Cut(p.No, "-"); ok && (prefix == "ПЗ" || prefix == "ВЦ") {
			n[prefix]++
		}
	}
	return n, nil
}
