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

-- name: ProductionOrderPlanMany :many
-- ProductionOrderPlanMany writes one production order by the system per
-- element of the arrays (same length; numbers pending), for line line_nos
-- of sales order sales_order_ids, and journals doc.created by the system
-- for each (db.PlanSalesOrders). The orders are inserted, and so take
-- their ids and numbers, in the order of the arrays, and their events in
-- the order of the orders; it returns the events as EventInsert does, in
-- id order.
WITH po AS (
    INSERT INTO plan_prod_orders (number, item_id, quantity, sales_order_id, sales_order_line_no)
    SELECT t.number, t.item_id, t.quantity, t.sales_order_id, t.line_no
    FROM ROWS FROM (unnest(@numbers::text[]), unnest(@item_ids::bigint[]), unnest(@quantities::numeric[]),
        unnest(@sales_order_ids::bigint[]), unnest(@line_nos::int[]))
        WITH ORDINALITY AS t(number, item_id, quantity, sales_order_id, line_no, ord)
    ORDER BY t.ord
    RETURNING id
), e AS (
    INSERT INTO events (type, entity, entity_id, payload, trace_parent, dispatch_job_id)
    SELECT 'doc.created', 'plan_prod_orders', po.id, jsonb_build_object('id', po.id, 'entity', 'prod_order'),
        sqlc.narg(trace_parent)::text, nextval('river_job_id_seq')
    FROM po ORDER BY po.id
    RETURNING *
)
SELECT e.*, u.login AS actor_login, u.display_name AS actor_name, u.role AS actor_role
FROM e LEFT JOIN users u ON u.id = e.actor_id
ORDER BY e.id;
