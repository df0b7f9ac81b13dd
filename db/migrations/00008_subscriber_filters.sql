-- +goose Up
-- A subscriber takes events by type AND entity AND an optional CEL
-- condition (compiled by package jobs when the subscriber is written, so
-- only valid ones are stored), and a webhook chooses its body's format.
-- Type and entity are matched in SQL while planning a dispatch; the
-- condition in Go.
ALTER TABLE subscribers
    -- Tables (events.entity) delivered; empty means every one.
    ADD COLUMN entities text[] NOT NULL DEFAULT '{}',
    -- A CEL expression over the event; NULL takes every event.
    ADD COLUMN condition text,
    ADD COLUMN format text NOT NULL DEFAULT 'standard_webhooks' CHECK (format IN ('standard_webhooks', 'cloudevents'));

-- The view takes the new columns at its end (CREATE OR REPLACE may only add).
DROP VIEW subscriber_rows;
CREATE VIEW subscriber_rows AS
SELECT id, name, kind, event_types, url, coalesce(secret, '') <> '' AS has_secret,
    max_attempts, timeout_ms, paused, created_at, updated_at, entities, condition, format
FROM subscribers;

-- +goose Down
DROP VIEW subscriber_rows;
CREATE VIEW subscriber_rows AS
SELECT id, name, kind, event_types, url, coalesce(secret, '') <> '' AS has_secret,
    max_attempts, timeout_ms, paused, created_at, updated_at
FROM subscribers;
ALTER TABLE subscribers DROP COLUMN format, DROP COLUMN condition, DROP COLUMN entities;
