package demo

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/shopspring/decimal"
)

// dayJSON is the business day the seed's screens show, as the API's inputs.
//
//go:embed day.json
var dayJSON []byte

// Day is the seed's business day: master data, then the documents of the
// day in the order the replay sends them. Quantities and prices are the
// API's Decimal strings. The numbers the replay produces on a fresh database
// (ЗК-…-000418 for the first shop order, ПЗ-…-000414 and 415 for its two
// lines) follow from the counts and order here: changing an order's lines
// or SKU (a product is planned, a material is not) shifts them.
type Day struct {
	// Items are created in this order, products (with a bill of materials)
	// first. A material that is also sold as it is (МАТ-ФУРН, spare
	// fittings) has no bill, so orders for it are not planned.
	Items []Item `json:"items"`
	// Warehouses are created in this order.
	Warehouses []Warehouse `json:"warehouses"`
	// ProductionWarehouse receives purchases and supplies production: the
	// server's material issues (ВЦ) leave from it.
	ProductionWarehouse string `json:"productionWarehouse"`
	// NumberSeries makes this year's series of Prefixes continue the old
	// system's numbering at Start.
	NumberSeries struct {
		Prefixes []string `json:"prefixes"`
		Start    int      `json:"start"`
	} `json:"numberSeries"`
	// PurchaseOrders are created (ЗП) in this order.
	PurchaseOrders []PurchaseOrder `json:"purchaseOrders"`
	// Receipt is the one delivery (ПР) of the seed's day.
	Receipt Receipt `json:"receipt"`
	// CRMOrders are the orders the CRM took over the past weeks, received
	// with source CRM; ExternalID is the CRM's order id.
	CRMOrders []Order `json:"crmOrders"`
	// ManualOrder is entered by hand (createSalesOrder) before the shop's,
	// so the first shop order gets the seed's number.
	ManualOrder Order `json:"manualOrder"`
	// ShopOrders are today's, received with source SHOP one at a time. An
	// empty ExternalID gets a fresh sync_id each run ("shop-" and 12 hex
	// digits, as the shop makes them), so a second run adds new orders.
	ShopOrders []Order `json:"shopOrders"`
	// Afternoon follows the seed's day, on the documents this run made.
	Afternoon Afternoon `json:"afternoon"`
}

// Receipt is a delivery (ПР): all lines of a purchase order, received into
// ToWarehouse.
type Receipt struct {
	// PurchaseOrder is the position in Day.PurchaseOrders, from 1.
	PurchaseOrder int    `json:"purchaseOrder"`
	ToWarehouse   string `json:"toWarehouse"`
}

// Afternoon is what the plant does after the seed's day, so that the
// journal holds every kind of document event: a second delivery, two
// production orders released, their material issues posted and the
// orders completed (each completion receives the finished goods, a ПР),
// one order shipped (ОТ), one cancelled and the delivery taken back (a
// reversal ПР). It names shop orders by their position in
// Day.ShopOrders, from 1, and only ones with a fresh sync_id each run, so
// that every run, a second one on the same database too, acts on the
// documents it made itself.
type Afternoon struct {
	// Receipt is the afternoon's delivery; ReversalReason takes it back.
	Receipt Receipt `json:"receipt"`
	// Production is released and completed: every production order the
	// planning chain made for these shop orders, each after its material
	// issue is posted, the finished goods received into ToWarehouse. The
	// issues are covered by Day.Receipt, which is received into the
	// production warehouse.
	Production struct {
		ShopOrders  []int  `json:"shopOrders"`
		ToWarehouse string `json:"toWarehouse"`
	} `json:"production"`
	// Shipment ships one of Production's shop orders, every line, from
	// FromWarehouse, where its goods were just received.
	Shipment struct {
		ShopOrder     int    `json:"shopOrder"`
		FromWarehouse string `json:"fromWarehouse"`
	} `json:"shipment"`
	// Cancellation cancels a shop order that is not one of Production's
	// (an order with a released production order cannot be cancelled).
	Cancellation struct {
		ShopOrder int    `json:"shopOrder"`
		Reason    string `json:"reason"`
	} `json:"cancellation"`
	// ReversalReason goes into the reversal of the afternoon's receipt
	// (1…200 characters).
	ReversalReason string `json:"reversalReason"`
}

// Item is an item of the master data.
type Item struct {
	SKU  string `json:"sku"`
	Name string `json:"name"`
	Unit string `json:"unit"`
	// BillOfMaterials is, for a product, what one unit is made of.
	BillOfMaterials []Component `json:"billOfMaterials,omitempty"`
}

// Component is one line of a bill of materials: Quantity of SKU per unit of
// the product.
type Component struct {
	SKU      string `json:"sku"`
	Quantity string `json:"quantity"`
}

// Warehouse is a warehouse of the master data.
type Warehouse struct {
	Code string `json:"code"`
	Name string `json:"name"`
}

// PurchaseOrder is an order to a supplier.
type PurchaseOrder struct {
	Supplier string `json:"supplier"`
	Lines    []Line `json:"lines"`
}

// Order is a customer's order.
type Order struct {
	ExternalID string `json:"externalId,omitempty"`
	Customer   string `json:"customer"`
	Lines      []Line `json:"lines"`
}

// Line is a document line, the API's LineInput.
type Line struct {
	SKU      string `json:"sku"`
	Quantity string `json:"quantity"`
	Price    string `json:"price,omitempty"`
}

// SeedDay returns the business day the demo replays, decoded from the
// embedded day.json. The error is for a day.json edited into a shape the
// replay cannot send.
func SeedDay() (Day, error) {
	var d Day
	dec := json.NewDecoder(bytes.NewReader(dayJSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return d, fmt.Errorf("decode day.json: %w", err)
	}
	for _, rc := range []struct {
		field string
		Receipt
	}{{"receipt", d.Receipt}, {"afternoon.receipt", d.Afternoon.Receipt}} {
		if rc.PurchaseOrder < 1 || rc.PurchaseOrder > len(d.PurchaseOrders) {
			return d, fmt.Errorf("day.json: %s.purchaseOrder %d is not a position in purchaseOrders (1…%d)",
				rc.field, rc.PurchaseOrder, len(d.PurchaseOrders))
		}
	}
	if err := d.checkAfternoon(); err != nil {
		return d, fmt.Errorf("day.json: %w", err)
	}
	return d, nil
}

// checkAfternoon returns an error for an afternoon the replay could not
// act out: a shop order that is not a position in ShopOrders or comes back
// a duplicate on a second run (it has a fixed externalId), production of
// an order with nothing to make, a shipment of an order not produced, a
// cancellation of one that is, or materials the day's receipt into the
// production warehouse does not cover (posting their issue would fail).
func (d Day) checkAfternoon() error {
	a := d.Afternoon
	shopOrder := func(field string, pos int) (Order, error) {
		if pos < 1 || pos > len(d.ShopOrders) {
			return Order{}, fmt.Errorf("%s %d is not a position in shopOrders (1…%d)", field, pos, len(d.ShopOrders))
		}
		o := d.ShopOrders[pos-1]
		if o.ExternalID != "" {
			return Order{}, fmt.Errorf("%s %d has the fixed externalId %s: a second run gets it back as a duplicate and has no order of its own to act on",
				field, pos, o.ExternalID)
		}
		return o, nil
	}
	boms := map[string][]Component{}
	for _, p := range d.Products() {
		boms[p.SKU] = p.BillOfMaterials
	}
	if len(a.Production.ShopOrders) == 0 {
		return errors.New("afternoon.production.shopOrders is empty")
	}
	need := map[string]decimal.Decimal{} // material SKU → quantity the issues take
	produced := map[int]bool{}
	for i, pos := range a.Production.ShopOrders {
		field := fmt.Sprintf("afternoon.production.shopOrders.%d", i)
		o, err := shopOrder(field, pos)
		if err != nil {
			return err
		}
		planned := false
		for _, l := range o.Lines {
			for _, c := range boms[l.SKU] {
				q, err := product(c.Quantity, l.Quantity)
				if err != nil {
					return fmt.Errorf("%s: %w", field, err)
				}
				need[c.SKU] = need[c.SKU].Add(q)
				planned = true
			}
		}
		if !planned {
			return fmt.Errorf("%s: shop order %d has no line of a product with a bill of materials, nothing is made for it", field, pos)
		}
		produced[pos] = true
	}
	if _, err := shopOrder("afternoon.shipment.shopOrder", a.Shipment.ShopOrder); err != nil {
		return err
	}
	if !produced[a.Shipment.ShopOrder] {
		return fmt.Errorf("afternoon.shipment.shopOrder %d is not produced in the afternoon: its goods are not in stock", a.Shipment.ShopOrder)
	}
	if _, err := shopOrder("afternoon.cancellation.shopOrder", a.Cancellation.ShopOrder); err != nil {
		return err
	}
	if produced[a.Cancellation.ShopOrder] {
		return fmt.Errorf("afternoon.cancellation.shopOrder %d is produced in the afternoon: an order with released production cannot be cancelled",
			a.Cancellation.ShopOrder)
	}
	have := map[string]decimal.Decimal{}
	if d.Receipt.ToWarehouse == d.ProductionWarehouse {
		for _, l := range d.PurchaseOrders[d.Receipt.PurchaseOrder-1].Lines {
			q, err := decimal.NewFromString(l.Quantity)
			if err != nil {
				return fmt.Errorf("receipt: quantity %q of %s: %w", l.Quantity, l.SKU, err)
			}
			have[l.SKU] = have[l.SKU].Add(q)
		}
	}
	for _, sku := range slices.Sorted(maps.Keys(need)) {
		if need[sku].GreaterThan(have[sku]) {
			return fmt.Errorf("afternoon.production issues %s of %s, the receipt brings %s to %s",
				need[sku], sku, have[sku], d.ProductionWarehouse)
		}
	}
	return nil
}

// product is a*b of two Decimal strings.
func product(a, b string) (decimal.Decimal, error) {
	x, err := decimal.NewFromString(a)
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("quantity %q: %w", a, err)
	}
	y, err := decimal.NewFromString(b)
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("quantity %q: %w", b, err)
	}
	return x.Mul(y), nil
}

// Products are the items with a bill of materials, in order.
func (d Day) Products() []Item {
	var out []Item
	for _, it := range d.Items {
		if len(it.BillOfMaterials) > 0 {
			out = append(out, it)
		}
	}
	return out
}
