-- Subscribers of the event stream (table subscribers, read through view
-- subscriber_rows, which never shows the webhook secret). Statements that
-- write return the view's columns in its order.

-- name: SubscriberUpsertBuiltin :one
-- A built-in subscriber's filter is its code's: every start writes it again.
INSERT INTO subscribers (name, kind, event_types, entities, condition)
VALUES (@name, 'builtin', @event_types, @entities, sqlc.narg('condition'))
ON CONFLICT (name) DO UPDATE SET event_types = EXCLUDED.event_types, entities = EXCLUDED.entities,
    condition = EXCLUDED.condition, updated_at = now()
WHERE subscribers.kind = EXCLUDED.kind
RETURNING id, name, kind, event_types, url, coalesce(secret, '') <> '' AS has_secret,
    max_attempts, timeout_ms, paused, created_at, updated_at, entities, condition, format;

-- name: SubscriberInsertWebhook :one
INSERT INTO subscribers (name, kind, url, event_types, entities, condition, format, secret, max_attempts, timeout_ms)
VALUES (@name, 'webhook', @url, @event_types, @entities, sqlc.narg('condition'),
    coalesce(sqlc.narg('format')::text, 'standard_webhooks'), sqlc.narg('secret'),
    coalesce(sqlc.narg('max_attempts')::integer, 10), coalesce(sqlc.narg('timeout_ms')::integer, 10000))
RETURNING id, name, kind, event_types, url, coalesce(secret, '') <> '' AS has_secret,
    max_attempts, timeout_ms, paused, created_at, updated_at, entities, condition, format;

-- name: SubscriberUpdateWebhook :one
UPDATE subscribers SET
    name = coalesce(sqlc.narg('name'), name), url = coalesce(sqlc.narg('url'), url),
    event_types = coalesce(sqlc.narg('event_types')::text[], event_types),
    entities = coalesce(sqlc.narg('entities')::text[], entities),
    -- An empty condition given removes it (NULL: every event).
    condition = CASE WHEN sqlc.narg('condition')::text IS NULL THEN condition ELSE nullif(sqlc.narg('condition')::text, '') END,
    format = coalesce(sqlc.narg('format')::text, format),
    secret = coalesce(sqlc.narg('secret'), secret),
    max_attempts = coalesce(sqlc.narg('max_attempts')::integer, max_attempts),
    timeout_ms = coalesce(sqlc.narg('timeout_ms')::integer, timeout_ms),
    updated_at = now()
WHERE id = @id AND kind = 'webhook'
RETURNING id, name, kind, event_types, url, coalesce(secret, '') <> '' AS has_secret,
    max_attempts, timeout_ms, paused, created_at, updated_at, entities, condition, format;

-- name: SubscriberSetPaused :one
UPDATE subscribers SET paused = @paused, updated_at = now() WHERE id = @id
RETURNING id, name, kind, event_types, url, coalesce(secret, '') <> '' AS has_secret,
    max_attempts, timeout_ms, paused, created_at, updated_at, entities, condition, format;

-- name: SubscriberGetByID :one
SELECT * FROM subscriber_rows WHERE id = @id;

-- name: SubscriberListByIDs :many
-- The view's columns, read from the table itself (as the statement log of
-- the deliveries page's test expects).
SELECT s.id, s.name, s.kind, s.event_types, s.url, coalesce(s.secret, '') <> '' AS has_secret,
    s.max_attempts, s.timeout_ms, s.paused, s.created_at, s.updated_at, s.entities, s.condition, s.format
FROM subscribers s WHERE s.id = ANY(@ids::bigint[]) ORDER BY s.id;

-- name: SubscriberList :many
SELECT * FROM subscriber_rows ORDER BY name;

-- name: SubscriberGetWebhookTarget :one
-- What sending needs, secret included; never leaves package jobs.
SELECT url::text AS url, coalesce(secret, '')::text AS secret, timeout_ms, format FROM subscribers WHERE id = @id AND kind = 'webhook';

-- name: SubscriberLagList :many
-- The lag of every subscriber, by name: its open (pending or failed),
-- failed and dead delivery records counted in index
-- deliveries_by_subscriber; the oldest open one's creation (its age by the
-- database clock, in seconds; 0 with none open) from deliveries_open_age;
-- its newest delivered record from deliveries_last_delivered. Delivered
-- records are never scanned (docs/query-plans.md).
SELECT s.id, s.name, l.pending, l.failing, l.dead, o.created_at AS oldest_pending_at,
    coalesce(extract(epoch FROM now() - o.created_at), 0)::float8 AS oldest_pending_seconds,
    d.delivered_at AS last_delivered_at
FROM subscribers s
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE u.status IN ('pending', 'failed')) AS pending,
        count(*) FILTER (WHERE u.status = 'failed') AS failing,
        count(*) FILTER (WHERE u.status = 'dead') AS dead
    FROM deliveries u WHERE u.subscriber_id = s.id AND u.status IN ('pending', 'failed', 'dead')
) l
LEFT JOIN LATERAL (
    SELECT u.event_id FROM deliveries u
    WHERE u.subscriber_id = s.id AND u.status IN ('pending', 'failed')
    ORDER BY u.created_at LIMIT 1
) oldest ON true
LEFT JOIN deliveries o ON o.event_id = oldest.event_id AND o.subscriber_id = s.id
LEFT JOIN LATERAL (
    SELECT x.delivered_at FROM deliveries x
    WHERE x.subscriber_id = s.id AND x.status = 'delivered'
    ORDER BY x.delivered_at DESC LIMIT 1
) d ON true
ORDER BY s.name;

-- name: SubscriberLagListByIDs :many
-- SubscriberLagList of the subscribers with the given ids, in id order.
SELECT s.id, s.name, l.pending, l.failing, l.dead, o.created_at AS oldest_pending_at,
    coalesce(extract(epoch FROM now() - o.created_at), 0)::float8 AS oldest_pending_seconds,
    d.delivered_at AS last_delivered_at
FROM subscribers s
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE u.status IN ('pending', 'failed')) AS pending,
        count(*) FILTER (WHERE u.status = 'failed') AS failing,
        count(*) FILTER (WHERE u.status = 'dead') AS dead
    FROM deliveries u WHERE u.subscriber_id = s.id AND u.status IN ('pending', 'failed', 'dead')
) l
LEFT JOIN LATERAL (
    SELECT u.event_id FROM deliveries u
    WHERE u.subscriber_id = s.id AND u.status IN ('pending', 'failed')
    ORDER BY u.created_at LIMIT 1
) oldest ON true
LEFT JOIN deliveries o ON o.event_id = oldest.event_id AND o.subscriber_id = s.id
LEFT JOIN LATERAL (
    SELECT x.delivered_at FROM deliveries x
    WHERE x.subscriber_id = s.id AND x.status = 'delivered'
    ORDER BY x.delivered_at DESC LIMIT 1
) d ON true
WHERE s.id = ANY(@ids::bigint[])
ORDER BY s.id;
