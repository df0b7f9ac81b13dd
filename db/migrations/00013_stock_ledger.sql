-- +goose Up
-- Stock: posting a warehouse move writes one stock_ledger row per line and
-- warehouse it touches (signed: + into to_warehouse, - out of
-- from_warehouse; a reversal negates its original) and updates
-- stock_balances in the same transaction. Posted moves are never edited or
-- deleted: a mistake is undone by a reversal move (reversal_of_id), so the
-- ledger is append-only and its sum per item and warehouse is on_hand.
ALTER TABLE wh_moves
    ADD COLUMN sales_order_id bigint REFERENCES sales_orders (id),
    ADD COLUMN reversal_of_id bigint REFERENCES wh_moves (id),
    ADD CONSTRAINT wh_moves_reversal_of_id_key UNIQUE (reversal_of_id),
    DROP CONSTRAINT wh_moves_kind_check,
    ADD CONSTRAINT wh_moves_kind_check CHECK (kind IN ('receipt', 'issue_to_production', 'shipment')),
    ADD CONSTRAINT wh_moves_shipment_check
        CHECK (kind <> 'shipment' OR (from_warehouse_id IS NOT NULL AND sales_order_id IS NOT NULL)),
    ADD CONSTRAINT wh_moves_sales_order_check CHECK (sales_order_id IS NULL OR kind = 'shipment'),
    -- A receipt may now come from production (completeProductionOrder).
    DROP CONSTRAINT wh_moves_check3,
    ADD CONSTRAINT wh_moves_prod_order_check
        CHECK (prod_order_id IS NULL OR kind IN ('issue_to_production', 'receipt')),
    ADD CONSTRAINT wh_moves_receipt_source_check
        CHECK (purchase_order_id IS NULL OR prod_order_id IS NULL);

CREATE INDEX wh_moves_sales_order_id ON wh_moves (sales_order_id) WHERE sales_order_id IS NOT NULL;
CREATE INDEX wh_moves_purchase_order_id ON wh_moves (purchase_order_id) WHERE purchase_order_id IS NOT NULL;

-- On hand per item and warehouse. Posting locks the rows it changes in
-- (item_id, warehouse_id) order, so two moves over the same items wait
-- for each other instead of deadlocking.
CREATE TABLE stock_balances (
    item_id      bigint NOT NULL REFERENCES items (id),
    warehouse_id bigint NOT NULL REFERENCES warehouses (id),
    on_hand      numeric(18, 3) NOT NULL DEFAULT 0 CHECK (on_hand >= 0),
    PRIMARY KEY (item_id, warehouse_id)
);

-- id orders the ledger: rows of one item and warehouse are written under
-- that balance row's lock, so id order is posting order and balance_after
-- follows it.
CREATE TABLE stock_ledger (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    move_id       bigint NOT NULL,
    line_no       integer NOT NULL,
    item_id       bigint NOT NULL REFERENCES items (id),
    warehouse_id  bigint NOT NULL REFERENCES warehouses (id),
    quantity      numeric(18, 3) NOT NULL CHECK (quantity <> 0),
    balance_after numeric(18, 3) NOT NULL CHECK (balance_after >= 0),
    at            timestamptz NOT NULL DEFAULT clock_timestamp(),
    FOREIGN KEY (move_id, line_no) REFERENCES wh_move_lines (move_id, line_no),
    UNIQUE (move_id, line_no, warehouse_id)
);

CREATE INDEX stock_ledger_item_warehouse ON stock_ledger (item_id, warehouse_id, id);
CREATE INDEX stock_ledger_item ON stock_ledger (item_id, id);

-- +goose Down
DROP TABLE stock_ledger, stock_balances;
DROP INDEX wh_moves_purchase_order_id, wh_moves_sales_order_id;
ALTER TABLE wh_moves
    DROP CONSTRAINT wh_moves_receipt_source_check,
    DROP CONSTRAINT wh_moves_prod_order_check,
    ADD CONSTRAINT wh_moves_check3 CHECK (prod_order_id IS NULL OR kind = 'issue_to_production'),
    DROP CONSTRAINT wh_moves_sales_order_check,
    DROP CONSTRAINT wh_moves_shipment_check,
    DROP CONSTRAINT wh_moves_kind_check,
    ADD CONSTRAINT wh_moves_kind_check CHECK (kind IN ('receipt', 'issue_to_production')),
    DROP COLUMN reversal_of_id,
    DROP COLUMN sales_order_id;
