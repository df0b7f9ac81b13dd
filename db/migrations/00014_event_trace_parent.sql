-- +goose Up
-- The W3C traceparent of the span that wrote the event (the mutation's,
-- or the dispatch's for an event a built-in subscriber wrote), so that its
-- dispatch and deliveries, on any instance and however much later, join
-- the writer's trace. NULL when tracing was off or the writer not traced.
ALTER TABLE events ADD COLUMN trace_parent text
    CHECK (trace_parent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$');

-- event_rows is written as e.*, which takes the columns events had when it
-- was created: recreate it to show trace_parent.
DROP VIEW event_rows;
CREATE VIEW event_rows AS
SELECT e.*, u.login AS actor_login, u.display_name AS actor_name, u.role AS actor_role
FROM events e LEFT JOIN users u ON u.id = e.actor_id;

-- +goose Down
DROP VIEW event_rows;
ALTER TABLE events DROP COLUMN trace_parent;
CREATE VIEW event_rows AS
SELECT e.*, u.login AS actor_login, u.display_name AS actor_name, u.role AS actor_role
FROM events e LEFT JOIN users u ON u.id = e.actor_id;
