-- +goose Up
-- A replay delivers again, to one webhook subscriber, the processed events
-- of a range that its filter takes. The range and the filter are fixed when
-- it starts: events whose feed sequence is in (after_seq, last_seq] (last_seq
-- the highest one committed then, so the set never grows) and whose
-- created_at is in [created_from, created_to), of the subscriber's types
-- and tables then; its condition is evaluated as the batches go.
CREATE TABLE replays (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subscriber_id bigint NOT NULL REFERENCES subscribers (id),
    status        text NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'done', 'cancelled', 'failed')),
    after_seq     bigint NOT NULL DEFAULT 0 CHECK (after_seq >= 0),
    last_seq      bigint NOT NULL,
    created_from  timestamptz,
    created_to    timestamptz,
    event_types   text[] NOT NULL,
    entities      text[] NOT NULL,
    condition     text,
    -- The id of the last event the batches went through (they go in id
    -- order); written: every batch is written, the cursor is at the end.
    cursor_id     bigint NOT NULL DEFAULT 0,
    written       boolean NOT NULL DEFAULT false,
    -- total: the events of the range whose type and table the filter takes,
    -- counted at start; done: those finished with (delivered, dead, or not
    -- taken by the condition); dead: the replayed deliveries that gave up.
    total         bigint NOT NULL CHECK (total >= 0),
    done          bigint NOT NULL DEFAULT 0 CHECK (done BETWEEN 0 AND total),
    dead          bigint NOT NULL DEFAULT 0 CHECK (dead BETWEEN 0 AND done),
    actor_id      bigint REFERENCES users (id),
    started_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz,
    CHECK ((status = 'running') = (finished_at IS NULL)),
    CHECK (created_from IS NULL OR created_to IS NULL OR created_from <= created_to)
);

-- At most one running replay per subscriber: two would interleave their
-- deliveries. A second start conflicts here, whatever the timing.
CREATE UNIQUE INDEX replays_one_running ON replays (subscriber_id) WHERE status = 'running';

-- One record per (replay, event) the replay delivers, apart from the live
-- deliveries: an event delivered live is delivered again, under its own
-- webhook-id. subscriber_id is the replay's, for the document-order rule.
CREATE TABLE replay_deliveries (
    replay_id       bigint NOT NULL REFERENCES replays (id),
    event_id        bigint NOT NULL REFERENCES events (id),
    subscriber_id   bigint NOT NULL REFERENCES subscribers (id),
    status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed', 'dead')),
    attempts        integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error      text,
    response_status integer,
    response_body   text,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz,
    duration_ms     integer,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (replay_id, event_id),
    CHECK ((status = 'delivered') = (delivered_at IS NOT NULL))
);

CREATE INDEX replay_deliveries_open ON replay_deliveries (subscriber_id, event_id) WHERE status IN ('pending', 'failed');
CREATE INDEX replay_deliveries_due ON replay_deliveries (next_attempt_at) WHERE status IN ('pending', 'failed');

-- A replay's start and end are journaled about its subscriber.
ALTER TABLE events DROP CONSTRAINT events_entity_check;
ALTER TABLE events ADD CONSTRAINT events_entity_check
    CHECK (entity IN ('sales_orders', 'plan_prod_orders', 'wh_moves', 'wh_purchase_orders', 'users', 'subscribers'));

-- +goose Down
ALTER TABLE events DROP CONSTRAINT events_entity_check;
ALTER TABLE events ADD CONSTRAINT events_entity_check
    CHECK (entity IN ('sales_orders', 'plan_prod_orders', 'wh_moves', 'wh_purchase_orders', 'users'));
DROP TABLE replay_deliveries, replays;
