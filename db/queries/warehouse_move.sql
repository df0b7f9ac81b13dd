-- name: WarehouseMoveInsert :one
INSERT INTO wh_moves (number, kind, from_warehouse_id, to_warehouse_id, purchase_order_id, prod_order_id, source_event_id,
    created_by, status, sales_order_id, reversal_of_id)
VALUES (@number, @kind, sqlc.narg(from_warehouse_id), sqlc.narg(to_warehouse_id), sqlc.narg(purchase_order_id),
    sqlc.narg(prod_order_id), sqlc.narg(source_event_id), sqlc.narg(created_by), @status, sqlc.narg(sales_order_id),
    sqlc.narg(reversal_of_id))
RETURNING id;

-- name: WarehouseMoveGetByID :one
-- WarehouseMoveGetByID returns move id with its warehouses by code.
SELECT m.id, m.number, m.kind, wf.code AS from_warehouse, wt.code AS to_warehouse,
    m.purchase_order_id, m.prod_order_id, m.source_event_id, m.status, m.created_at, m.version,
    m.sales_order_id, m.reversal_of_id
FROM wh_moves m
LEFT JOIN warehouses wf ON wf.id = m.from_warehouse_id
LEFT JOIN warehouses wt ON wt.id = m.to_warehouse_id
WHERE m.id = @id;

-- name: WarehouseMoveListByIDs :many
-- WarehouseMoveListByIDs returns the moves ids (any order) as
-- WarehouseMoveGetByID does: one query for a page's moves.
SELECT m.id, m.number, m.kind, wf.code AS from_warehouse, wt.code AS to_warehouse,
    m.purchase_order_id, m.prod_order_id, m.source_event_id, m.status, m.created_at, m.version,
    m.sales_order_id, m.reversal_of_id
FROM wh_moves m
LEFT JOIN warehouses wf ON wf.id = m.from_warehouse_id
LEFT JOIN warehouses wt ON wt.id = m.to_warehouse_id
WHERE m.id = ANY (@ids::bigint[]);

-- name: WarehouseMoveGetIDBySourceEvent :one
-- WarehouseMoveGetIDBySourceEvent returns the move that answers journal
-- event source_event_id (no row when none does).
SELECT id FROM wh_moves WHERE source_event_id = @source_event_id;

-- name: WarehouseMoveListSourceEvents :many
-- WarehouseMoveListSourceEvents returns which of the journal events
-- source_event_ids a move answers.
SELECT source_event_id FROM wh_moves WHERE source_event_id = ANY(@source_event_ids::bigint[]);

-- name: WarehouseMoveIssueMany :many
-- WarehouseMoveIssueMany writes one draft issue to production from
-- warehouse from_warehouse_id per element of numbers (pending),
-- prod_order_ids and source_event_ids (same length), with the lines given
-- by the line_* arrays (each line names its move by source event), and
-- journals doc.created by the system for each move (db.IssueMaterialsMany).
-- The moves are inserted, and so take their ids and numbers, in the order
-- of the arrays, and their events in the order of the moves; it returns
-- the events as EventInsert does, in id order.
WITH mv AS (
    INSERT INTO wh_moves (number, kind, status, from_warehouse_id, prod_order_id, source_event_id)
    SELECT t.number, @kind, @status, @from_warehouse_id, t.prod_order_id, t.source_event_id
    FROM ROWS FROM (unnest(@numbers::text[]), unnest(@prod_order_ids::bigint[]), unnest(@source_event_ids::bigint[]))
        WITH ORDINALITY AS t(number, prod_order_id, source_event_id, ord)
    ORDER BY t.ord
    RETURNING id, source_event_id
), ln AS (
    INSERT INTO wh_move_lines (move_id, line_no, item_id, quantity)
    SELECT mv.id, l.line_no, l.item_id, l.quantity
    FROM ROWS FROM (unnest(@line_source_event_ids::bigint[]), unnest(@line_nos::int[]),
        unnest(@line_item_ids::bigint[]), unnest(@line_quantities::numeric[])) AS l(source_event_id, line_no, item_id, quantity)
    JOIN mv ON mv.source_event_id = l.source_event_id
), e AS (
    INSERT INTO events (type, entity, entity_id, payload, trace_parent, dispatch_job_id)
    SELECT 'doc.created', 'wh_moves', mv.id, jsonb_build_object('id', mv.id, 'entity', 'wh_move'),
        sqlc.narg(trace_parent)::text, nextval('river_job_id_seq')
    FROM mv ORDER BY mv.id
    RETURNING *
)
SELECT e.*, u.login AS actor_login, u.display_name AS actor_name, u.role AS actor_role
FROM e LEFT JOIN users u ON u.id = e.actor_id
ORDER BY e.id;

-- name: WarehouseMoveLineInsertMany :exec
-- WarehouseMoveLineInsertMany writes the lines of move move_id, one per
-- element of the arrays (same length), numbered from 1 in their order; a
-- price of '' is none.
INSERT INTO wh_move_lines (move_id, line_no, item_id, quantity, price)
SELECT @move_id, t.ord, t.item, t.qty, NULLIF(t.price, '')::numeric
FROM ROWS FROM (unnest(@item_ids::bigint[]), unnest(@quantities::numeric[]), unnest(@prices::text[]))
    WITH ORDINALITY AS t(item, qty, price, ord);

-- name: WarehouseMoveLineList :many
SELECT l.line_no, i.sku, i.name AS item_name, i.unit, l.quantity, l.price
FROM wh_move_lines l JOIN items i ON i.id = l.item_id
WHERE l.move_id = @move_id
ORDER BY l.line_no;

-- name: WarehouseMoveLockStatus :one
-- WarehouseMoveLockStatus returns the number, status and version of move
-- id, locked until the transaction ends (db.Transition).
SELECT number, status, version FROM wh_moves WHERE id = @id FOR NO KEY UPDATE;

-- name: WarehouseMoveSetStatus :one
-- WarehouseMoveSetStatus sets the status of move id, locked by
-- WarehouseMoveLockStatus, and bumps its version; returns the new version.
UPDATE wh_moves SET status = @status, version = version + 1 WHERE id = @id RETURNING version;

-- name: WarehouseMoveGetIDByNumber :one
SELECT id FROM wh_moves WHERE number = @number;

-- The warehouse move list, newest first, a keyset page as the sales order
-- list's (db/queries/sales_order.sql); warehouse is the code of the
-- warehouse the goods leave or arrive at.

-- name: WarehouseMoveListPage :many
-- WarehouseMoveListPage reads wh_moves_pkey backward.
SELECT m.id, m.number, m.kind, wf.code AS from_warehouse, wt.code AS to_warehouse,
    m.purchase_order_id, m.prod_order_id, m.source_event_id, m.status, m.created_at, m.version,
    m.sales_order_id, m.reversal_of_id
FROM wh_moves m
LEFT JOIN warehouses wf ON wf.id = m.from_warehouse_id
LEFT JOIN warehouses wt ON wt.id = m.to_warehouse_id
WHERE m.id < @before_id
  AND (sqlc.narg(statuses)::text[] IS NULL OR m.status = ANY (sqlc.narg(statuses)::text[]))
  AND (sqlc.narg(kinds)::text[] IS NULL OR m.kind = ANY (sqlc.narg(kinds)::text[]))
  AND (sqlc.narg(warehouse)::text IS NULL OR wf.code = sqlc.narg(warehouse)::text OR wt.code = sqlc.narg(warehouse)::text)
  AND (sqlc.narg(number_prefix)::text IS NULL OR starts_with(m.number, sqlc.narg(number_prefix)::text))
  AND (sqlc.narg(sku)::text IS NULL OR EXISTS (SELECT 1 FROM wh_move_lines l JOIN items i ON i.id = l.item_id
       WHERE l.move_id = m.id AND i.sku = sqlc.narg(sku)::text))
  AND (sqlc.narg(created_from)::timestamptz IS NULL OR m.created_at >= sqlc.narg(created_from)::timestamptz)
  AND (sqlc.narg(created_to)::timestamptz IS NULL OR m.created_at < sqlc.narg(created_to)::timestamptz)
ORDER BY m.id DESC
LIMIT @max_rows;

-- name: WarehouseMoveLineListByMoves :many
SELECT l.move_id, l.line_no, i.sku, i.name AS item_name, i.unit, l.quantity, l.price
FROM wh_move_lines l JOIN items i ON i.id = l.item_id
WHERE l.move_id = ANY (@ids::bigint[])
ORDER BY l.move_id, l.line_no;

-- name: WarehouseMoveLineListToPost :many
-- WarehouseMoveLineListToPost returns the lines of move move_id with what
-- posting needs: item and warehouse ids for the ledger, SKU, unit and
-- warehouse codes for error messages.
SELECT l.line_no, l.item_id, i.sku, i.unit, l.quantity, l.price,
    m.from_warehouse_id, wf.code AS from_warehouse, m.to_warehouse_id, wt.code AS to_warehouse
FROM wh_move_lines l
JOIN wh_moves m ON m.id = l.move_id
JOIN items i ON i.id = l.item_id
LEFT JOIN warehouses wf ON wf.id = m.from_warehouse_id
LEFT JOIN warehouses wt ON wt.id = m.to_warehouse_id
WHERE l.move_id = @move_id
ORDER BY l.line_no;

-- name: WarehouseMoveShippedBySalesOrder :many
-- WarehouseMoveShippedBySalesOrder sums, per item, what the posted
-- shipments of sales order sales_order_id took (reversed shipments and
-- reversals left out), except move except_move_id (the one being posted).
SELECT l.item_id, sum(l.quantity)::numeric AS quantity
FROM wh_moves m JOIN wh_move_lines l ON l.move_id = m.id
WHERE m.sales_order_id = @sales_order_id AND m.kind = 'shipment' AND m.status = 'posted'
    AND m.reversal_of_id IS NULL AND m.id <> @except_move_id
GROUP BY l.item_id;

-- name: WarehouseMoveReceivedByPurchaseOrder :many
-- WarehouseMoveReceivedByPurchaseOrder sums, per item, what the posted
-- receipts of purchase order purchase_order_id brought (reversed receipts
-- and reversals left out), but for move except_move_id (0: none).
SELECT l.item_id, sum(l.quantity)::numeric AS quantity
FROM wh_moves m JOIN wh_move_lines l ON l.move_id = m.id
WHERE m.purchase_order_id = @purchase_order_id AND m.kind = 'receipt' AND m.status = 'posted'
    AND m.reversal_of_id IS NULL AND m.id <> @except_move_id
GROUP BY l.item_id;

-- name: WarehouseMoveListDraftIssueIDs :many
-- WarehouseMoveListDraftIssueIDs returns the ids of the draft material
-- issues of production order prod_order_id, or of the production orders
-- of sales order sales_order_id, in id order (the order a cancellation
-- locks them in).
SELECT m.id FROM wh_moves m JOIN plan_prod_orders p ON p.id = m.prod_order_id
WHERE m.kind = 'issue_to_production' AND m.status = 'draft'
  AND (p.id = sqlc.narg('prod_order_id')::bigint OR p.sales_order_id = sqlc.narg('sales_order_id')::bigint)
ORDER BY m.id;
