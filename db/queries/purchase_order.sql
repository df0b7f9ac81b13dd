-- name: PurchaseOrderInsert :one
INSERT INTO wh_purchase_orders (number, supplier, created_by)
VALUES (@number, @supplier, sqlc.narg(created_by))
RETURNING id;

-- name: PurchaseOrderGetByID :one
SELECT id, number, supplier, status, created_at, version FROM wh_purchase_orders WHERE id = @id;

-- name: PurchaseOrderExists :one
SELECT EXISTS (SELECT 1 FROM wh_purchase_orders WHERE id = @id);

-- name: PurchaseOrderLineInsertMany :exec
-- PurchaseOrderLineInsertMany writes the lines of purchase order
-- purchase_order_id, one per element of the arrays (same length), numbered
-- from 1 in their order; a price of '' is none.
INSERT INTO wh_purchase_order_lines (purchase_order_id, line_no, item_id, quantity, price)
SELECT @purchase_order_id, t.ord, t.item, t.qty, NULLIF(t.price, '')::numeric
FROM ROWS FROM (unnest(@item_ids::bigint[]), unnest(@quantities::numeric[]), unnest(@prices::text[]))
    WITH ORDINALITY AS t(item, qty, price, ord);

-- name: PurchaseOrderLineList :many
SELECT l.line_no, i.sku, i.name AS item_name, i.unit, l.quantity, l.price
FROM wh_purchase_order_lines l JOIN items i ON i.id = l.item_id
WHERE l.purchase_order_id = @purchase_order_id
ORDER BY l.line_no;

-- name: PurchaseOrderLockStatus :one
-- PurchaseOrderLockStatus returns the number, status and version of
-- purchase order id, locked until the transaction ends (db.Transition).
SELECT number, status, version FROM wh_purchase_orders WHERE id = @id FOR NO KEY UPDATE;

-- name: PurchaseOrderSetStatus :one
-- PurchaseOrderSetStatus sets the status of purchase order id, locked by
-- PurchaseOrderLockStatus, and bumps its version; returns the new version.
UPDATE wh_purchase_orders SET status = @status, version = version + 1 WHERE id = @id RETURNING version;

-- name: PurchaseOrderGetIDByNumber :one
SELECT id FROM wh_purchase_orders WHERE number = @number;

-- The purchase order list, newest first, a keyset page as the sales order
-- list's (db/queries/sales_order.sql).

-- name: PurchaseOrderListPage :many
-- PurchaseOrderListPage reads wh_purchase_orders_pkey backward.
SELECT p.* FROM wh_purchase_orders p
WHERE p.id < @before_id
  AND (sqlc.narg(statuses)::text[] IS NULL OR p.status = ANY (sqlc.narg(statuses)::text[]))
  AND (sqlc.narg(number_prefix)::text IS NULL OR starts_with(p.number, sqlc.narg(number_prefix)::text))
  AND (sqlc.narg(sku)::text IS NULL OR EXISTS (SELECT 1 FROM wh_purchase_order_lines l JOIN items i ON i.id = l.item_id
       WHERE l.purchase_order_id = p.id AND i.sku = sqlc.narg(sku)::text))
  AND (sqlc.narg(created_from)::timestamptz IS NULL OR p.created_at >= sqlc.narg(created_from)::timestamptz)
  AND (sqlc.narg(created_to)::timestamptz IS NULL OR p.created_at < sqlc.narg(created_to)::timestamptz)
ORDER BY p.id DESC
LIMIT @max_rows;

-- name: PurchaseOrderListPageBySupplier :many
-- PurchaseOrderListPageBySupplier reads wh_purchase_orders_supplier
-- backward.
SELECT p.* FROM wh_purchase_orders p
WHERE p.supplier = @supplier AND p.id < @before_id
  AND (sqlc.narg(statuses)::text[] IS NULL OR p.status = ANY (sqlc.narg(statuses)::text[]))
  AND (sqlc.narg(number_prefix)::text IS NULL OR starts_with(p.number, sqlc.narg(number_prefix)::text))
  AND (sqlc.narg(sku)::text IS NULL OR EXISTS (SELECT 1 FROM wh_purchase_order_lines l JOIN items i ON i.id = l.item_id
       WHERE l.purchase_order_id = p.id AND i.sku = sqlc.narg(sku)::text))
  AND (sqlc.narg(created_from)::timestamptz IS NULL OR p.created_at >= sqlc.narg(created_from)::timestamptz)
  AND (sqlc.narg(created_to)::timestamptz IS NULL OR p.created_at < sqlc.narg(created_to)::timestamptz)
ORDER BY p.id DESC
LIMIT @max_rows;

-- name: PurchaseOrderLineListByOrders :many
SELECT l.purchase_order_id, l.line_no, i.sku, i.name AS item_name, i.unit, l.quantity, l.price
FROM wh_purchase_order_lines l JOIN items i ON i.id = l.item_id
WHERE l.purchase_order_id = ANY (@ids::bigint[])
ORDER BY l.purchase_order_id, l.line_no;

-- name: PurchaseOrderLineSumByItem :many
-- PurchaseOrderLineSumByItem sums the ordered quantity of purchase order
-- purchase_order_id per item.
SELECT item_id, sum(quantity)::numeric AS quantity
FROM wh_purchase_order_lines WHERE purchase_order_id = @purchase_order_id
GROUP BY item_id;
