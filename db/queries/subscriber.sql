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
    max_attempts, timeout_ms, paused, created_at, updated_at, entities, condition, format,
    max_in_flight, rate_per_second, stream, subject_prefix,
    previous_secret_until;

-- name: SubscriberInsertWebhook :one
-- The webhook and its max_in_flight lease slots, in one statement.
WITH s AS (
    INSERT INTO subscribers (name, kind, url, event_types, entities, condition, format, secret, max_attempts, timeout_ms,
        max_in_flight, rate_per_second)
    VALUES (@name, 'webhook', @url, @event_types, @entities, sqlc.narg('condition'),
        coalesce(sqlc.narg('format')::text, 'standard_webhooks'), sqlc.narg('secret'),
        coalesce(sqlc.narg('max_attempts')::integer, 10), coalesce(sqlc.narg('timeout_ms')::integer, 10000),
        coalesce(sqlc.narg('max_in_flight')::integer, 4), sqlc.narg('rate_per_second')::float8)
    RETURNING *
), slots AS (
    INSERT INTO subscriber_leases (subscriber_id, slot)
    SELECT s.id, g FROM s CROSS JOIN LATERAL generate_series(0, s.max_in_flight - 1) g
)
SELECT s.id, s.name, s.kind, s.event_types, s.url, coalesce(s.secret, '') <> '' AS has_secret,
    s.max_attempts, s.timeout_ms, s.paused, s.created_at, s.updated_at, s.entities, s.condition, s.format,
    s.max_in_flight, s.rate_per_second, s.stream, s.subject_prefix,
    s.previous_secret_until
FROM s;

-- name: SubscriberUpdateWebhook :one
-- The given fields, and the lease slots to max_in_flight (a slot dropped
-- while leased ends with its request). A rate_per_second of 0 removes the
-- limit.
WITH s AS (
UPDATE subscribers SET
    name = coalesce(sqlc.narg('name'), name), url = coalesce(sqlc.narg('url'), url),
    event_types = coalesce(sqlc.narg('event_types')::text[], event_types),
    entities = coalesce(sqlc.narg('entities')::text[], entities),
    -- An empty condition given removes it (NULL: every event).
    condition = CASE WHEN sqlc.narg('condition')::text IS NULL THEN condition ELSE nullif(sqlc.narg('condition')::text, '') END,
    format = coalesce(sqlc.narg('format')::text, format),
    secret = coalesce(sqlc.narg('secret'), secret),
    -- A secret given replaces the old one at once: no grace period.
    previous_secret = CASE WHEN sqlc.narg('secret')::text IS NULL THEN previous_secret END,
    previous_secret_until = CASE WHEN sqlc.narg('secret')::text IS NULL THEN previous_secret_until END,
    max_attempts = coalesce(sqlc.narg('max_attempts')::integer, max_attempts),
    timeout_ms = coalesce(sqlc.narg('timeout_ms')::integer, timeout_ms),
    max_in_flight = coalesce(sqlc.narg('max_in_flight')::integer, max_in_flight),
    rate_per_second = CASE WHEN sqlc.narg('rate_per_second')::float8 IS NULL THEN rate_per_second
        ELSE nullif(sqlc.narg('rate_per_second')::float8, 0) END,
    updated_at = now()
WHERE id = @id AND kind = 'webhook'
RETURNING *
), added AS (
    INSERT INTO subscriber_leases (subscriber_id, slot)
    SELECT s.id, g FROM s CROSS JOIN LATERAL generate_series(0, s.max_in_flight - 1) g
    ON CONFLICT DO NOTHING
), dropped AS (
    DELETE FROM subscriber_leases l USING s WHERE l.subscriber_id = s.id AND l.slot >= s.max_in_flight
)
SELECT s.id, s.name, s.kind, s.event_types, s.url, coalesce(s.secret, '') <> '' AS has_secret,
    s.max_attempts, s.timeout_ms, s.paused, s.created_at, s.updated_at, s.entities, s.condition, s.format,
    s.max_in_flight, s.rate_per_second, s.stream, s.subject_prefix,
    s.previous_secret_until
FROM s;

-- name: SubscriberNatsCreateLock :exec
-- Serialises the creation of NATS subscribers till the transaction ends,
-- so that the prefix-overlap check and the insert after it see every other
-- create's row (no constraint can compare prefixes).
SELECT pg_advisory_xact_lock(hashtext('subscribers.nats_create'));

-- name: SubscriberNatsStreamInUse :one
-- Whether a NATS subscriber publishes to @stream.
SELECT EXISTS (SELECT 1 FROM subscribers WHERE kind = 'nats' AND stream = @stream);

-- name: SubscriberInsertNats :one
-- The NATS subscriber and its max_in_flight lease slots (unacknowledged
-- publishes at once), in one statement.
WITH s AS (
    INSERT INTO subscribers (name, kind, stream, subject_prefix, event_types, entities, condition, format, max_attempts,
        timeout_ms, max_in_flight, rate_per_second)
    VALUES (@name, 'nats', @stream, @subject_prefix, @event_types, @entities, sqlc.narg('condition'),
        coalesce(sqlc.narg('format')::text, 'standard_webhooks'),
        coalesce(sqlc.narg('max_attempts')::integer, 10), coalesce(sqlc.narg('timeout_ms')::integer, 10000),
        coalesce(sqlc.narg('max_in_flight')::integer, 4), sqlc.narg('rate_per_second')::float8)
    RETURNING *
), slots AS (
    INSERT INTO subscriber_leases (subscriber_id, slot)
    SELECT s.id, g FROM s CROSS JOIN LATERAL generate_series(0, s.max_in_flight - 1) g
)
SELECT s.id, s.name, s.kind, s.event_types, s.url, coalesce(s.secret, '') <> '' AS has_secret,
    s.max_attempts, s.timeout_ms, s.paused, s.created_at, s.updated_at, s.entities, s.condition, s.format,
    s.max_in_flight, s.rate_per_second, s.stream, s.subject_prefix,
    s.previous_secret_until
FROM s;

-- name: SubscriberUpdateNats :one
-- The given fields of NATS subscriber @id, and its lease slots, as
-- SubscriberUpdateWebhook. Its stream and subject prefix are fixed: a
-- change would split the journal between two streams.
WITH s AS (
UPDATE subscribers SET
    name = coalesce(sqlc.narg('name'), name),
    event_types = coalesce(sqlc.narg('event_types')::text[], event_types),
    entities = coalesce(sqlc.narg('entities')::text[], entities),
    condition = CASE WHEN sqlc.narg('condition')::text IS NULL THEN condition ELSE nullif(sqlc.narg('condition')::text, '') END,
    format = coalesce(sqlc.narg('format')::text, format),
    max_attempts = coalesce(sqlc.narg('max_attempts')::integer, max_attempts),
    timeout_ms = coalesce(sqlc.narg('timeout_ms')::integer, timeout_ms),
    max_in_flight = coalesce(sqlc.narg('max_in_flight')::integer, max_in_flight),
    rate_per_second = CASE WHEN sqlc.narg('rate_per_second')::float8 IS NULL THEN rate_per_second
        ELSE nullif(sqlc.narg('rate_per_second')::float8, 0) END,
    updated_at = now()
WHERE id = @id AND kind = 'nats'
RETURNING *
), added AS (
    INSERT INTO subscriber_leases (subscriber_id, slot)
    SELECT s.id, g FROM s CROSS JOIN LATERAL generate_series(0, s.max_in_flight - 1) g
    ON CONFLICT DO NOTHING
), dropped AS (
    DELETE FROM subscriber_leases l USING s WHERE l.subscriber_id = s.id AND l.slot >= s.max_in_flight
)
SELECT s.id, s.name, s.kind, s.event_types, s.url, coalesce(s.secret, '') <> '' AS has_secret,
    s.max_attempts, s.timeout_ms, s.paused, s.created_at, s.updated_at, s.entities, s.condition, s.format,
    s.max_in_flight, s.rate_per_second, s.stream, s.subject_prefix,
    s.previous_secret_until
FROM s;

-- name: SubscriberSetPaused :one
-- Pauses or resumes @id; resuming also ends a disabled webhook's
-- disabled state and its run of failures. Returns the subscriber and
-- whether it was paused before, and why if it had been disabled.
WITH old AS (SELECT o.id, o.paused, o.disabled_reason FROM subscribers o WHERE o.id = @id FOR UPDATE)
UPDATE subscribers s SET paused = @paused, updated_at = now(),
    disabled_reason = CASE WHEN @paused THEN s.disabled_reason END,
    failing_since = CASE WHEN @paused THEN s.failing_since END,
    last_failed_at = CASE WHEN @paused THEN s.last_failed_at END
FROM old WHERE s.id = old.id
RETURNING s.id, s.name, s.kind, s.event_types, s.url, coalesce(s.secret, '') <> '' AS has_secret,
    s.max_attempts, s.timeout_ms, s.paused, s.created_at, s.updated_at, s.entities, s.condition, s.format,
    s.max_in_flight, s.rate_per_second, s.stream, s.subject_prefix,
    s.previous_secret_until,
    old.paused AS was_paused, old.disabled_reason AS was_disabled;

-- name: SubscriberGetByName :one
SELECT * FROM subscriber_rows WHERE name = @name;

-- name: SubscriberGetByID :one
SELECT * FROM subscriber_rows WHERE id = @id;

-- name: SubscriberLock :one
-- SubscriberLock locks subscriber id until the transaction ends, for a
-- writer of events about it.
SELECT id FROM subscribers WHERE id = @id FOR NO KEY UPDATE;

-- name: SubscriberListByIDs :many
-- The view's columns, read from the table itself (as the statement log of
-- the deliveries page's test expects).
SELECT s.id, s.name, s.kind, s.event_types, s.url, coalesce(s.secret, '') <> '' AS has_secret,
    s.max_attempts, s.timeout_ms, s.paused, s.created_at, s.updated_at, s.entities, s.condition, s.format,
    s.max_in_flight, s.rate_per_second, s.stream, s.subject_prefix,
    s.previous_secret_until
FROM subscribers s WHERE s.id = ANY(@ids::bigint[]) ORDER BY s.id;

-- name: SubscriberList :many
SELECT * FROM subscriber_rows ORDER BY name;

-- name: SubscriberGetWebhookTarget :one
-- What sending needs, secrets included; never leaves package jobs. The
-- previous secret is '' once its grace period is over.
SELECT url::text AS url, coalesce(secret, '')::text AS secret,
    (CASE WHEN previous_secret_until > now() THEN previous_secret ELSE '' END)::text AS previous_secret,
    timeout_ms, format
FROM subscribers WHERE id = @id AND kind = 'webhook';

-- name: SubscriberRotateSecret :one
-- Replaces webhook @id's secret with @secret; the secret it had stays
-- valid for @grace_s seconds (none when 0 or when it had none).
UPDATE subscribers s SET secret = @secret,
    previous_secret = CASE WHEN @grace_s::integer > 0 AND coalesce(s.secret, '') <> '' THEN s.secret END,
    previous_secret_until = CASE WHEN @grace_s::integer > 0 AND coalesce(s.secret, '') <> ''
        THEN now() + make_interval(secs => @grace_s::integer) END,
    updated_at = now()
WHERE s.id = @id AND s.kind = 'webhook'
RETURNING s.id, s.name, s.kind, s.event_types, s.url, true AS has_secret,
    s.max_attempts, s.timeout_ms, s.paused, s.created_at, s.updated_at, s.entities, s.condition, s.format,
    s.max_in_flight, s.rate_per_second, s.stream, s.subject_prefix, s.previous_secret_until;

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

-- name: SubscriberPendingList :many
-- What the Prometheus scrape needs of SubscriberLagList, per subscriber by
-- name: its open (pending or failed) delivery records, counted exactly up
-- to 10000 (db.PendingCountExact; a count of 10000 means at least as
-- many), and the age of the oldest, in seconds by the database clock (0
-- with none). Both read the partial indexes of open records only, neither
-- delivered history nor dead letters, and stop at the bound or the first
-- entry: a backlog of a million costs what one of 10000 does.
SELECT s.name AS subscriber, o.pending,
    coalesce(extract(epoch FROM now() - a.oldest), 0)::float8 AS oldest_pending_seconds
FROM subscribers s
CROSS JOIN LATERAL (
    SELECT count(*) AS pending FROM (
        SELECT 1 FROM deliveries u WHERE u.subscriber_id = s.id AND u.status IN ('pending', 'failed') LIMIT 10000
    ) capped
) o
LEFT JOIN LATERAL (
    SELECT u.created_at AS oldest FROM deliveries u
    WHERE u.subscriber_id = s.id AND u.status IN ('pending', 'failed')
    ORDER BY u.created_at LIMIT 1
) a ON true
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

-- name: SubscriberLeaseTake :one
-- Takes a free lease slot of webhook @subscriber_id (one whose lease ran
-- out) for @holder until @ttl_s seconds from now, skipping slots another
-- transaction is taking; no row when every slot is leased. Run in a
-- delivery's take, a short transaction: the lease is visible to every
-- instance once it commits, before the request goes out.
UPDATE subscriber_leases l SET holder = @holder, leased_until = clock_timestamp() + make_interval(secs => @ttl_s::float8)
WHERE l.subscriber_id = @subscriber_id AND l.slot = (
    SELECT f.slot FROM subscriber_leases f
    WHERE f.subscriber_id = @subscriber_id AND f.leased_until <= clock_timestamp()
    ORDER BY f.slot LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING l.slot;

-- name: SubscriberLeaseCountFree :one
-- How many of webhook @subscriber_id's lease slots are free now (their
-- lease ran out or was given back).
SELECT count(*) FROM subscriber_leases WHERE subscriber_id = @subscriber_id AND leased_until <= clock_timestamp();

-- name: SubscriberLeaseRelease :exec
-- Gives slot @slot of @subscriber_id back, if @holder still holds it.
UPDATE subscriber_leases l SET holder = NULL, leased_until = '-infinity'
WHERE l.subscriber_id = @subscriber_id AND l.slot = @slot AND l.holder = @holder;

-- name: SubscriberBucketTake :one
-- Takes a token from @subscriber_id's bucket, refilled at @rate per second
-- since its last take and holding at most @burst (at least 1; the first
-- take finds it full). Returns whether one was taken and the tokens left:
-- without one, the next is there in (1 - tokens) / @rate seconds. One
-- statement, so the row lock is held only while it runs; the clock is
-- read once, as EXCLUDED.refilled_at.
INSERT INTO subscriber_buckets AS b (subscriber_id, tokens, refilled_at, taken)
VALUES (@subscriber_id, greatest(@burst::float8, 1) - 1, clock_timestamp(), true)
ON CONFLICT (subscriber_id) DO UPDATE SET
    tokens = least(@burst::float8, b.tokens + greatest(0, extract(epoch FROM EXCLUDED.refilled_at - b.refilled_at)) * @rate::float8)
        - CASE WHEN least(@burst::float8, b.tokens + greatest(0, extract(epoch FROM EXCLUDED.refilled_at - b.refilled_at)) * @rate::float8) >= 1
          THEN 1 ELSE 0 END,
    taken = least(@burst::float8, b.tokens + greatest(0, extract(epoch FROM EXCLUDED.refilled_at - b.refilled_at)) * @rate::float8) >= 1,
    refilled_at = greatest(b.refilled_at, EXCLUDED.refilled_at)
RETURNING taken, tokens;

-- name: SubscriberNoteFailure :one
-- Notes a failed attempt to webhook @id at @now: starts its run of
-- failures unless one runs whose last failure came after @quiet_since
-- (an older one means a quiet gap, which breaks the run). Returns when
-- the run began.
UPDATE subscribers SET
    failing_since = CASE WHEN failing_since IS NULL OR last_failed_at IS NULL OR last_failed_at < @quiet_since::timestamptz
                         THEN @now::timestamptz ELSE failing_since END,
    last_failed_at = @now::timestamptz
WHERE id = @id
RETURNING failing_since;

-- name: SubscriberNoteSuccess :exec
-- Ends webhook @id's run of failures; writes nothing when none runs.
UPDATE subscribers SET failing_since = NULL, last_failed_at = NULL WHERE id = @id AND failing_since IS NOT NULL;

-- name: SubscriberDisable :one
-- Pauses webhook @id for @reason unless it is disabled already; returns
-- when its run of failures began.
UPDATE subscribers SET paused = true, disabled_reason = @reason, updated_at = now()
WHERE id = @id AND disabled_reason IS NULL
RETURNING failing_since;

-- name: SubscriberClashList :many
-- Subscribers other than @id that a NATS subscriber named @name
-- publishing under @subject_prefix would clash with: the same name, or a
-- NATS subscriber whose prefix equals, covers or is covered by it (both
-- would store the same events). A NULL argument is not compared.
SELECT id, name, kind, subject_prefix FROM subscribers
WHERE id <> @id AND (name = sqlc.narg('name') OR (kind = 'nats' AND (
    subject_prefix = sqlc.narg('subject_prefix')
    OR starts_with(sqlc.narg('subject_prefix'), subject_prefix || '.')
    OR starts_with(subject_prefix, sqlc.narg('subject_prefix') || '.'))))
ORDER BY id;
