package db

import (
	"context"
	"encoding/base64"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"erp/db/internal/dbsqlc"
)

// maxDocPageSize bounds `first` of the document lists.
const maxDocPageSize = 500

// DocFilter is what every document list filters by; zero fields match
// everything. Statuses: any of them; NumberPrefix: the number starts with
// it ("ЗК-2026-0004"); SKU: a line (or, for production orders, the order)
// is of that item; CreatedFrom inclusive, CreatedTo exclusive.
type DocFilter struct {
	Statuses     []string
	NumberPrefix *string
	SKU          *string
	CreatedFrom  *time.Time
	CreatedTo    *time.Time
}

// SalesOrderFilter selects sales orders: DocFilter and the customer
// (exact) and the source (manual, shop, crm).
type SalesOrderFilter struct {
	DocFilter
	Customer *string
	Source   *string
}

// DocPage is one page of a document list, newest first; Cursors[i] is
// the cursor after Items[i], for `after`.
type DocPage[T any] struct {
	Items       []T
	Cursors     []string
	HasNextPage bool
}

// newPage is the page of first rows of rows (read with one more), with
// each row's cursor in list tag.
func newPage[R, T any](rows []R, first int, tag string, convert func(R) T, id func(T) int64) DocPage[T] {
	rows, more := pageOf(rows, first)
	p := DocPage[T]{Items: make([]T, len(rows)), Cursors: make([]string, len(rows)), HasNextPage: more}
	for i, r := range rows {
		p.Items[i] = convert(r)
		p.Cursors[i] = docCursor(tag, id(p.Items[i]))
	}
	return p
}

// docCursor is the opaque cursor of a document list: the list's tag and
// the id of the last row. A cursor of another list is refused.
func docCursor(tag string, id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("d1:" + tag + ":" + strconv.FormatInt(id, 10)))
}

// parseDocCursor returns the id a cursor of list tag stands for, the
// largest bigint for none; a bad one is an *InputError on field after.
func parseDocCursor(tag, after string) (int64, error) {
	if after == "" {
		return math.MaxInt64, nil
	}
	parts, ok := cursorParts(after, "d1")
	if !ok || parts[1] != tag {
		return 0, inputErr("after", "not a cursor of this list returned by this server")
	}
	id, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || id < 1 || docCursor(tag, id) != after {
		return 0, inputErr("after", "not a cursor of this list returned by this server")
	}
	return id, nil
}

// check validates the shared filter fields against a kind's statuses.
func (f DocFilter) check(k *DocKind, statuses []string) error {
	for i, s := range f.Statuses {
		if !containsString(statuses, s) {
			return inputErr(fmt.Sprintf("filter.statuses.%d", i), "unknown %s status %q; one of %s", k.Noun, s, strings.Join(statuses, ", "))
		}
	}
	if f.CreatedFrom != nil && f.CreatedTo != nil && !f.CreatedFrom.Before(*f.CreatedTo) {
		return inputErr("filter.createdTo", "must be after createdFrom")
	}
	return nil
}

// statuses is the status filter as the queries take it: nil matches every
// status.
func (f DocFilter) statuses() []string {
	if len(f.Statuses) == 0 {
		return nil
	}
	return f.Statuses
}

// SalesOrderStatuses lists the statuses of a sales order in lifecycle order.
var SalesOrderStatuses = []string{SalesOrderNew, SalesOrderAccepted, SalesOrderInProduction, SalesOrderShipped, SalesOrderCancelled}

// ListSalesOrders returns up to first (1…500) sales orders matching f,
// newest first (by id), after the cursor after (empty: from the newest),
// each with its lines. The filter shape picks the query and its index
// (docs/query-plans.md): a SKU (sales_order_lines_item), else a customer
// (sales_orders_customer), else statuses (sales_orders_status), else the
// primary key. A bad first, cursor or status is an *InputError.
func ListSalesOrders(ctx context.Context, q Querier, f SalesOrderFilter, first int, after string) (DocPage[SalesOrder], error) {
	if err := checkFirst(first, maxDocPageSize); err != nil {
		return DocPage[SalesOrder]{}, err
	}
	if err := f.check(SalesOrders, SalesOrderStatuses); err != nil {
		return DocPage[SalesOrder]{}, err
	}
	before, err := parseDocCursor("so", after)
	if err != nil {
		return DocPage[SalesOrder]{}, err
	}
	limit := int32(first + 1)
	var rows []dbsqlc.SalesOrder
	switch {
	case f.SKU != nil:
		rows, err = queries.SalesOrderListPageBySKU(ctx, q, dbsqlc.SalesOrderListPageBySKUParams{SKU: *f.SKU, BeforeID: before,
			Statuses: f.statuses(), Customer: f.Customer, NumberPrefix: f.NumberPrefix, Source: f.Source,
			CreatedFrom: f.CreatedFrom, CreatedTo: f.CreatedTo, MaxRows: limit})
	case f.Customer != nil:
		rows, err = queries.SalesOrderListPageByCustomer(ctx, q, dbsqlc.SalesOrderListPageByCustomerParams{Customer: *f.Customer,
			BeforeID: before, Statuses: f.statuses(), NumberPrefix: f.NumberPrefix, Source: f.Source,
			CreatedFrom: f.CreatedFrom, CreatedTo: f.CreatedTo, MaxRows: limit})
	case f.statuses() != nil:
		rows, err = queries.SalesOrderListPageByStatus(ctx, q, dbsqlc.SalesOrderListPageByStatusParams{Statuses: f.Statuses,
			BeforeID: before, NumberPrefix: f.NumberPrefix, Source: f.Source,
			CreatedFrom: f.CreatedFrom, CreatedTo: f.CreatedTo, MaxRows: limit})
	default:
		rows, err = queries.SalesOrderListPage(ctx, q, dbsqlc.SalesOrderListPageParams{BeforeID: before,
			NumberPrefix: f.NumberPrefix, Source: f.Source, CreatedFrom: f.CreatedFrom, CreatedTo: f.CreatedTo, MaxRows: limit})
	}
	if err != nil {
		return DocPage[SalesOrder]{}, fmt.Errorf("list sales orders: %w", translate(err))
	}
	page := newPage(rows, first, "so", func(r dbsqlc.SalesOrder) SalesOrder {
		return SalesOrder{ID: r.ID, Number: r.Number, Customer: r.Customer, Status: r.Status, Source: r.Source,
			ExternalID: r.ExternalID, CreatedAt: r.CreatedAt, Version: r.Version, Lines: []DocLine{}}
	}, func(so SalesOrder) int64 { return so.ID })
	ids := make([]int64, len(page.Items))
	at := make(map[int64]int, len(page.Items))
	for i, so := range page.Items {
		ids[i], at[so.ID] = so.ID, i
	}
	if len(ids) == 0 {
		return page, nil
	}
	lines, err := queries.SalesOrderLineListByOrders(ctx, q, ids)
	if err != nil {
		return DocPage[SalesOrder]{}, fmt.Errorf("list lines of %d sales orders: %w", len(ids), translate(err))
	}
	for _, l := range lines {
		so := &page.Items[at[l.SalesOrderID]]
		so.Lines = append(so.Lines, DocLine{LineNo: l.LineNo, SKU: l.SKU, ItemName: l.ItemName, Unit: l.Unit, Quantity: l.Quantity, Price: l.Price})
	}
	return page, nil
}

// Statuses of the other documents, in lifecycle order.
var (
	ProductionOrderStatuses = []string{ProductionPlanned, ProductionReleased, ProductionCompleted, ProductionCancelled}
	PurchaseOrderStatuses   = []string{PurchaseOpen, PurchasePartiallyReceived, PurchaseReceived, PurchaseClosed, PurchaseCancelled}
	WarehouseMoveStatuses   = []string{MoveDraft, MovePosted, MoveReversed, MoveCancelled}
)

// ProductionOrderFilter selects production orders: DocFilter (SKU is the
// order's item) and the sales order they were planned for.
type ProductionOrderFilter struct {
	DocFilter
	SalesOrderID *int64
}

// ListProductionOrders is ListSalesOrders for production orders: with a
// sales order, plan_prod_orders_sales_order; else the primary key, the
// other filters only filtering rows.
func ListProductionOrders(ctx context.Context, q Querier, f ProductionOrderFilter, first int, after string) (DocPage[ProductionOrder], error) {
	if err := checkFirst(first, maxDocPageSize); err != nil {
		return DocPage[ProductionOrder]{}, err
	}
	if err := f.check(ProductionOrders, ProductionOrderStatuses); err != nil {
		return DocPage[ProductionOrder]{}, err
	}
	before, err := parseDocCursor("pz", after)
	if err != nil {
		return DocPage[ProductionOrder]{}, err
	}
	limit := int32(first + 1)
	var rows []ProductionOrder
	if f.SalesOrderID != nil {
		var got []dbsqlc.ProductionOrderListPageBySalesOrderRow
		got, err = queries.ProductionOrderListPageBySalesOrder(ctx, q, dbsqlc.ProductionOrderListPageBySalesOrderParams{
			SalesOrderID: f.SalesOrderID, BeforeID: before, Statuses: f.statuses(), NumberPrefix: f.NumberPrefix, SKU: f.SKU,
			CreatedFrom: f.CreatedFrom, CreatedTo: f.CreatedTo, MaxRows: limit})
		rows = mapRows(got, func(r dbsqlc.ProductionOrderListPageBySalesOrderRow) ProductionOrder { return ProductionOrder(r) })
	} else {
		var got []dbsqlc.ProductionOrderListPageRow
		got, err = queries.ProductionOrderListPage(ctx, q, dbsqlc.ProductionOrderListPageParams{
			BeforeID: before, Statuses: f.statuses(), NumberPrefix: f.NumberPrefix, SKU: f.SKU,
			CreatedFrom: f.CreatedFrom, CreatedTo: f.CreatedTo, MaxRows: limit})
		rows = mapRows(got, func(r dbsqlc.ProductionOrderListPageRow) ProductionOrder { return ProductionOrder(r) })
	}
	if err != nil {
		return DocPage[ProductionOrder]{}, fmt.Errorf("list production orders: %w", translate(err))
	}
	return newPage(rows, first, "pz", func(p ProductionOrder) ProductionOrder { return p },
		func(p ProductionOrder) int64 { return p.ID }), nil
}

// PurchaseOrderFilter selects purchase orders: DocFilter and the supplier
// (exact).
type PurchaseOrderFilter struct {
	DocFilter
	Supplier *string
}

// ListPurchaseOrders is ListSalesOrders for purchase orders: with a
// supplier, wh_purchase_orders_supplier; else the primary key, the other
// filters only filtering rows.
func ListPurchaseOrders(ctx context.Context, q Querier, f PurchaseOrderFilter, first int, after string) (DocPage[PurchaseOrder], error) {
	if err := checkFirst(first, maxDocPageSize); err != nil {
		return DocPage[PurchaseOrder]{}, err
	}
	if err := f.check(PurchaseOrders, PurchaseOrderStatuses); err != nil {
		return DocPage[PurchaseOrder]{}, err
	}
	before, err := parseDocCursor("zp", after)
	if err != nil {
		return DocPage[PurchaseOrder]{}, err
	}
	limit := int32(first + 1)
	var rows []dbsqlc.WhPurchaseOrder
	if f.Supplier != nil {
		rows, err = queries.PurchaseOrderListPageBySupplier(ctx, q, dbsqlc.PurchaseOrderListPageBySupplierParams{
			Supplier: *f.Supplier, BeforeID: before, Statuses: f.statuses(), NumberPrefix: f.NumberPrefix, SKU: f.SKU,
			CreatedFrom: f.CreatedFrom, CreatedTo: f.CreatedTo, MaxRows: limit})
	} else {
		rows, err = queries.PurchaseOrderListPage(ctx, q, dbsqlc.PurchaseOrderListPageParams{
			BeforeID: before, Statuses: f.statuses(), NumberPrefix: f.NumberPrefix, SKU: f.SKU,
			CreatedFrom: f.CreatedFrom, CreatedTo: f.CreatedTo, MaxRows: limit})
	}
	if err != nil {
		return DocPage[PurchaseOrder]{}, fmt.Errorf("list purchase orders: %w", translate(err))
	}
	page := newPage(rows, first, "zp", func(r dbsqlc.WhPurchaseOrder) PurchaseOrder {
		return PurchaseOrder{ID: r.ID, Number: r.Number, Supplier: r.Supplier, Status: r.Status, CreatedAt: r.CreatedAt,
			Version: r.Version, Lines: []DocLine{}}
	}, func(p PurchaseOrder) int64 { return p.ID })
	if len(page.Items) == 0 {
		return page, nil
	}
	at := make(map[int64]int, len(page.Items))
	ids := make([]int64, len(page.Items))
	for i, p := range page.Items {
		ids[i], at[p.ID] = p.ID, i
	}
	lines, err := queries.PurchaseOrderLineListByOrders(ctx, q, ids)
	if err != nil {
		return DocPage[PurchaseOrder]{}, fmt.Errorf("list lines of %d purchase orders: %w", len(ids), translate(err))
	}
	for _, l := range lines {
		p := &page.Items[at[l.PurchaseOrderID]]
		p.Lines = append(p.Lines, DocLine{LineNo: l.LineNo, SKU: l.SKU, ItemName: l.ItemName, Unit: l.Unit, Quantity: l.Quantity, Price: l.Price})
	}
	return page, nil
}

// WarehouseMoveFilter selects warehouse moves: DocFilter, kinds (receipt,
// issue_to_production, …) and a warehouse (code) the goods leave or
// arrive at.
type WarehouseMoveFilter struct {
	DocFilter
	Kinds     []string
	Warehouse *string
}

// ListWarehouseMoves is ListSalesOrders for warehouse moves, on the
// primary key; the filters only filter rows.
func ListWarehouseMoves(ctx context.Context, q Querier, f WarehouseMoveFilter, first int, after string) (DocPage[WarehouseMove], error) {
	if err := checkFirst(first, maxDocPageSize); err != nil {
		return DocPage[WarehouseMove]{}, err
	}
	if err := f.check(WarehouseMoves, WarehouseMoveStatuses); err != nil {
		return DocPage[WarehouseMove]{}, err
	}
	before, err := parseDocCursor("mv", after)
	if err != nil {
		return DocPage[WarehouseMove]{}, err
	}
	var kinds []string
	if len(f.Kinds) > 0 {
		kinds = f.Kinds
	}
	rows, err := queries.WarehouseMoveListPage(ctx, q, dbsqlc.WarehouseMoveListPageParams{
		BeforeID: before, Statuses: f.statuses(), Kinds: kinds, Warehouse: f.Warehouse, NumberPrefix: f.NumberPrefix,
		SKU: f.SKU, CreatedFrom: f.CreatedFrom, CreatedTo: f.CreatedTo, MaxRows: int32(first + 1)})
	if err != nil {
		return DocPage[WarehouseMove]{}, fmt.Errorf("list warehouse moves: %w", translate(err))
	}
	page := newPage(rows, first, "mv", func(r dbsqlc.WarehouseMoveListPageRow) WarehouseMove {
		return moveFrom(dbsqlc.WarehouseMoveGetByIDRow(r))
	}, func(m WarehouseMove) int64 { return m.ID })
	if err := addMoveLines(ctx, q, page.Items); err != nil {
		return DocPage[WarehouseMove]{}, err
	}
	return page, nil
}
