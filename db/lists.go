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

// SalesOrderPage is one page of ListSalesOrders, newest first; Cursors[i]
// is the cursor after SalesOrders[i].
type SalesOrderPage struct {
	SalesOrders []SalesOrder
	Cursors     []string
	HasNextPage bool
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
	if err != nil || id < 1 {
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
func ListSalesOrders(ctx context.Context, q Querier, f SalesOrderFilter, first int, after string) (SalesOrderPage, error) {
	if err := checkFirst(first, maxDocPageSize); err != nil {
		return SalesOrderPage{}, err
	}
	if err := f.check(SalesOrders, SalesOrderStatuses); err != nil {
		return SalesOrderPage{}, err
	}
	before, err := parseDocCursor("so", after)
	if err != nil {
		return SalesOrderPage{}, err
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
		return SalesOrderPage{}, fmt.Errorf("list sales orders: %w", translate(err))
	}
	rows, more := pageOf(rows, first)
	page := SalesOrderPage{SalesOrders: make([]SalesOrder, len(rows)), Cursors: make([]string, len(rows)), HasNextPage: more}
	ids := make([]int64, len(rows))
	at := make(map[int64]int, len(rows))
	for i, r := range rows {
		page.SalesOrders[i] = SalesOrder{ID: r.ID, Number: r.Number, Customer: r.Customer, Status: r.Status, Source: r.Source,
			ExternalID: r.ExternalID, CreatedAt: r.CreatedAt, Version: r.Version, Lines: []DocLine{}}
		page.Cursors[i] = docCursor("so", r.ID)
		ids[i], at[r.ID] = r.ID, i
	}
	if len(ids) == 0 {
		return page, nil
	}
	lines, err := queries.SalesOrderLineListByOrders(ctx, q, ids)
	if err != nil {
		return SalesOrderPage{}, fmt.Errorf("list lines of %d sales orders: %w", len(ids), translate(err))
	}
	for _, l := range lines {
		so := &page.SalesOrders[at[l.SalesOrderID]]
		so.Lines = append(so.Lines, DocLine{LineNo: l.LineNo, SKU: l.SKU, ItemName: l.ItemName, Unit: l.Unit, Quantity: l.Quantity, Price: l.Price})
	}
	return page, nil
}
