-- +goose Up
-- An external delivery (a webhook, live or replayed) is attempted in three
-- steps, none of which holds a transaction or a connection while the
-- request is out: take (a short transaction leases the delivery), send
-- (nothing held), record (a short transaction, only while the lease is
-- still the taker's).
--
-- The lease is lease_holder plus next_attempt_at: taking sets the holder
-- and moves next_attempt_at to when the lease runs out (the request's
-- timeout and a margin), so a leased delivery is not due, and one whose
-- taker died becomes due again by itself (the minute sweep, or any job
-- naming it, takes it over). Recording is guarded by the holder: an answer
-- that comes after the lease was taken over, or after a redelivery reset
-- the record, is logged as an attempt and changes nothing else.
ALTER TABLE deliveries ADD COLUMN lease_holder text;
ALTER TABLE replay_deliveries ADD COLUMN lease_holder text;

DROP VIEW delivery_rows;
CREATE VIEW delivery_rows AS
SELECT d.*, s.name AS subscriber_name FROM deliveries d JOIN subscribers s ON s.id = d.subscriber_id;

-- A webhook's due deliveries, soonest due first: what a lease slot given
-- back takes next (a delivery that found no slot free waits here, due, at
-- no cost, instead of polling). Leased ones and retries not yet due are
-- past the range scanned.
CREATE INDEX deliveries_due_of_subscriber ON deliveries (subscriber_id, next_attempt_at) WHERE status IN ('pending', 'failed');

-- The attempt log: one row per attempt of an external delivery, written
-- when the attempt is taken (so that an attempt whose worker died still
-- shows) and completed when its answer is recorded. replay_id is null for
-- the live delivery. Kept for RETENTION (by started_at).
CREATE TABLE delivery_attempts (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id        bigint NOT NULL REFERENCES events (id),
    subscriber_id   bigint NOT NULL REFERENCES subscribers (id),
    replay_id       bigint REFERENCES replays (id),
    -- The attempt's number within its delivery (1-based) and the lease it
    -- ran under.
    attempt         integer NOT NULL CHECK (attempt >= 1),
    lease_holder    text NOT NULL,
    -- Which server instance made the request (River's client id).
    instance        text NOT NULL,
    started_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- Set when the answer is recorded: delivered, failed or dead, the
    -- attempt's own outcome (what the delivery became, unless the answer
    -- came late, after the lease was taken over); null while in flight,
    -- or when no answer was recorded (error says why).
    status          text CHECK (status IN ('delivered', 'failed', 'dead')),
    duration_ms     integer CHECK (duration_ms >= 0),
    response_status integer,
    -- The first 4 KiB of the response body.
    response_body   text,
    error           text
);
CREATE INDEX delivery_attempts_of_delivery ON delivery_attempts (event_id, subscriber_id, id);
CREATE INDEX delivery_attempts_started ON delivery_attempts (started_at);

-- The receiver's signals. failing_since: when the webhook's current run of
-- failed attempts began (null after a success); last_failed_at: its latest
-- failed attempt, so that a run with a long quiet gap (a webhook without
-- traffic for days) starts again rather than counting the gap. A webhook
-- that answers 410 Gone, or has failed continuously for
-- WEBHOOK_DISABLE_AFTER, is paused with disabled_reason set (journaled as
-- subscriber.disabled); resuming clears all three.
ALTER TABLE subscribers
    ADD COLUMN failing_since timestamptz,
    ADD COLUMN last_failed_at timestamptz,
    ADD COLUMN disabled_reason text CHECK (disabled_reason IN ('gone', 'failing')),
    ADD CONSTRAINT subscribers_disabled_paused_check CHECK (disabled_reason IS NULL OR paused);

-- +goose Down
DROP INDEX deliveries_due_of_subscriber;
ALTER TABLE subscribers DROP CONSTRAINT subscribers_disabled_paused_check,
    DROP COLUMN disabled_reason, DROP COLUMN last_failed_at, DROP COLUMN failing_since;
DROP TABLE delivery_attempts;
DROP VIEW delivery_rows;
ALTER TABLE replay_deliveries DROP COLUMN lease_holder;
ALTER TABLE deliveries DROP COLUMN lease_holder;
CREATE VIEW delivery_rows AS
SELECT d.*, s.name AS subscriber_name FROM deliveries d JOIN subscribers s ON s.id = d.subscriber_id;
