-- name: ProductionOrderInsert :one
INSERT INTO plan_prod_orders (number, item_id, quantity, sales_order_id, sales_order_line_no, created_by)
VALUES (@number, @item_id, @quantity, sqlc.narg(sales_order_id), sqlc.narg(sales_order_line_no), sqlc.narg(created_by))
RETURNING id;

-- name: ProductionOrderGetByID :one
SELECT p.id, p.number, i.sku, i.name AS item_name, i.unit, p.quantity, p.sales_order_id,
    p.status, p.created_at, p.sales_order_line_no, p.version
FROM plan_prod_orders p JOIN items i ON i.id = p.item_id
WHERE p.id = @id;

-- name: ProductionOrderLockByID :one
-- ProductionOrderLockByID returns production order id locked against a
-- concurrent issue of its materials until the transaction ends.
SELECT item_id, quantity, number, status FROM plan_prod_orders WHERE id = @id FOR NO KEY UPDATE;

-- name: ProductionOrderLockStatus :one
-- ProductionOrderLockStatus returns the number, status and version of
-- production order id, locked until the transaction ends (db.Transition).
SELECT number, status, version FROM plan_prod_orders WHERE id = @id FOR NO KEY UPDATE;

-- name: ProductionOrderSetStatus :one
-- ProductionOrderSetStatus sets the status of production order id, locked
-- by ProductionOrderLockStatus, and bumps its version; returns the new
-- version.
UPDATE plan_prod_orders SET status = @status, version = version + 1 WHERE id = @id RETURNING version;

-- name: ProductionOrderListReleasedNumbers :many
-- ProductionOrderListReleasedNumbers returns the numbers of the released
-- production orders of sales order sales_order_id, in number order.
SELECT number FROM plan_prod_orders
WHERE sales_order_id = @sales_order_id AND status = 'released'
ORDER BY number;

-- name: ProductionOrderListPlannedIDs :many
-- ProductionOrderListPlannedIDs returns the ids of the planned production
-- orders of sales order sales_order_id, in id order (the order a
-- cancellation locks them in).
SELECT id FROM plan_prod_orders
WHERE sales_order_id = @sales_order_id AND status = 'planned'
ORDER BY id;

-- name: ProductionOrderGetIDByNumber :one
SELECT id FROM plan_prod_orders WHERE number = @number;

-- The production order list, newest first, a keyset page as the sales
-- order list's (db/queries/sales_order.sql). sku is the order's item.

-- name: ProductionOrderListPage :many
-- ProductionOrderListPage reads plan_prod_orders_pkey backward.
SELECT p.id, p.number, i.sku, i.name AS item_name, i.unit, p.quantity, p.sales_order_id,
    p.status, p.created_at, p.sales_order_line_no, p.version
FROM plan_prod_orders p JOIN items i ON i.id = p.item_id
WHERE p.id < @before_id
  AND (sqlc.narg(statuses)::text[] IS NULL OR p.status = ANY (sqlc.narg(statuses)::text[]))
  AND (sqlc.narg(number_prefix)::text IS NULL OR starts_with(p.number, sqlc.narg(number_prefix)::text))
  AND (sqlc.narg(sku)::text IS NULL OR i.sku = sqlc.narg(sku)::text)
  AND (sqlc.narg(created_from)::timestamptz IS NULL OR p.created_at >= sqlc.narg(created_from)::timestamptz)
  AND (sqlc.narg(created_to)::timestamptz IS NULL OR p.created_at < sqlc.narg(created_to)::timestamptz)
ORDER BY p.id DESC
LIMIT @max_rows;

-- name: ProductionOrderListPageBySalesOrder :many
-- ProductionOrderListPageBySalesOrder reads plan_prod_orders_sales_order
-- backward: the production orders of one sales order.
SELECT p.id, p.number, i.sku, i.name AS item_name, i.unit, p.quantity, p.sales_order_id,
    p.status, p.created_at, p.sales_order_line_no, p.version
FROM plan_prod_orders p JOIN items i ON i.id = p.item_id
WHERE p.sales_order_id = @sales_order_id AND p.id < @before_id
  AND (sqlc.narg(statuses)::text[] IS NULL OR p.status = ANY (sqlc.narg(statuses)::text[]))
  AND (sqlc.narg(number_prefix)::text IS NULL OR starts_with(p.number, sqlc.narg(number_prefix)::text))
  AND (sqlc.narg(sku)::text IS NULL OR i.sku = sqlc.narg(sku)::text)
  AND (sqlc.narg(created_from)::timestamptz IS NULL OR p.created_at >= sqlc.narg(created_from)::timestamptz)
  AND (sqlc.narg(created_to)::timestamptz IS NULL OR p.created_at < sqlc.narg(created_to)::timestamptz)
ORDER BY p.id DESC
LIMIT @max_rows;

-- name: ProductionOrderLockMany :many
-- ProductionOrderLockMany is ProductionOrderLockByID for the orders ids at
-- once, locked in id order (the lock order); an unknown id returns no row.
SELECT id, item_id, quantity, number, status FROM plan_prod_orders
WHERE id = ANY(@ids::bigint[]) ORDER BY id FOR NO KEY UPDATE;
