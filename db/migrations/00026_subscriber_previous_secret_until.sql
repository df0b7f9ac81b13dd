-- +goose Up
-- A webhook's rotation in progress is visible on every read of the
-- subscriber (Subscriber.previousSecretValidUntil). The column is kept after
-- it has passed (the signer ignores it then), so readers show it only while
-- it is in the future.
DROP VIEW subscriber_rows;
CREATE VIEW subscriber_rows AS
SELECT id, name, kind, event_types, url, coalesce(secret, '') <> '' AS has_secret,
    max_attempts, timeout_ms, paused, created_at, updated_at, entities, condition, format,
    max_in_flight, rate_per_second, stream, subject_prefix, previous_secret_until
FROM subscribers;

-- +goose Down
DROP VIEW subscriber_rows;
CREATE VIEW subscriber_rows AS
SELECT id, name, kind, event_types, url, coalesce(secret, '') <> '' AS has_secret,
    max_attempts, timeout_ms, paused, created_at, updated_at, entities, condition, format,
    max_in_flight, rate_per_second, stream, subject_prefix
FROM subscribers;
