-- +goose Up
-- The ERP backbone: master data, documents, number series and the event
-- journal (the transactional outbox). Table names follow the old system's
-- "Объект" column.

CREATE TABLE users (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    login        text NOT NULL UNIQUE CHECK (login ~ '^[a-z0-9._-]{1,64}$'),
    display_name text NOT NULL CHECK (display_name <> ''),
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- API tokens are stored as SHA-256 hashes; the token itself is shown once.
CREATE TABLE api_tokens (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id      bigint NOT NULL REFERENCES users (id),
    token_hash   bytea NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz,
    revoked_at   timestamptz,
    last_used_at timestamptz
);

CREATE TABLE items (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sku        text NOT NULL UNIQUE CHECK (sku <> ''),
    name       text NOT NULL CHECK (name <> ''),
    unit       text NOT NULL CHECK (unit <> ''),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE warehouses (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    code       text NOT NULL UNIQUE CHECK (code <> ''),
    name       text NOT NULL CHECK (name <> ''),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- One gapless series per document prefix and year. A number is taken by
-- incrementing last_value inside the document's transaction: the row lock
-- holds other writers until commit, and a rollback gives the number back.
CREATE TABLE number_series (
    prefix     text NOT NULL CHECK (prefix <> ''),
    year       integer NOT NULL CHECK (year BETWEEN 2000 AND 9999),
    last_value bigint NOT NULL CHECK (last_value BETWEEN 0 AND 999999),
    PRIMARY KEY (prefix, year)
);

CREATE TABLE sales_orders (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    number      text NOT NULL UNIQUE,
    customer    text NOT NULL CHECK (customer <> ''),
    status      text NOT NULL DEFAULT 'new' CHECK (status IN ('new', 'accepted')),
    source      text NOT NULL DEFAULT 'manual' CHECK (source IN ('manual', 'shop', 'crm')),
    -- sync_id for the shop, crm_order_id for the CRM; unique per source so a
    -- repeated delivery of the same order hits the constraint, not a race.
    external_id text,
    created_by  bigint REFERENCES users (id),
    created_at  timestamptz NOT NULL DEFAULT now(),
    CHECK ((source = 'manual') = (external_id IS NULL)),
    CHECK (source <> 'crm' OR external_id ~ '^[0-9]{1,18}$'),
    UNIQUE (source, external_id)
);

CREATE TABLE sales_order_lines (
    sales_order_id bigint NOT NULL REFERENCES sales_orders (id),
    line_no        integer NOT NULL CHECK (line_no > 0),
    item_id        bigint NOT NULL REFERENCES items (id),
    quantity       numeric(18, 3) NOT NULL CHECK (quantity > 0),
    price          numeric(18, 2) CHECK (price >= 0),
    PRIMARY KEY (sales_order_id, line_no)
);

CREATE TABLE plan_prod_orders (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    number         text NOT NULL UNIQUE,
    item_id        bigint NOT NULL REFERENCES items (id),
    quantity       numeric(18, 3) NOT NULL CHECK (quantity > 0),
    sales_order_id bigint REFERENCES sales_orders (id),
    status         text NOT NULL DEFAULT 'planned' CHECK (status IN ('planned')),
    created_by     bigint REFERENCES users (id),
    created_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE wh_purchase_orders (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    number     text NOT NULL UNIQUE,
    supplier   text NOT NULL CHECK (supplier <> ''),
    status     text NOT NULL DEFAULT 'open' CHECK (status IN ('open')),
    created_by bigint REFERENCES users (id),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE wh_purchase_order_lines (
    purchase_order_id bigint NOT NULL REFERENCES wh_purchase_orders (id),
    line_no           integer NOT NULL CHECK (line_no > 0),
    item_id           bigint NOT NULL REFERENCES items (id),
    quantity          numeric(18, 3) NOT NULL CHECK (quantity > 0),
    price             numeric(18, 2) CHECK (price >= 0),
    PRIMARY KEY (purchase_order_id, line_no)
);

CREATE TABLE wh_moves (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    number            text NOT NULL UNIQUE,
    kind              text NOT NULL CHECK (kind IN ('receipt', 'issue_to_production')),
    from_warehouse_id bigint REFERENCES warehouses (id),
    to_warehouse_id   bigint REFERENCES warehouses (id),
    purchase_order_id bigint REFERENCES wh_purchase_orders (id),
    prod_order_id     bigint REFERENCES plan_prod_orders (id),
    status            text NOT NULL DEFAULT 'posted' CHECK (status IN ('posted')),
    created_by        bigint REFERENCES users (id),
    created_at        timestamptz NOT NULL DEFAULT now(),
    CHECK (kind <> 'receipt' OR to_warehouse_id IS NOT NULL),
    CHECK (kind <> 'issue_to_production' OR from_warehouse_id IS NOT NULL),
    CHECK (purchase_order_id IS NULL OR kind = 'receipt'),
    CHECK (prod_order_id IS NULL OR kind = 'issue_to_production')
);

CREATE TABLE wh_move_lines (
    move_id  bigint NOT NULL REFERENCES wh_moves (id),
    line_no  integer NOT NULL CHECK (line_no > 0),
    item_id  bigint NOT NULL REFERENCES items (id),
    quantity numeric(18, 3) NOT NULL CHECK (quantity > 0),
    price    numeric(18, 2) CHECK (price >= 0),
    PRIMARY KEY (move_id, line_no)
);

-- The journal. Written in the same transaction as the document (outbox);
-- never deleted. Both times come from the database clock. feed_seq orders
-- processed events in commit order of their processing (see feed_counter).
CREATE TABLE events (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    type         text NOT NULL CHECK (type ~ '^[a-z_]+\.[a-z_]+$'),
    entity       text NOT NULL CHECK (entity IN ('sales_orders', 'plan_prod_orders', 'wh_moves', 'wh_purchase_orders')),
    entity_id    bigint NOT NULL,
    payload      jsonb NOT NULL CHECK (jsonb_typeof(payload) = 'object'),
    actor_id     bigint REFERENCES users (id),
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    processed_at timestamptz,
    feed_seq     bigint UNIQUE,
    CHECK (processed_at >= created_at),
    CHECK ((processed_at IS NULL) = (feed_seq IS NULL))
);

CREATE INDEX events_unprocessed ON events (id) WHERE processed_at IS NULL;
CREATE INDEX events_type ON events (type, id);
CREATE INDEX events_entity ON events (entity, entity_id, id);

-- A single-row counter taken (row-locked) at the end of each dispatch
-- transaction: processing commits are serialised here, so feed_seq values
-- become visible in increasing order and a cursor over them never skips an
-- event that commits later with a smaller value.
CREATE TABLE feed_counter (
    id       boolean PRIMARY KEY DEFAULT true CHECK (id),
    last_seq bigint NOT NULL
);
INSERT INTO feed_counter (last_seq) VALUES (0);

-- +goose Down
DROP TABLE feed_counter, events, wh_move_lines, wh_moves, wh_purchase_order_lines,
    wh_purchase_orders, plan_prod_orders, sales_order_lines, sales_orders,
    number_series, warehouses, items, api_tokens, users;
