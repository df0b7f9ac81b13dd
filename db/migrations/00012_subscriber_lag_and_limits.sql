-- +goose Up
-- A subscriber's lag is read from indexes, never by scanning its delivery
-- history: delivered records are the bulk of the table (kept for
-- RETENTION), the open and dead ones are few. The counts by status come
-- from deliveries_by_subscriber (subscriber_id, status, …) alone.
--
-- The oldest open (pending or failed) record of a subscriber is the first
-- entry of its range here.
CREATE INDEX deliveries_open_age ON deliveries (subscriber_id, created_at) WHERE status IN ('pending', 'failed');
-- The newest delivered record of a subscriber is the last entry of its
-- range here. An index rather than a column on subscribers: a column
-- written by every successful delivery would be one hot row per
-- subscriber, serialising the commits of its concurrent deliveries.
CREATE INDEX deliveries_last_delivered ON deliveries (subscriber_id, delivered_at) WHERE status = 'delivered';

-- Per-webhook limits that hold across every server instance on the
-- database. max_in_flight: concurrent requests to the webhook; each is a
-- slot row of subscriber_leases, taken (committed) before the request and
-- given back after it. rate_per_second: requests per second on average, a
-- token bucket row in subscriber_buckets; NULL: no limit.
ALTER TABLE subscribers
    ADD COLUMN max_in_flight integer NOT NULL DEFAULT 4 CHECK (max_in_flight BETWEEN 1 AND 100),
    ADD COLUMN rate_per_second double precision CHECK (rate_per_second > 0 AND rate_per_second <= 10000);

DROP VIEW subscriber_rows;
CREATE VIEW subscriber_rows AS
SELECT id, name, kind, event_types, url, coalesce(secret, '') <> '' AS has_secret,
    max_attempts, timeout_ms, paused, created_at, updated_at, entities, condition, format,
    max_in_flight, rate_per_second
FROM subscribers;

-- Slot 0 … max_in_flight-1 of each webhook (written with the subscriber).
-- A slot is free when leased_until has passed: a lease runs out by itself
-- after the request's timeout (and a margin), so a crashed instance's
-- slots come back. holder tells the lease's owner, so that a late release
-- never frees a slot someone else took since.
CREATE TABLE subscriber_leases (
    subscriber_id bigint NOT NULL REFERENCES subscribers (id) ON DELETE CASCADE,
    slot          integer NOT NULL CHECK (slot >= 0 AND slot < 100),
    holder        text,
    leased_until  timestamptz NOT NULL DEFAULT '-infinity',
    PRIMARY KEY (subscriber_id, slot)
);
INSERT INTO subscriber_leases (subscriber_id, slot)
SELECT s.id, g FROM subscribers s CROSS JOIN LATERAL generate_series(0, s.max_in_flight - 1) g WHERE s.kind = 'webhook';

-- The token bucket of a rate-limited webhook: tokens as of refilled_at
-- (refilled at rate_per_second, at most one second's worth, at least 1);
-- taken tells whether the last take got one.
CREATE TABLE subscriber_buckets (
    subscriber_id bigint PRIMARY KEY REFERENCES subscribers (id) ON DELETE CASCADE,
    tokens        double precision NOT NULL CHECK (tokens >= 0),
    refilled_at   timestamptz NOT NULL,
    taken         boolean NOT NULL
);

-- +goose Down
DROP TABLE subscriber_buckets, subscriber_leases;
DROP VIEW subscriber_rows;
CREATE VIEW subscriber_rows AS
SELECT id, name, kind, event_types, url, coalesce(secret, '') <> '' AS has_secret,
    max_attempts, timeout_ms, paused, created_at, updated_at, entities, condition, format
FROM subscribers;
ALTER TABLE subscribers DROP COLUMN rate_per_second, DROP COLUMN max_in_flight;
DROP INDEX deliveries_last_delivered;
DROP INDEX deliveries_open_age;
