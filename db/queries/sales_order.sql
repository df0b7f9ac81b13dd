-- name: SalesOrderInsert :many
-- SalesOrderInsert writes a sales order numbered provisionally
-- (pending_number, db.pendingNumber's placeholder, which the
-- sales_orders_number trigger replaces at commit, so no other transaction
-- ever sees it), its lines and its doc.created event
-- (payload {"id", "entity": payload_entity}, "no" follows with the
-- number; its dispatch job's id taken as in EventInsert), and
-- returns one row per line, in line order, each with the order and the
-- event. A line whose SKU names no item is left out (the caller compares
-- the count); an order whose (source, external_id) exists already is not
-- written (no rows). A manual order has external_id NULL, which never
-- conflicts. The arrays hold one element per line; a price of '' is none.
WITH so AS (
    INSERT INTO sales_orders (number, customer, created_by, source, external_id)
    VALUES (@pending_number::text, @customer::text, sqlc.narg(actor_id)::bigint, @source::text, sqlc.narg(external_id)::text)
    ON CONFLICT (source, external_id) DO NOTHING
    RETURNING id, customer, status, source, external_id, created_at, version
), l AS (
    INSERT INTO sales_order_lines (sales_order_id, line_no, item_id, quantity, price)
    SELECT so.id, t.ord, i.id, t.qty, NULLIF(t.price, '')::numeric
    FROM so, ROWS FROM (unnest(@skus::text[]), unnest(@quantities::numeric[]), unnest(@prices::text[]))
        WITH ORDINALITY AS t(sku, qty, price, ord)
    JOIN items i ON i.sku = t.sku
    RETURNING line_no, item_id, quantity, price
), e AS (
    INSERT INTO events (type, entity, entity_id, payload, actor_id, trace_parent, dispatch_job_id)
    SELECT @event_type::text, @event_entity::text, so.id,
        jsonb_build_object('id', so.id, 'entity', @payload_entity::text), sqlc.narg(actor_id)::bigint,
        sqlc.narg(trace_parent)::text, nextval('river_job_id_seq')
    FROM so
    RETURNING *
)
SELECT e.id AS event_id, e.type AS event_type, e.entity AS event_entity, e.entity_id AS event_entity_id,
    e.payload AS event_payload, e.created_at AS event_created_at, e.dispatched_at AS event_dispatched_at,
    e.processed_at AS event_processed_at, e.feed_seq AS event_feed_seq, e.actor_id AS event_actor_id,
    e.trace_parent AS event_trace_parent, e.dispatch_job_id AS event_dispatch_job_id, u.login AS actor_login, u.display_name AS actor_name, u.role AS actor_role,
    so.id, so.customer, so.status, so.source, so.external_id, so.created_at, so.version,
    l.line_no, i.sku, i.name AS item_name, i.unit, l.quantity, l.price
FROM so CROSS JOIN e LEFT JOIN users u ON u.id = e.actor_id
CROSS JOIN l JOIN items i ON i.id = l.item_id
ORDER BY l.line_no;

-- name: SalesOrderGetNumber :one
-- SalesOrderGetNumber returns the number of sales order id and the payload
-- of its event event_id, once the order is numbered.
SELECT s.number, e.payload FROM sales_orders s, events e WHERE s.id = @id AND e.id = @event_id;

-- name: SalesOrderListNumbers :many
-- SalesOrderListNumbers returns the number of each sales order of ids, in
-- no order.
SELECT id, number FROM sales_orders WHERE id = ANY (@ids::bigint[]);

-- name: SalesOrderGetStatusBeforeShipped :one
-- SalesOrderGetStatusBeforeShipped returns the status sales order id had
-- before its last move to shipped, from its journal (events_entity).
SELECT (payload->>'from')::text AS status FROM events
WHERE entity = 'sales_orders' AND entity_id = @id AND type = 'doc.status_changed' AND payload->>'to' = 'shipped'
ORDER BY id DESC LIMIT 1;

-- name: SalesOrderGetByID :one
SELECT id, number, customer, status, source, external_id, created_at, version
FROM sales_orders WHERE id = @id;

-- name: SalesOrderGetIDByExternalID :one
SELECT id FROM sales_orders WHERE source = @source AND external_id = @external_id;

-- name: SalesOrderLineList :many
SELECT l.line_no, i.sku, i.name AS item_name, i.unit, l.quantity, l.price
FROM sales_order_lines l JOIN items i ON i.id = l.item_id
WHERE l.sales_order_id = @sales_order_id
ORDER BY l.line_no;

-- name: SalesOrderLineListToPlan :many
-- SalesOrderLineListToPlan returns the lines of sales order
-- sales_order_id whose item has a bill of materials and that no production
-- order was planned for yet, in line order.
SELECT l.line_no, l.item_id, l.quantity FROM sales_order_lines l
WHERE l.sales_order_id = @sales_order_id
  AND EXISTS (SELECT 1 FROM item_components c WHERE c.item_id = l.item_id)
  AND NOT EXISTS (SELECT 1 FROM plan_prod_orders p
                  WHERE p.sales_order_id = l.sales_order_id AND p.sales_order_line_no = l.line_no)
ORDER BY l.line_no;

-- name: SalesOrderLockStatus :one
-- SalesOrderLockStatus returns the number, status and version of sales
-- order id, locked until the transaction ends (db.Transition). NO KEY
-- UPDATE: production orders that reference the order may still be written.
SELECT number, status, version FROM sales_orders WHERE id = @id FOR NO KEY UPDATE;

-- name: SalesOrderSetStatus :one
-- SalesOrderSetStatus sets the status of sales order id, locked by
-- SalesOrderLockStatus, and bumps its version; returns the new version.
UPDATE sales_orders SET status = @status, version = version + 1 WHERE id = @id RETURNING version;

-- The sales order list, newest first (id descending), a keyset page of
-- max_rows rows with id < before_id. Each query is one filter shape that
-- decides the index (docs/query-plans.md); the other filters, each
-- optional (NULL: any), only filter rows. created_from is inclusive,
-- created_to exclusive; number_prefix matches the number's start.

-- name: SalesOrderListPage :many
-- SalesOrderListPage reads sales_orders_pkey backward.
SELECT s.* FROM sales_orders s
WHERE s.id < @before_id
  AND (sqlc.narg(number_prefix)::text IS NULL OR starts_with(s.number, sqlc.narg(number_prefix)::text))
  AND (sqlc.narg(source)::text IS NULL OR s.source = sqlc.narg(source)::text)
  AND (sqlc.narg(created_from)::timestamptz IS NULL OR s.created_at >= sqlc.narg(created_from)::timestamptz)
  AND (sqlc.narg(created_to)::timestamptz IS NULL OR s.created_at < sqlc.narg(created_to)::timestamptz)
ORDER BY s.id DESC
LIMIT @max_rows;

-- name: SalesOrderListPageByStatus :many
-- SalesOrderListPageByStatus reads sales_orders_status backward once per
-- status asked for (each at most max_rows rows) and merges them.
SELECT s.* FROM unnest(@statuses::text[]) AS st(status)
CROSS JOIN LATERAL (
    SELECT o.* FROM sales_orders o
    WHERE o.status >= st.status AND o.status <= st.status AND o.id < @before_id
      AND (sqlc.narg(number_prefix)::text IS NULL OR starts_with(o.number, sqlc.narg(number_prefix)::text))
      AND (sqlc.narg(source)::text IS NULL OR o.source = sqlc.narg(source)::text)
      AND (sqlc.narg(created_from)::timestamptz IS NULL OR o.created_at >= sqlc.narg(created_from)::timestamptz)
      AND (sqlc.narg(created_to)::timestamptz IS NULL OR o.created_at < sqlc.narg(created_to)::timestamptz)
    -- The status as a range, not an equality, and first in ORDER BY: only
    -- sales_orders_status gives that order, so a generic plan (which
    -- takes every status for a third of the orders) cannot prefer the
    -- primary key, whose scan reads ~100 rows per row of a rare status.
    ORDER BY o.status DESC, o.id DESC
    LIMIT @max_rows
) s
ORDER BY s.id DESC
LIMIT @max_rows;

-- name: SalesOrderListPageByCustomer :many
-- SalesOrderListPageByCustomer reads sales_orders_customer backward.
SELECT s.* FROM sales_orders s
WHERE s.customer = @customer AND s.id < @before_id
  AND (sqlc.narg(statuses)::text[] IS NULL OR s.status = ANY (sqlc.narg(statuses)::text[]))
  AND (sqlc.narg(number_prefix)::text IS NULL OR starts_with(s.number, sqlc.narg(number_prefix)::text))
  AND (sqlc.narg(source)::text IS NULL OR s.source = sqlc.narg(source)::text)
  AND (sqlc.narg(created_from)::timestamptz IS NULL OR s.created_at >= sqlc.narg(created_from)::timestamptz)
  AND (sqlc.narg(created_to)::timestamptz IS NULL OR s.created_at < sqlc.narg(created_to)::timestamptz)
ORDER BY s.id DESC
LIMIT @max_rows;

-- name: SalesOrderListPageBySKU :many
-- SalesOrderListPageBySKU reads sales_order_lines_item backward from the
-- item's lines, each order once (at its first line of the item), and
-- looks each order up by its primary key. The order's optional filters
-- sit in a LATERAL subquery that OFFSET 0 keeps from being flattened:
-- in the generic plan, catch-all filters on the joined orders are
-- estimated to keep almost no row, and the planner then scanned every
-- order to join it to the item's lines. The first-line test is a scalar
-- subquery, read per row through the lines' primary key, because as NOT
-- EXISTS the planner makes it an anti-join that hashes every line of the
-- item first.
SELECT s.* FROM sales_order_lines l
CROSS JOIN LATERAL (
    SELECT o.* FROM sales_orders o
    WHERE o.id = l.sales_order_id
      AND (sqlc.narg(statuses)::text[] IS NULL OR o.status = ANY (sqlc.narg(statuses)::text[]))
      AND (sqlc.narg(customer)::text IS NULL OR o.customer = sqlc.narg(customer)::text)
      AND (sqlc.narg(number_prefix)::text IS NULL OR starts_with(o.number, sqlc.narg(number_prefix)::text))
      AND (sqlc.narg(source)::text IS NULL OR o.source = sqlc.narg(source)::text)
      AND (sqlc.narg(created_from)::timestamptz IS NULL OR o.created_at >= sqlc.narg(created_from)::timestamptz)
      AND (sqlc.narg(created_to)::timestamptz IS NULL OR o.created_at < sqlc.narg(created_to)::timestamptz)
    OFFSET 0
) s
WHERE l.item_id = (SELECT i.id FROM items i WHERE i.sku = @sku) AND l.sales_order_id < @before_id
  AND l.line_no = (SELECT min(e.line_no) FROM sales_order_lines e
                   WHERE e.sales_order_id = l.sales_order_id AND e.item_id = l.item_id)
ORDER BY l.sales_order_id DESC
LIMIT @max_rows;

-- name: SalesOrderLineListByOrders :many
-- SalesOrderLineListByOrders returns the lines of the sales orders ids,
-- by order and line number: one query for a page of orders.
SELECT l.sales_order_id, l.line_no, i.sku, i.name AS item_name, i.unit, l.quantity, l.price
FROM sales_order_lines l JOIN items i ON i.id = l.item_id
WHERE l.sales_order_id = ANY (@ids::bigint[])
ORDER BY l.sales_order_id, l.line_no;

-- name: SalesOrderGetIDByNumber :one
SELECT id FROM sales_orders WHERE number = @number;

-- name: SalesOrderLineSumByItem :many
-- SalesOrderLineSumByItem sums the ordered quantity of sales order
-- sales_order_id per item.
SELECT item_id, sum(quantity)::numeric AS quantity
FROM sales_order_lines WHERE sales_order_id = @sales_order_id
GROUP BY item_id;

-- name: SalesOrderLockMany :many
-- SalesOrderLockMany is SalesOrderLockStatus for the orders ids at once,
-- locked in id order (the lock order); an unknown id returns no row.
SELECT id, number, status, version FROM sales_orders
WHERE id = ANY(@ids::bigint[]) ORDER BY id FOR NO KEY UPDATE;

-- name: SalesOrderAcceptMany :many
-- SalesOrderAcceptMany moves the orders of ids, locked by
-- SalesOrderLockMany, that are new to accepted, bumping their version,
-- and journals doc.status_changed by the system for each, in the order of
-- ids (db.AcceptSalesOrders); it returns the events as EventInsert does.
WITH moved AS (
    UPDATE sales_orders s SET status = 'accepted', version = s.version + 1
    FROM unnest(@ids::bigint[]) WITH ORDINALITY AS t(id, ord)
    WHERE s.id = t.id AND s.status = 'new'
    RETURNING s.id, s.number, t.ord
), e AS (
    INSERT INTO events (type, entity, entity_id, payload, trace_parent, dispatch_job_id)
    SELECT 'doc.status_changed', 'sales_orders', m.id,
        jsonb_build_object('id', m.id, 'no', m.number, 'entity', 'sales_order', 'from', 'new', 'to', 'accepted'),
        sqlc.narg(trace_parent)::text, nextval('river_job_id_seq')
    FROM moved m ORDER BY m.ord
    RETURNING *
)
SELECT e.*, u.login AS actor_login, u.display_name AS actor_name, u.role AS actor_role
FROM e LEFT JOIN users u ON u.id = e.actor_id
ORDER BY e.id;

-- name: SalesOrderLineListToPlanMany :many
-- SalesOrderLineListToPlanMany is SalesOrderLineListToPlan for the orders
-- sales_order_ids at once, in order and line order.
SELECT l.sales_order_id, l.line_no, l.item_id, l.quantity FROM sales_order_lines l
WHERE l.sales_order_id = ANY(@sales_order_ids::bigint[])
  AND EXISTS (SELECT 1 FROM item_components c WHERE c.item_id = l.item_id)
  AND NOT EXISTS (SELECT 1 FROM plan_prod_orders p
                  WHERE p.sales_order_id = l.sales_order_id AND p.sales_order_line_no = l.line_no)
ORDER BY l.sales_order_id, l.line_no;
