-- name: ItemInsert :one
INSERT INTO items (sku, name, unit) VALUES (@sku, @name, @unit)
RETURNING *;

-- name: ItemList :many
SELECT * FROM items ORDER BY sku;

-- name: ItemGetBySKU :one
SELECT * FROM items WHERE sku = @sku;

-- name: ItemListIDsBySKU :many
-- ItemListIDsBySKU returns the id of each known SKU of skus, in no order;
-- unknown SKUs are left out.
SELECT sku, id FROM items WHERE sku = ANY(@skus::text[]);
