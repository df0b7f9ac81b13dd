package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Item is a row of items: something the plant buys, makes or sells.
type Item struct {
	ID        int64     `db:"id"`
	SKU       string    `db:"sku"`
	Name      string    `db:"name"`
	Unit      string    `db:"unit"`
	CreatedAt time.Time `db:"created_at"`
}

// ItemInput creates an item; Unit is the unit of measure ("шт", "кг").
type ItemInput struct {
	SKU  string
	Name string
	Unit string
}

// Warehouse is a row of warehouses, addressed by its code.
type Warehouse struct {
	ID        int64     `db:"id"`
	Code      string    `db:"code"`
	Name      string    `db:"name"`
	CreatedAt time.Time `db:"created_at"`
	// SuppliesProduction marks the one warehouse materials are issued from
	// to production (ВЦ); see SetProductionWarehouse.
	SuppliesProduction bool `db:"supplies_production"`
}

// WarehouseInput creates a warehouse. SuppliesProduction makes it the
// warehouse that supplies production; only one may be.
type WarehouseInput struct {
	Code               string
	Name               string
	SuppliesProduction bool
}

// warehouseColumns are the columns of a Warehouse.
const warehouseColumns = `id, code, name, supplies_production, created_at`

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
	it, err := getOne[Item](ctx, q, `
		INSERT INTO items (sku, name, unit) VALUES ($1, $2, $3)
		RETURNING id, sku, name, unit, created_at`, sku, name, unit)
	if errors.Is(err, ErrConflict) {
		return Item{}, conflictOn("sku", "item %q already exists", sku)
	}
	if err != nil {
		return Item{}, fmt.Errorf("insert item %s: %w", sku, err)
	}
	return it, nil
}

// Items lists all items by SKU.
func Items(ctx context.Context, q Querier) ([]Item, error) {
	rows, err := q.Query(ctx, `SELECT id, sku, name, unit, created_at FROM items ORDER BY sku`)
	if err != nil {
		return nil, fmt.Errorf("list items: %w", err)
	}
	items, err := pgx.CollectRows(rows, pgx.RowToStructByName[Item])
	if err != nil {
		return nil, fmt.Errorf("list items: %w", err)
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
	rows, err := q.Query(ctx, `
		INSERT INTO warehouses (code, name, supplies_production) VALUES ($1, $2, $3)
		RETURNING `+warehouseColumns, code, name, in.SuppliesProduction)
	if err != nil {
		return Warehouse{}, fmt.Errorf("insert warehouse %s: %w", code, err)
	}
	wh, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Warehouse])
	switch uniqueViolation(err) {
	case "":
	case constraintOneProductionWarehouse:
		return Warehouse{}, conflictOn("suppliesProduction", "another warehouse supplies production already; move the mark with setProductionWarehouse")
	default:
		return Warehouse{}, conflictOn("code", "warehouse %q already exists", code)
	}
	if err != nil {
		return Warehouse{}, fmt.Errorf("insert warehouse %s: %w", code, err)
	}
	return wh, nil
}

// Warehouses lists all warehouses by code.
func Warehouses(ctx context.Context, q Querier) ([]Warehouse, error) {
	rows, err := q.Query(ctx, `SELECT `+warehouseColumns+` FROM warehouses ORDER BY code`)
	if err != nil {
		return nil, fmt.Errorf("list warehouses: %w", err)
	}
	whs, err := pgx.CollectRows(rows, pgx.RowToStructByName[Warehouse])
	if err != nil {
		return nil, fmt.Errorf("list warehouses: %w", err)
	}
	return whs, nil
}
