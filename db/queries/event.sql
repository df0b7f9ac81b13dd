-- Journal reads and writes (table events, read through view event_rows,
-- which joins each event's actor). The page queries are one per filter
-- shape, so that each keeps its index under a generic plan; the filters
-- left optional in each are row filters, never what picks the index.
-- hidden_entities leaves out the events of tables the reader may not see
-- (users and tokens, for every role but admin).

-- name: EventGetByID :one
SELECT * FROM event_rows WHERE id = @id;

-- name: EventListByIDs :many
SELECT e.* FROM event_rows e WHERE e.id = ANY(@ids::bigint[]) ORDER BY e.id;

-- name: EventInsert :one
-- The inserted row is not visible to event_rows in the same statement:
-- its actor is joined to what INSERT returns, in the view's column order.
-- The event takes the id of its dispatch job from River's job sequence, so
-- that the job is inserted with that id and the row is never updated for
-- it (see migration 00007 and jobs.EnqueueDispatch).
WITH e AS (
    INSERT INTO events (type, entity, entity_id, payload, actor_id, trace_parent, dispatch_job_id)
    VALUES (@type, @entity, @entity_id, @payload, @actor_id, sqlc.narg(trace_parent)::text, nextval('river_job_id_seq'))
    RETURNING *
)
SELECT e.*, u.login AS actor_login, u.display_name AS actor_name, u.role AS actor_role
FROM e LEFT JOIN users u ON u.id = e.actor_id;

-- name: EventListPage :many
-- Newest first below @before_id, by the primary key.
SELECT * FROM event_rows
WHERE id < @before_id
  AND (sqlc.narg('actor_id')::bigint IS NULL OR actor_id = sqlc.narg('actor_id'))
  AND (sqlc.narg('processed')::boolean IS NULL OR (processed_at IS NOT NULL) = sqlc.narg('processed'))
  AND (sqlc.narg('hidden_entities')::text[] IS NULL OR entity <> ALL(sqlc.narg('hidden_entities')::text[]))
ORDER BY id DESC LIMIT @max_rows;

-- name: EventListPageByEntityID :many
-- One document's events (index events_entity).
SELECT * FROM event_rows
WHERE entity = @entity AND entity_id = @entity_id AND id < @before_id
  AND (sqlc.narg('types')::text[] IS NULL OR type = ANY(sqlc.narg('types')::text[]))
  AND (sqlc.narg('actor_id')::bigint IS NULL OR actor_id = sqlc.narg('actor_id'))
  AND (sqlc.narg('processed')::boolean IS NULL OR (processed_at IS NOT NULL) = sqlc.narg('processed'))
  AND (sqlc.narg('hidden_entities')::text[] IS NULL OR entity <> ALL(sqlc.narg('hidden_entities')::text[]))
ORDER BY id DESC LIMIT @max_rows;

-- name: EventListPageByEntity :many
-- One table's events (index events_entity).
SELECT * FROM event_rows
WHERE entity = @entity AND id < @before_id
  AND (sqlc.narg('types')::text[] IS NULL OR type = ANY(sqlc.narg('types')::text[]))
  AND (sqlc.narg('actor_id')::bigint IS NULL OR actor_id = sqlc.narg('actor_id'))
  AND (sqlc.narg('processed')::boolean IS NULL OR (processed_at IS NOT NULL) = sqlc.narg('processed'))
  AND (sqlc.narg('hidden_entities')::text[] IS NULL OR entity <> ALL(sqlc.narg('hidden_entities')::text[]))
ORDER BY id DESC LIMIT @max_rows;

-- name: EventListPageByType :many
-- Events of the given types (index events_type).
SELECT * FROM event_rows
WHERE type = ANY(@types::text[]) AND id < @before_id
  AND (sqlc.narg('actor_id')::bigint IS NULL OR actor_id = sqlc.narg('actor_id'))
  AND (sqlc.narg('processed')::boolean IS NULL OR (processed_at IS NOT NULL) = sqlc.narg('processed'))
  AND (sqlc.narg('hidden_entities')::text[] IS NULL OR entity <> ALL(sqlc.narg('hidden_entities')::text[]))
ORDER BY id DESC LIMIT @max_rows;

-- name: EventListPageUnprocessed :many
-- Events not processed yet (index events_unprocessed).
SELECT * FROM event_rows
WHERE processed_at IS NULL AND id < @before_id
  AND (sqlc.narg('actor_id')::bigint IS NULL OR actor_id = sqlc.narg('actor_id'))
  AND (sqlc.narg('hidden_entities')::text[] IS NULL OR entity <> ALL(sqlc.narg('hidden_entities')::text[]))
ORDER BY id DESC LIMIT @max_rows;

-- name: EventListProcessedAfter :many
-- The live feed's back-fill: processed events past a feed sequence, in
-- feed order (unique index on feed_seq).
SELECT * FROM event_rows
WHERE feed_seq > @after_seq::bigint
  AND (sqlc.narg('types')::text[] IS NULL OR type = ANY(sqlc.narg('types')::text[]))
  AND (sqlc.narg('entity')::text IS NULL OR entity = sqlc.narg('entity'))
  AND (sqlc.narg('entity_id')::bigint IS NULL OR entity_id = sqlc.narg('entity_id'))
  AND (sqlc.narg('actor_id')::bigint IS NULL OR actor_id = sqlc.narg('actor_id'))
  AND (sqlc.narg('processed')::boolean IS NULL OR (processed_at IS NOT NULL) = sqlc.narg('processed'))
  AND (sqlc.narg('hidden_entities')::text[] IS NULL OR entity <> ALL(sqlc.narg('hidden_entities')::text[]))
ORDER BY feed_seq LIMIT @max_rows;

-- name: EventGetLastFeedSeq :one
SELECT coalesce(max(feed_seq), 0)::bigint AS last_seq FROM events;

-- name: FeedListen :exec
LISTEN event_processed;
