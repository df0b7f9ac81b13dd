-- name: StockBalanceEnsure :exec
-- StockBalanceEnsure creates the missing balance rows (on hand 0) of the
-- (item, warehouse) pairs, in (item_id, warehouse_id) order so that two
-- postings waiting on each other's new rows wait in one order.
INSERT INTO stock_balances (item_id, warehouse_id)
SELECT t.item, t.warehouse
FROM ROWS FROM (unnest(@item_ids::bigint[]), unnest(@warehouse_ids::bigint[])) AS t(item, warehouse)
ORDER BY t.item, t.warehouse
ON CONFLICT (item_id, warehouse_id) DO NOTHING;

-- name: StockBalanceLock :many
-- StockBalanceLock locks the balance rows of the (item, warehouse) pairs
-- until the transaction ends, in (item_id, warehouse_id) order: every
-- posting takes them in that one order, so none deadlocks another.
SELECT b.item_id, b.warehouse_id, b.on_hand
FROM stock_balances b
JOIN ROWS FROM (unnest(@item_ids::bigint[]), unnest(@warehouse_ids::bigint[])) AS t(item, warehouse)
    ON b.item_id = t.item AND b.warehouse_id = t.warehouse
ORDER BY b.item_id, b.warehouse_id
FOR UPDATE OF b;

-- name: StockBalanceSetMany :exec
-- StockBalanceSetMany sets on hand of the (item, warehouse) pairs, locked
-- by StockBalanceLock.
UPDATE stock_balances b SET on_hand = t.on_hand
FROM ROWS FROM (unnest(@item_ids::bigint[]), unnest(@warehouse_ids::bigint[]), unnest(@on_hands::numeric[]))
    AS t(item, warehouse, on_hand)
WHERE b.item_id = t.item AND b.warehouse_id = t.warehouse;

-- name: StockLedgerInsertMany :exec
-- StockLedgerInsertMany appends the ledger rows of move move_id, one per
-- element of the arrays (same length), in their order.
INSERT INTO stock_ledger (move_id, line_no, item_id, warehouse_id, quantity, balance_after)
SELECT @move_id, t.line_no, t.item, t.warehouse, t.qty, t.balance_after
FROM ROWS FROM (unnest(@line_nos::int[]), unnest(@item_ids::bigint[]), unnest(@warehouse_ids::bigint[]),
    unnest(@quantities::numeric[]), unnest(@balances_after::numeric[]))
    WITH ORDINALITY AS t(line_no, item, warehouse, qty, balance_after, ord)
ORDER BY t.ord;

-- name: StockBalanceListPage :many
-- StockBalanceListPage returns up to max_rows balances by SKU, then
-- warehouse code, after the pair (after_sku, after_warehouse) ('' and ''
-- for the first page); sku and warehouse filter when not null.
SELECT i.sku, i.name AS item_name, i.unit, w.code AS warehouse, b.on_hand
FROM stock_balances b
JOIN items i ON i.id = b.item_id
JOIN warehouses w ON w.id = b.warehouse_id
WHERE (i.sku, w.code) > (@after_sku::text, @after_warehouse::text)
    AND (sqlc.narg(sku)::text IS NULL OR i.sku = sqlc.narg(sku))
    AND (sqlc.narg(warehouse)::text IS NULL OR w.code = sqlc.narg(warehouse))
ORDER BY i.sku, w.code
LIMIT @max_rows;

-- name: StockLedgerListPage :many
-- StockLedgerListPage returns up to max_rows ledger rows of item item_id,
-- in posting order (id), after id after_id; warehouse_id filters when not
-- null.
SELECT l.id, l.move_id, l.line_no, w.code AS warehouse, l.quantity, l.balance_after, l.at
FROM stock_ledger l
JOIN warehouses w ON w.id = l.warehouse_id
WHERE l.item_id = @item_id AND l.id > @after_id
    AND (sqlc.narg(warehouse_id)::bigint IS NULL OR l.warehouse_id = sqlc.narg(warehouse_id))
ORDER BY l.id
LIMIT @max_rows;
