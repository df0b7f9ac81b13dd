-- +goose Up
-- A subscriber of kind 'nats' publishes each event it takes to a NATS
-- JetStream stream, on <subject_prefix>.<entity>.<entity id>.<type>; its
-- deliveries, leases, limits, retries and attempt log are a webhook's.
ALTER TABLE subscribers DROP CONSTRAINT subscribers_kind_check,
    ADD CONSTRAINT subscribers_kind_check CHECK (kind IN ('builtin', 'webhook', 'nats')),
    ADD COLUMN stream text CHECK (stream ~ '^[A-Za-z0-9_-]{1,64}$'),
    -- Dot-separated NATS subject tokens, no wildcards or white space.
    ADD COLUMN subject_prefix text CHECK (subject_prefix ~ '^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$' AND length(subject_prefix) <= 128),
    ADD CONSTRAINT subscribers_nats_check CHECK ((kind = 'nats') = (stream IS NOT NULL AND subject_prefix IS NOT NULL));

DROP VIEW subscriber_rows;
CREATE VIEW subscriber_rows AS
SELECT id, name, kind, event_types, url, coalesce(secret, '') <> '' AS has_secret,
    max_attempts, timeout_ms, paused, created_at, updated_at, entities, condition, format,
    max_in_flight, rate_per_second, stream, subject_prefix
FROM subscribers;

-- +goose Down
DROP VIEW subscriber_rows;
CREATE VIEW subscriber_rows AS
SELECT id, name, kind, event_types, url, coalesce(secret, '') <> '' AS has_secret,
    max_attempts, timeout_ms, paused, created_at, updated_at, entities, condition, format,
    max_in_flight, rate_per_second
FROM subscribers;
DELETE FROM subscribers WHERE kind = 'nats';
ALTER TABLE subscribers DROP CONSTRAINT subscribers_nats_check, DROP COLUMN subject_prefix, DROP COLUMN stream,
    DROP CONSTRAINT subscribers_kind_check,
    ADD CONSTRAINT subscribers_kind_check CHECK (kind IN ('builtin', 'webhook'));
