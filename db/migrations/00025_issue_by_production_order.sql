-- +goose Up
-- A production order's cancellation finds its draft material issues.
CREATE INDEX wh_moves_prod_order_id ON wh_moves (prod_order_id) WHERE prod_order_id IS NOT NULL;

-- +goose Down
DROP INDEX wh_moves_prod_order_id;
