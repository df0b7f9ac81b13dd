-- +goose Up
-- Documents live: every document has its full set of statuses and a
-- version for optimistic concurrency (1 at creation, +1 per transition).
-- A transition (db.Transition) locks the row, compares the version the
-- client saw and journals doc.status_changed in the same transaction.
-- Which transitions are allowed is Go's table (db/lifecycle.go); the
-- CHECKs keep the stored values within each document's statuses.
ALTER TABLE sales_orders
    ADD COLUMN version integer NOT NULL DEFAULT 1 CHECK (version > 0),
    DROP CONSTRAINT sales_orders_status_check,
    ADD CONSTRAINT sales_orders_status_check
        CHECK (status IN ('new', 'accepted', 'in_production', 'shipped', 'cancelled'));

ALTER TABLE plan_prod_orders
    ADD COLUMN version integer NOT NULL DEFAULT 1 CHECK (version > 0),
    DROP CONSTRAINT plan_prod_orders_status_check,
    ADD CONSTRAINT plan_prod_orders_status_check
        CHECK (status IN ('planned', 'released', 'completed', 'cancelled'));

ALTER TABLE wh_purchase_orders
    ADD COLUMN version integer NOT NULL DEFAULT 1 CHECK (version > 0),
    DROP CONSTRAINT wh_purchase_orders_status_check,
    ADD CONSTRAINT wh_purchase_orders_status_check
        CHECK (status IN ('open', 'partially_received', 'received', 'closed', 'cancelled'));

-- Moves are still created posted; drafts come with posting.
ALTER TABLE wh_moves
    ADD COLUMN version integer NOT NULL DEFAULT 1 CHECK (version > 0),
    DROP CONSTRAINT wh_moves_status_check,
    ADD CONSTRAINT wh_moves_status_check
        CHECK (status IN ('draft', 'posted', 'reversed'));

-- +goose Down
ALTER TABLE wh_moves DROP COLUMN version, DROP CONSTRAINT wh_moves_status_check,
    ADD CONSTRAINT wh_moves_status_check CHECK (status IN ('posted'));
ALTER TABLE wh_purchase_orders DROP COLUMN version, DROP CONSTRAINT wh_purchase_orders_status_check,
    ADD CONSTRAINT wh_purchase_orders_status_check CHECK (status IN ('open'));
ALTER TABLE plan_prod_orders DROP COLUMN version, DROP CONSTRAINT plan_prod_orders_status_check,
    ADD CONSTRAINT plan_prod_orders_status_check CHECK (status IN ('planned'));
ALTER TABLE sales_orders DROP COLUMN version, DROP CONSTRAINT sales_orders_status_check,
    ADD CONSTRAINT sales_orders_status_check CHECK (status IN ('new', 'accepted'));
