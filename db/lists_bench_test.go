package db_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"erp/db"
	"erp/db/pgtest"
)

// BenchmarkListSalesOrders measures one page (50 orders with their lines)
// of db.ListSalesOrders over 1,000,000 sales orders, for each filter shape
// and from the newest and from a cursor half-way down. Setup (about a
// minute: generate_series, then ANALYZE) is not timed.
//
//	go test -run '^$' -bench ListSalesOrders -benchtime 200x ./db/
func BenchmarkListSalesOrders(b *testing.B) {
	const orders = 1_000_000 // as generate_series below writes
	pool := pgtest.NewPool(b)
	ctx := b.Context()
	_, err := pool.Exec(ctx, `
		INSERT INTO items (sku, name, unit) SELECT 'SKU-' || g, 'Изделие ' || g, 'шт' FROM generate_series(1, 4) g;
		INSERT INTO sales_orders (number, customer, status, source, external_id, created_at)
		SELECT 'ЗК-2026-' || lpad(g::text, 7, '0'), 'Клиент ' || (g % 1000),
			CASE WHEN g % 100 = 0 THEN 'cancelled' WHEN g % 3 = 0 THEN 'accepted' ELSE 'new' END,
			CASE WHEN g % 2 = 0 THEN 'shop' ELSE 'manual' END,
			CASE WHEN g % 2 = 0 THEN 'shop-' || g END,
			now() - interval '1 second' * (1000000 - g)
		FROM generate_series(1, 1000000) g;
		INSERT INTO sales_order_lines (sales_order_id, line_no, item_id, quantity)
		SELECT s.id, 1, (SELECT id FROM items WHERE sku = 'SKU-' || (1 + s.id % 4)), 1 FROM sales_orders s;
		ANALYZE;`, pgx.QueryExecModeSimpleProtocol)
	require.NoError(b, err)
	// A cursor half-way down, walked to as a client pages.
	middle := ""
	for range orders / 2 / 500 {
		p, err := db.ListSalesOrders(ctx, pool, db.SalesOrderFilter{}, 500, middle)
		require.NoError(b, err)
		middle = p.Cursors[len(p.Cursors)-1]
	}
	str := func(s string) *string { return &s }
	shapes := []struct {
		name string
		f    db.SalesOrderFilter
	}{
		{"none", db.SalesOrderFilter{}},
		{"statuses=cancelled", db.SalesOrderFilter{DocFilter: db.DocFilter{Statuses: []string{"cancelled"}}}},
		{"statuses=new,accepted", db.SalesOrderFilter{DocFilter: db.DocFilter{Statuses: []string{"new", "accepted"}}}},
		{"customer", db.SalesOrderFilter{Customer: str("Клиент 7")}},
		{"sku", db.SalesOrderFilter{DocFilter: db.DocFilter{SKU: str("SKU-2")}}},
		{"source=shop", db.SalesOrderFilter{Source: str("shop")}},
	}
	for _, sh := range shapes {
		for _, from := range []struct{ name, after string }{{"newest", ""}, {"middle", middle}} {
			b.Run(sh.name+"/"+from.name, func(b *testing.B) {
				for b.Loop() {
					p, err := db.ListSalesOrders(ctx, pool, sh.f, 50, from.after)
					if err != nil {
						b.Fatal(err)
					}
					if len(p.Items) != 50 {
						b.Fatalf("page of %d orders, want 50", len(p.Items))
					}
				}
			})
		}
	}
}
