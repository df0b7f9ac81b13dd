package demo

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
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
	// Receipt is the one delivery (ПР) of the day: all lines of a purchase
	// order, received into ToWarehouse.
	Receipt struct {
		// PurchaseOrder is the position in PurchaseOrders, from 1.
		PurchaseOrder int    `json:"purchaseOrder"`
		ToWarehouse   string `json:"toWarehouse"`
	} `json:"receipt"`
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
	if d.Receipt.PurchaseOrder < 1 || d.Receipt.PurchaseOrder > len(d.PurchaseOrders) {
		return d, fmt.Errorf("day.json: receipt.purchaseOrder %d is not a position in purchaseOrders (1…%d)",
			d.Receipt.PurchaseOrder, len(d.PurchaseOrders))
	}
	return d, nil
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
