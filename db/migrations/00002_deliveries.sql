-- +goose Up
-- Subscribers of the event stream and one delivery record per (event,
-- subscriber): the dead-letter queue and the delivery history live here.

CREATE TABLE subscribers (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,63}$'),
    kind         text NOT NULL CHECK (kind IN ('builtin', 'webhook')),
    -- Event types delivered; empty means every type.
    event_types  text[] NOT NULL DEFAULT '{}',
    url          text,
    secret       text,
    max_attempts integer NOT NULL DEFAULT 10 CHECK (max_attempts BETWEEN 1 AND 100),
    timeout_ms   integer NOT NULL DEFAULT 10000 CHECK (timeout_ms BETWEEN 100 AND 120000),
    paused       boolean NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CHECK ((kind = 'webhook') = (url IS NOT NULL))
);

CREATE TABLE deliveries (
    event_id        bigint NOT NULL REFERENCES events (id),
    subscriber_id   bigint NOT NULL REFERENCES subscribers (id),
    status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed', 'dead')),
    attempts        integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error      text,
    response_status integer,
    response_body   text,
    -- When the next attempt is due; meaningful while pending or failed.
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz,
    duration_ms     integer,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_id, subscriber_id),
    CHECK ((status = 'delivered') = (delivered_at IS NOT NULL))
);

CREATE INDEX deliveries_open ON deliveries (next_attempt_at, event_id) WHERE status IN ('pending', 'failed');
CREATE INDEX deliveries_by_subscriber ON deliveries (subscriber_id, status, event_id);

-- dispatched_at: when the dispatcher created the event's delivery records.
ALTER TABLE events ADD COLUMN dispatched_at timestamptz;
ALTER TABLE events ADD CONSTRAINT events_dispatched_check CHECK (dispatched_at >= created_at);

-- +goose Down
ALTER TABLE events DROP CONSTRAINT events_dispatched_check;
ALTER TABLE events DROP COLUMN dispatched_at;
DROP TABLE deliveries, subscribers;
