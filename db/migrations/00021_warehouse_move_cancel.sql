-- +goose Up
-- A draft move can be discarded: draft → cancelled (cancelWarehouseMove).
ALTER TABLE wh_moves DROP CONSTRAINT wh_moves_status_check,
    ADD CONSTRAINT wh_moves_status_check CHECK (status IN ('draft', 'posted', 'reversed', 'cancelled'));

-- +goose Down
ALTER TABLE wh_moves DROP CONSTRAINT wh_moves_status_check,
    ADD CONSTRAINT wh_moves_status_check CHECK (status IN ('draft', 'posted', 'reversed'));
