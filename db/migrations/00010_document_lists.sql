-- +goose Up
-- Indexes of the document lists (db.ListSalesOrders and its siblings):
-- every list is newest first by id, a keyset page `id < cursor`, so each
-- index ends in the id and a page reads about first+1 index entries
-- whatever the table's size. The query of each filter shape is in
-- db/queries; docs/query-plans.md has the plans.
CREATE INDEX sales_orders_status ON sales_orders (status, id);
CREATE INDEX sales_orders_customer ON sales_orders (customer, id);
CREATE INDEX sales_order_lines_item ON sales_order_lines (item_id, sales_order_id);
CREATE INDEX plan_prod_orders_sales_order ON plan_prod_orders (sales_order_id, id);
CREATE INDEX wh_purchase_orders_supplier ON wh_purchase_orders (supplier, id);

-- +goose Down
DROP INDEX sales_orders_status, sales_orders_customer, sales_order_lines_item,
    plan_prod_orders_sales_order, wh_purchase_orders_supplier;
