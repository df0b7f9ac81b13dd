-- name: ItemComponentLock :exec
-- ItemComponentLock serialises edits of bills of materials (readers are not
-- blocked), so two concurrent edits cannot build a cycle.
LOCK TABLE item_components IN SHARE ROW EXCLUSIVE MODE;

-- name: ItemComponentFindCycle :one
-- ItemComponentFindCycle returns the first of component_ids from which
-- item_id is reachable through the bills of materials as they stand, the
-- item's own bill left out (it is being replaced); no row when adding them
-- closes no cycle.
WITH RECURSIVE reach (id, root) AS (
    SELECT c, c FROM unnest(@component_ids::bigint[]) AS c
    UNION
    SELECT ic.component_item_id, r.root
    FROM item_components ic JOIN reach r ON ic.item_id = r.id
    WHERE ic.item_id <> @item_id::bigint
)
SELECT root::bigint FROM reach WHERE id = @item_id::bigint LIMIT 1;

-- name: ItemComponentDeleteByItem :exec
DELETE FROM item_components WHERE item_id = @item_id;

-- name: ItemComponentInsertMany :exec
-- ItemComponentInsertMany writes the bill of materials of item_id, one row
-- per element of the arrays (same length), numbered from 1 in their order.
INSERT INTO item_components (item_id, component_item_id, line_no, quantity)
SELECT @item_id, t.component, t.ord, t.qty
FROM ROWS FROM (unnest(@component_ids::bigint[]), unnest(@quantities::numeric[]))
    WITH ORDINALITY AS t(component, qty, ord);

-- name: ItemComponentListByItem :many
-- ItemComponentListByItem returns the bill of materials of item_id in line
-- order, with each component item's SKU, name and unit.
SELECT c.line_no, c.component_item_id, i.sku, i.name, i.unit, c.quantity
FROM item_components c JOIN items i ON i.id = c.component_item_id
WHERE c.item_id = @item_id
ORDER BY c.line_no;

-- name: ItemComponentListByItems :many
-- ItemComponentListByItems is the bills of materials of the items
-- item_ids at once, by item and in line order.
SELECT item_id, component_item_id, quantity FROM item_components
WHERE item_id = ANY(@item_ids::bigint[])
ORDER BY item_id, line_no;
