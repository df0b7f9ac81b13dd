-- Replays (table replays) and their delivery records (table
-- replay_deliveries): one subscriber, the processed events of a range,
-- delivered again in batches.

-- name: ReplayInsert :one
-- Starts a replay of subscriber @subscriber_id unless one of it is running
-- (index replays_one_running: no row then). The range ends at the highest
-- feed sequence committed now; total counts its events of the subscriber's
-- types and tables.
WITH s AS (
    SELECT coalesce(max(feed_seq), 0)::bigint AS last_seq FROM events
)
INSERT INTO replays (subscriber_id, after_seq, last_seq, created_from, created_to, event_types, entities, condition, total, actor_id)
SELECT sub.id, @after_seq::bigint, s.last_seq, sqlc.narg('created_from')::timestamptz, sqlc.narg('created_to')::timestamptz,
    sub.event_types, sub.entities, sub.condition,
    (SELECT count(*) FROM events e
     WHERE e.feed_seq > @after_seq::bigint AND e.feed_seq <= s.last_seq
       AND (sqlc.narg('created_from')::timestamptz IS NULL OR e.created_at >= sqlc.narg('created_from')::timestamptz)
       AND (sqlc.narg('created_to')::timestamptz IS NULL OR e.created_at < sqlc.narg('created_to')::timestamptz)
       AND (cardinality(sub.event_types) = 0 OR e.type = ANY(sub.event_types))
       AND (cardinality(sub.entities) = 0 OR e.entity = ANY(sub.entities))),
    sqlc.narg('actor_id')::bigint
FROM s, subscribers sub WHERE sub.id = @subscriber_id
ON CONFLICT (subscriber_id) WHERE status = 'running' DO NOTHING
RETURNING *;

-- name: ReplayGetRunningOf :one
SELECT * FROM replays WHERE subscriber_id = @subscriber_id AND status = 'running';

-- name: ReplayGetByID :one
SELECT * FROM replays WHERE id = @id;

-- name: ReplayLock :one
SELECT * FROM replays WHERE id = @id FOR UPDATE;

-- name: ReplayListCandidates :many
-- The next events of replay @id after its cursor: its range, its types and
-- tables, in id order (the document order).
SELECT e.* FROM replays r JOIN event_rows e ON e.id > r.cursor_id
WHERE r.id = @id
  AND e.feed_seq > r.after_seq AND e.feed_seq <= r.last_seq
  AND (r.created_from IS NULL OR e.created_at >= r.created_from)
  AND (r.created_to IS NULL OR e.created_at < r.created_to)
  AND (cardinality(r.event_types) = 0 OR e.type = ANY(r.event_types))
  AND (cardinality(r.entities) = 0 OR e.entity = ANY(r.entities))
ORDER BY e.id LIMIT @max_rows;

-- name: ReplayAdvance :one
-- After a batch: the cursor moves to @cursor_id, @skipped events (not taken
-- by the condition) are done.
UPDATE replays SET cursor_id = @cursor_id, written = @written, done = done + @skipped::bigint
WHERE id = @id RETURNING *;

-- name: ReplayCountOpen :one
SELECT count(*) FROM replay_deliveries WHERE replay_id = @replay_id AND status IN ('pending', 'failed');

-- name: ReplayFinish :one
-- Ends running replay @id with @status; no row when it is not running.
UPDATE replays SET status = @status, finished_at = clock_timestamp()
WHERE id = @id AND status = 'running' RETURNING *;

-- name: ReplayCountDone :one
-- One more replayed delivery finished (dead: it gave up).
UPDATE replays SET done = done + 1, dead = dead + CASE WHEN @dead::boolean THEN 1 ELSE 0 END
WHERE id = @id RETURNING *;

-- name: ReplayListRunning :many
SELECT * FROM replays WHERE status = 'running' ORDER BY id;

-- name: ReplayDeliveryInsert :exec
INSERT INTO replay_deliveries (replay_id, event_id, subscriber_id)
SELECT @replay_id, unnest(@event_ids::bigint[]), @subscriber_id;

-- name: ReplayDeliveryLockOpen :one
-- Locks an open record that is due (not leased, not a retry before its
-- time), waiting for a transaction that holds it, as DeliveryLockOpen.
SELECT * FROM replay_deliveries WHERE replay_id = @replay_id AND event_id = @event_id
  AND status NOT IN ('delivered', 'dead') AND next_attempt_at <= clock_timestamp()
FOR UPDATE;

-- name: ReplayDeliveryRecordAttempt :one
UPDATE replay_deliveries SET
    status = @status, attempts = attempts + 1, last_error = sqlc.narg('last_error'),
    response_status = sqlc.narg('response_status'), response_body = sqlc.narg('response_body'),
    duration_ms = @duration_ms,
    delivered_at = CASE WHEN @status = 'delivered' THEN clock_timestamp() END,
    next_attempt_at = clock_timestamp() + make_interval(secs => @retry_in_s::float8),
    updated_at = clock_timestamp()
WHERE replay_id = @replay_id AND event_id = @event_id
RETURNING *;

-- name: ReplayDeliveryListLaterOpen :many
-- The first open, due record of a running replay of subscriber
-- @subscriber_id of an event after @id of the same document: the one
-- waiting for @id (the document's later ones wait for it in turn, and it
-- releases them one by one). Found through the document's events (see
-- dispatch.sql's note on backlogs).
SELECT d.replay_id, d.event_id FROM replay_deliveries d JOIN events e ON e.id = d.event_id
JOIN replays r ON r.id = d.replay_id
WHERE d.subscriber_id = @subscriber_id AND d.status NOT IN ('delivered', 'dead') AND r.status = 'running'
  AND e.entity = @entity AND e.entity_id = @entity_id AND e.id > @id
  AND d.next_attempt_at <= clock_timestamp()
ORDER BY d.event_id LIMIT 1;

-- name: ReplayDeliveryListOpenOfSubscriber :many
-- Open records of the running replay of a subscriber (a batch at most).
SELECT d.replay_id, d.event_id FROM replay_deliveries d JOIN replays r ON r.id = d.replay_id
WHERE d.subscriber_id = @subscriber_id AND d.status IN ('pending', 'failed') AND r.status = 'running'
ORDER BY d.event_id;

-- name: ReplayDeliveryListDue :many
-- Open records of running replays due now, of subscribers not paused,
-- after a key.
SELECT d.replay_id, d.event_id FROM replay_deliveries d JOIN replays r ON r.id = d.replay_id
JOIN subscribers s ON s.id = d.subscriber_id
WHERE d.status IN ('pending', 'failed') AND d.next_attempt_at <= now() AND NOT s.paused AND r.status = 'running'
  AND EXISTS (SELECT 1 FROM subscriber_leases l WHERE l.subscriber_id = s.id AND l.leased_until <= now())
  AND (d.replay_id, d.event_id) > (@after_replay_id::bigint, @after_event_id::bigint)
ORDER BY d.replay_id, d.event_id LIMIT @max_rows;

-- name: DeliveryListLaterOpenOfDocuments :many
-- Open, due live deliveries to @subscriber_id of events of the documents
-- of events @ids, after the first of them: the ones a replay's range held
-- back until its cursor passed. Found through the documents' events (see
-- dispatch.sql's note on backlogs).
SELECT d.event_id, d.subscriber_id FROM deliveries d JOIN events e ON e.id = d.event_id
WHERE d.subscriber_id = @subscriber_id AND d.status NOT IN ('delivered', 'dead') AND d.next_attempt_at <= clock_timestamp()
  AND (e.entity, e.entity_id) IN (SELECT b.entity, b.entity_id FROM events b WHERE b.id = ANY(@ids::bigint[]))
  AND e.id > (SELECT min(x) FROM unnest(@ids::bigint[]) x)
ORDER BY d.event_id LIMIT 1000;

-- name: DeliveryListDueOfSubscriber :many
-- Open live deliveries to @subscriber_id due now.
SELECT event_id, subscriber_id FROM deliveries
WHERE subscriber_id = @subscriber_id AND status IN ('pending', 'failed') AND next_attempt_at <= clock_timestamp()
ORDER BY event_id LIMIT 10000;

-- name: ReplayDeliveryDeleteEnded :execrows
-- Up to @max_rows records of replays that ended before @before (the
-- replays themselves are kept).
DELETE FROM replay_deliveries WHERE (replay_id, event_id) IN (
    SELECT d.replay_id, d.event_id FROM replay_deliveries d JOIN replays r ON r.id = d.replay_id
    WHERE r.status <> 'running' AND r.finished_at < @before LIMIT @max_rows);

-- name: ReplayDeliveryLease :one
-- Leases the replayed delivery (locked by the caller), as DeliveryLease
-- the live one.
WITH abandoned AS (
    UPDATE delivery_attempts SET error = 'no answer was recorded before the lease ran out'
    WHERE replay_id = @replay_id AND event_id = @event_id AND status IS NULL AND error IS NULL
), d AS (
    UPDATE replay_deliveries SET lease_holder = @holder, attempts = attempts + 1,
        next_attempt_at = clock_timestamp() + make_interval(secs => @ttl_s::float8), updated_at = clock_timestamp()
    WHERE replay_id = @replay_id AND event_id = @event_id
    RETURNING subscriber_id, attempts
)
INSERT INTO delivery_attempts (event_id, subscriber_id, replay_id, attempt, lease_holder, instance)
SELECT @event_id, d.subscriber_id, sqlc.arg(replay_id)::bigint, d.attempts, @holder, @instance FROM d
RETURNING id, attempt;

-- name: ReplayDeliveryRecordLeased :one
-- Records the outcome of the attempt @holder leased, as
-- DeliveryRecordLeased; no row when the lease is no longer @holder's.
UPDATE replay_deliveries SET
    status = @status, last_error = sqlc.narg('last_error'),
    response_status = sqlc.narg('response_status'), response_body = sqlc.narg('response_body'),
    duration_ms = @duration_ms,
    delivered_at = CASE WHEN @status = 'delivered' THEN clock_timestamp() END,
    next_attempt_at = clock_timestamp() + make_interval(secs => @retry_in_s::float8),
    lease_holder = NULL, updated_at = clock_timestamp()
WHERE replay_id = @replay_id AND event_id = @event_id AND lease_holder = @holder::text
  AND status NOT IN ('delivered', 'dead')
RETURNING *;

-- name: ReplayDeliveryLeaseDrop :exec
-- Gives the replayed delivery @holder leased back, as DeliveryLeaseDrop.
UPDATE replay_deliveries SET lease_holder = NULL,
    next_attempt_at = clock_timestamp(), updated_at = clock_timestamp()
WHERE replay_id = @replay_id AND event_id = @event_id AND lease_holder = @holder::text
  AND status NOT IN ('delivered', 'dead');

-- name: ReplayDeliveryListNextDueOfSubscriber :many
-- Up to @max_rows open, due records of the running replay of webhook
-- @subscriber_id held back by no earlier record of their document in the
-- replay, oldest event first: what a lease slot given back takes next
-- (the replay's open records are one batch at most).
SELECT d.replay_id, d.event_id FROM replay_deliveries d JOIN replays r ON r.id = d.replay_id JOIN events e ON e.id = d.event_id
WHERE d.subscriber_id = @subscriber_id AND d.status IN ('pending', 'failed') AND r.status = 'running'
  AND d.next_attempt_at <= clock_timestamp()
  AND NOT EXISTS (
    SELECT 1 FROM replay_deliveries q JOIN events p ON p.id = q.event_id
    WHERE q.replay_id = d.replay_id AND q.event_id < d.event_id AND q.status IN ('pending', 'failed')
      AND p.entity = e.entity AND p.entity_id = e.entity_id)
ORDER BY d.event_id LIMIT @max_rows;
