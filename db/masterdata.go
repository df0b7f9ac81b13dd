package db

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Item is a row of items: something the plant buys, makes or sells.
type Item struct {
	ID        int64
	SKU       string
	Name      string
	Unit      string
	CreatedAt time.Time
}

// ItemInput creates an item; Unit is the unit of measure ("шт", "кг").
type ItemInput struct {
	SKU  string
	Name string
	Unit string
}

// Warehouse is a row of warehouses, addressed by its code.
type Warehouse struct {
	ID        int64
	Code      string
	Name      string
	CreatedAt time.Time
	// SuppliesProduction marks the one warehouse materials are issued from
	// to production (ВЦ); see SetProductionWarehouse.
	SuppliesProduction bool
}

// WarehouseInput creates a warehouse. SuppliesProduction makes it the
// warehouse that supplies production; only one may be.
type WarehouseInput struct {
	Code               string
	Name               string
	SuppliesProduction bool
}

// CreateItem inserts an item. Empty fields are an *InputError; an existing
// SKU is an *InputError on "sku" wrapping ErrConflict.
func CreateItem(ctx context.Context, q Querier, in ItemInput) (Item, error) {
	sku, err := requireText("sku", in.SKU)
	if err != nil {
		return Item{}, err
	}
	name, err := requireText("name", in.Name)
	if err != nil {
		return Item{}, err
	}
	unit, err := requireText("unit", in.Unit)
	if err != nil {
		return Item{}, err
	}
	it, err := queries.ItemInsert(ctx, q, sku, name, unit)
	switch err = translate(err); {
	case errors.Is(err, ErrConflict):
		return Item{}, conflictOn("sku", "item %q already exists", sku)
	case err != nil:
		return Item{}, fmt.Errorf("insert item %s: %w", sku, err)
	}
	return Item(it), nil
}

// Items lists all items by SKU.
func Items(ctx context.Context, q Querier) ([]Item, error) {
	rows, err := queries.ItemList(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("list items: %w", translate(err))
	}
	items := make([]Item, len(rows))
	for i, r := range rows {
		items[i] = Item(r)
	}
	return items, nil
}

// CreateWarehouse inserts a warehouse; errors as CreateItem, on "code". A
// warehouse that would supply production while another does already is an
// *InputError on "suppliesProduction" wrapping ErrConflict.
func CreateWarehouse(ctx context.Context, q Querier, in WarehouseInput) (Warehouse, error) {
	code, err := requireText("code", in.Code)
	if err != nil {
		return Warehouse{}, err
	}
	name, err := requireText("name", in.Name)
	if err != nil {
		return Warehouse{}, err
	}
	wh, err := queries.WarehouseInsert(ctx, q, code, name, in.SuppliesProduction)
	switch err = translate(err); {
	case errors.Is(err, ErrConflict) && violatedConstraint(err) == constraintOneProductionWarehouse:
		return Warehouse{}, conflictOn("suppliesProduction", "another warehouse supplies production already; move the mark with setProductionWarehouse")
	case errors.Is(err, ErrConflict):
		return Warehouse{}, conflictOn("code", "warehouse %q already exists", code)
	case err != nil:
		return Warehouse{}, fmt.Errorf("insert warehouse %s: %w", code, err)
	}
	return Warehouse(wh), nil
}

// Warehouses lists all warehouses by code.
func Warehouses(ctx context.Context, q Querier) ([]Warehouse, error) {
	rows, err := queries.WarehouseList(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("list warehouses: %w", translate(err))
	}
	whs := make([]Warehouse, len(rows))
	for i, r := range rows {
		whs[i] = Warehouse(r)
	}
	return whs, nil
}
