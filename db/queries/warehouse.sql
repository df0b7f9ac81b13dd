-- name: WarehouseInsert :one
INSERT INTO warehouses (code, name, supplies_production)
VALUES (@code, @name, @supplies_production)
RETURNING *;

-- name: WarehouseList :many
SELECT * FROM warehouses ORDER BY code;

-- name: WarehouseGetIDByCode :one
SELECT id FROM warehouses WHERE code = @code;

-- name: WarehouseGetProductionID :one
-- WarehouseGetProductionID returns the warehouse that supplies production
-- (no row when none does).
SELECT id FROM warehouses WHERE supplies_production;

-- name: WarehouseClearProduction :exec
-- WarehouseClearProduction takes the production mark from every warehouse
-- but code. It is a statement of its own before WarehouseSetProduction
-- because a unique index is checked row by row, so moving the mark in one
-- UPDATE could see both rows marked.
UPDATE warehouses SET supplies_production = false
WHERE supplies_production AND code <> @code;

-- name: WarehouseSetProduction :one
UPDATE warehouses SET supplies_production = true WHERE code = @code
RETURNING *;
