-- +goose Up
-- Production planning: bills of materials, the warehouse that supplies the
-- shop floor, and the keys that make the planning chain's automatic
-- documents idempotent (order.received → ПЗ, ПЗ doc.created → ВЦ).

-- Bill of materials: quantity of the component per one unit of the item,
-- in the component's unit; line_no keeps the order the list was given in.
-- An item with rows here is made in-house.
CREATE TABLE item_components (
    item_id           bigint NOT NULL REFERENCES items (id),
    component_item_id bigint NOT NULL REFERENCES items (id),
    line_no           integer NOT NULL CHECK (line_no > 0),
    quantity          numeric(18, 3) NOT NULL CHECK (quantity > 0),
    PRIMARY KEY (item_id, component_item_id),
    UNIQUE (item_id, line_no),
    CHECK (item_id <> component_item_id)
);

CREATE INDEX item_components_component ON item_components (component_item_id);

-- The warehouse materials are issued from to production (ВЦ); at most one.
ALTER TABLE warehouses ADD COLUMN supplies_production boolean NOT NULL DEFAULT false;
CREATE UNIQUE INDEX warehouses_supplies_production ON warehouses (supplies_production) WHERE supplies_production;

-- The sales order line a production order was planned for: a line is
-- planned at most once. Manual production orders leave it null.
ALTER TABLE plan_prod_orders ADD COLUMN sales_order_line_no integer;
ALTER TABLE plan_prod_orders
    ADD CONSTRAINT plan_prod_orders_line_needs_order CHECK (sales_order_line_no IS NULL OR sales_order_id IS NOT NULL),
    ADD CONSTRAINT plan_prod_orders_sales_order_line_fkey FOREIGN KEY (sales_order_id, sales_order_line_no)
        REFERENCES sales_order_lines (sales_order_id, line_no),
    ADD CONSTRAINT plan_prod_orders_sales_order_line_key UNIQUE (sales_order_id, sales_order_line_no);

-- The journal event an automatic move answers (the doc.created of the
-- production order whose materials it issues): one move per event, so a
-- redelivery finds the move instead of making another.
ALTER TABLE wh_moves ADD COLUMN source_event_id bigint;
ALTER TABLE wh_moves
    ADD CONSTRAINT wh_moves_source_event_id_fkey FOREIGN KEY (source_event_id) REFERENCES events (id),
    ADD CONSTRAINT wh_moves_source_event_id_key UNIQUE (source_event_id);

-- +goose Down
ALTER TABLE wh_moves DROP COLUMN source_event_id;
ALTER TABLE plan_prod_orders DROP COLUMN sales_order_line_no;
DROP INDEX warehouses_supplies_production;
ALTER TABLE warehouses DROP COLUMN supplies_production;
DROP TABLE item_components;
