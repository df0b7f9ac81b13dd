-- +goose Up
-- The dispatch job of each event is kept on the event (dispatch_job_id,
-- set in the transaction that enqueued it), so a dispatch transaction that
-- takes on a backlog deletes the jobs of the events it dispatched besides
-- its own through River's API, without reading River's table; the index
-- on River's table that served that read goes.
DROP INDEX IF EXISTS river_job_dispatch_event;
ALTER TABLE events ADD COLUMN dispatch_job_id bigint;

-- The journal as its readers see it: every event with its actor's names.
-- Written as e.* it takes the columns events has now; a migration that adds
-- one recreates the view.
CREATE VIEW event_rows AS
SELECT e.*, u.login AS actor_login, u.display_name AS actor_name, u.role AS actor_role
FROM events e LEFT JOIN users u ON u.id = e.actor_id;

-- A subscriber as it is read back: the webhook secret never is, only
-- whether one is set.
CREATE VIEW subscriber_rows AS
SELECT id, name, kind, event_types, url, coalesce(secret, '') <> '' AS has_secret,
    max_attempts, timeout_ms, paused, created_at, updated_at
FROM subscribers;

-- A delivery record with its subscriber's name.
CREATE VIEW delivery_rows AS
SELECT d.*, s.name AS subscriber_name FROM deliveries d JOIN subscribers s ON s.id = d.subscriber_id;

-- +goose Down
DROP VIEW delivery_rows, subscriber_rows, event_rows;
ALTER TABLE events DROP COLUMN dispatch_job_id;
CREATE INDEX river_job_dispatch_event ON river_job (((args ->> 'event_id')::bigint)) WHERE kind = 'dispatch_event';
