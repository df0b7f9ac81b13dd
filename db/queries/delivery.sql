-- Delivery records, one per (event, subscriber) (table deliveries, read
-- through view delivery_rows, which adds the subscriber's name).
-- Statements that lock or write join the name to the rows they lock or
-- return, in the view's column order: the view would show the version the
-- statement started with.

-- name: DeliveryListOpenKeysOfSubscriber :many
SELECT event_id, subscriber_id FROM deliveries
WHERE subscriber_id = @subscriber_id AND status IN ('pending', 'failed') ORDER BY event_id;

-- name: DeliveryLockOpen :one
-- Locks an open delivery that is due: not a failed attempt's retry before
-- next_attempt_at (it waits for its own job, however many other jobs — a
-- release by an earlier event, a duplicate — name it), nor one leased for
-- a request in flight (leased until next_attempt_at). It waits for a
-- transaction that holds the row: takes and records are short, and a job
-- that released this delivery must not be skipped by a take that saw its
-- earlier event still open; once the holder commits the row is checked
-- again (a lease it took makes it not due). Open is NOT IN the closed
-- statuses: the lookup goes by the key (see dispatch.sql's note on
-- backlogs).
WITH d AS (
    SELECT * FROM deliveries WHERE event_id = @event_id AND subscriber_id = @subscriber_id
      AND status NOT IN ('delivered', 'dead') AND next_attempt_at <= clock_timestamp()
    FOR UPDATE
)
SELECT d.*, s.name AS subscriber_name FROM d JOIN subscribers s ON s.id = d.subscriber_id;

-- name: DeliveryRecordAttempt :one
WITH d AS (
    UPDATE deliveries SET
        status = @status, attempts = attempts + 1, last_error = sqlc.narg('last_error'),
        response_status = sqlc.narg('response_status'), response_body = sqlc.narg('response_body'),
        duration_ms = @duration_ms,
        delivered_at = CASE WHEN @status = 'delivered' THEN clock_timestamp() END,
        next_attempt_at = clock_timestamp() + make_interval(secs => @retry_in_s::float8),
        updated_at = clock_timestamp()
    WHERE event_id = @event_id AND subscriber_id = @subscriber_id
    RETURNING *
)
SELECT d.*, s.name AS subscriber_name FROM d JOIN subscribers s ON s.id = d.subscriber_id;

-- name: DeliveryListLaterOpen :many
-- Open, due deliveries of events after @id of the same document, to
-- subscriber_id or any: "due" by the clock at the query, not at the
-- transaction's start. Found through the document's events, as in
-- dispatch.sql (its note on backlogs).
SELECT d.event_id, d.subscriber_id FROM deliveries d JOIN events e ON e.id = d.event_id
JOIN subscribers s ON s.id = d.subscriber_id
WHERE e.entity = @entity AND e.entity_id = @entity_id AND e.id > @id
  AND (sqlc.narg('subscriber_id')::bigint IS NULL OR d.subscriber_id = sqlc.narg('subscriber_id'))
  AND d.status NOT IN ('delivered', 'dead') AND d.next_attempt_at <= clock_timestamp() AND NOT s.paused
ORDER BY d.event_id LIMIT 100;

-- name: DeliveryListDue :many
-- Open deliveries due now, of subscribers not paused, after a key; a
-- webhook's only while one of its lease slots is free (its backlog waits
-- for a slot given back, not for the sweep).
SELECT d.event_id, d.subscriber_id FROM deliveries d JOIN subscribers s ON s.id = d.subscriber_id
WHERE d.status IN ('pending', 'failed') AND d.next_attempt_at <= now() AND NOT s.paused
  AND (s.kind = 'builtin' OR EXISTS (
    SELECT 1 FROM subscriber_leases l WHERE l.subscriber_id = s.id AND l.leased_until <= now()))
  AND (d.event_id, d.subscriber_id) > (@after_event_id::bigint, @after_subscriber_id::bigint)
ORDER BY d.event_id, d.subscriber_id LIMIT @max_rows;

-- name: DeliveryListByEvents :many
SELECT * FROM delivery_rows WHERE event_id = ANY(@event_ids::bigint[]) ORDER BY event_id, subscriber_name;

-- name: DeliveryListPage :many
-- Newest event first, below a key (the primary key, descending).
SELECT * FROM delivery_rows
WHERE (event_id, subscriber_id) < (@before_event_id::bigint, @before_subscriber_id::bigint)
  AND (sqlc.narg('status')::text IS NULL OR status = sqlc.narg('status'))
  AND (sqlc.narg('subscriber')::text IS NULL OR subscriber_name = sqlc.narg('subscriber'))
  AND (sqlc.narg('event_id')::bigint IS NULL OR event_id = sqlc.narg('event_id'))
  -- Deliveries of events of tables the reader may not see (event.sql):
  -- their ids hashed once (events_entity), not an event looked up per row.
  AND (sqlc.narg('hidden_entities')::text[] IS NULL OR event_id NOT IN (
    SELECT e.id FROM events e WHERE e.entity = ANY(sqlc.narg('hidden_entities')::text[])))
ORDER BY event_id DESC, subscriber_id DESC LIMIT @max_rows;

-- name: DeliveryReopen :many
-- Reopens the matching deliveries (any status) for a fresh round of attempts.
WITH picked AS (
    SELECT d.event_id, d.subscriber_id FROM deliveries d JOIN subscribers s ON s.id = d.subscriber_id
    WHERE (sqlc.narg('status')::text IS NULL OR d.status = sqlc.narg('status'))
      AND (sqlc.narg('subscriber')::text IS NULL OR s.name = sqlc.narg('subscriber'))
      AND (sqlc.narg('event_id')::bigint IS NULL OR d.event_id = sqlc.narg('event_id'))
    ORDER BY d.event_id LIMIT @max_rows
    FOR UPDATE OF d
)
UPDATE deliveries d SET status = 'pending', attempts = 0, delivered_at = NULL, lease_holder = NULL, next_attempt_at = now(), updated_at = now()
FROM picked WHERE d.event_id = picked.event_id AND d.subscriber_id = picked.subscriber_id
RETURNING d.event_id, d.subscriber_id;

-- name: DeliveryDeleteDelivered :execrows
-- Up to @max_rows delivery records delivered before @before.
DELETE FROM deliveries WHERE (event_id, subscriber_id) IN (
    SELECT o.event_id, o.subscriber_id FROM deliveries o WHERE o.status = 'delivered' AND o.delivered_at < @before LIMIT @max_rows);

-- name: DeliveryDeleteDead :execrows
-- Dead delivery records last attempted before @before, of one subscriber or all.
DELETE FROM deliveries d USING subscribers s
WHERE s.id = d.subscriber_id AND d.status = 'dead' AND d.updated_at < @before
  AND (sqlc.narg('subscriber')::text IS NULL OR s.name = sqlc.narg('subscriber'));

-- name: DeliveryLease :one
-- Leases the delivery (locked by the caller) to @holder for one attempt:
-- one more attempt counted, not due again until the lease runs out
-- (@ttl_s seconds), and the attempt's start logged by @instance. An
-- earlier attempt of the delivery still without an outcome (its worker
-- never came back) is noted as such. Returns the attempt's log id and
-- number.
WITH abandoned AS (
    UPDATE delivery_attempts SET error = 'no answer was recorded before the lease ran out'
    WHERE event_id = @event_id AND subscriber_id = @subscriber_id AND replay_id IS NULL
      AND status IS NULL AND error IS NULL
), d AS (
    UPDATE deliveries SET lease_holder = @holder, attempts = attempts + 1,
        next_attempt_at = clock_timestamp() + make_interval(secs => @ttl_s::float8), updated_at = clock_timestamp()
    WHERE event_id = @event_id AND subscriber_id = @subscriber_id
    RETURNING attempts
)
INSERT INTO delivery_attempts (event_id, subscriber_id, attempt, lease_holder, instance)
SELECT @event_id, @subscriber_id, d.attempts, @holder, @instance FROM d
RETURNING id, attempt;

-- name: DeliveryRecordLeased :one
-- Records the outcome of the attempt @holder leased, if the lease is
-- still @holder's (not taken over after it ran out, nor reset by a
-- redelivery); no row otherwise. Ends the lease.
WITH d AS (
    UPDATE deliveries SET
        status = @status, last_error = sqlc.narg('last_error'),
        response_status = sqlc.narg('response_status'), response_body = sqlc.narg('response_body'),
        duration_ms = @duration_ms,
        delivered_at = CASE WHEN @status = 'delivered' THEN clock_timestamp() END,
        next_attempt_at = clock_timestamp() + make_interval(secs => @retry_in_s::float8),
        lease_holder = NULL, updated_at = clock_timestamp()
    WHERE event_id = @event_id AND subscriber_id = @subscriber_id AND lease_holder = @holder::text
      AND status NOT IN ('delivered', 'dead')
    RETURNING *
)
SELECT d.*, s.name AS subscriber_name FROM d JOIN subscribers s ON s.id = d.subscriber_id;

-- name: DeliveryLeaseDrop :exec
-- Gives the delivery @holder leased back before its answer came (the
-- server is stopping): due at once. The attempt stays counted: its request
-- went out, and the log keeps it under its number.
UPDATE deliveries SET lease_holder = NULL,
    next_attempt_at = clock_timestamp(), updated_at = clock_timestamp()
WHERE event_id = @event_id AND subscriber_id = @subscriber_id AND lease_holder = @holder::text
  AND status NOT IN ('delivered', 'dead');

-- name: DeliveryAttemptFinish :exec
-- Completes attempt log row @id with its outcome.
UPDATE delivery_attempts SET status = sqlc.narg('status'), duration_ms = @duration_ms,
    response_status = sqlc.narg('response_status'), response_body = sqlc.narg('response_body'),
    error = sqlc.narg('error')
WHERE id = @id;

-- name: DeliveryAttemptListOf :many
-- The attempt log of live deliveries @event_ids × @subscriber_ids
-- (pairs), newest first.
SELECT a.* FROM delivery_attempts a
JOIN (SELECT unnest(@event_ids::bigint[]) AS event_id, unnest(@subscriber_ids::bigint[]) AS subscriber_id) k
  ON a.event_id = k.event_id AND a.subscriber_id = k.subscriber_id
WHERE a.replay_id IS NULL
ORDER BY a.event_id, a.subscriber_id, a.id DESC;

-- name: DeliveryAttemptDeleteOld :execrows
-- Up to @max_rows attempt log rows started before @before.
DELETE FROM delivery_attempts WHERE id IN (
    SELECT o.id FROM delivery_attempts o WHERE o.started_at < @before ORDER BY o.started_at LIMIT @max_rows);

-- name: DeliveryListNextDueOfSubscriber :many
-- Up to @max_rows deliveries to webhook @subscriber_id that are open, due
-- (not leased, no retry waiting for its time) and held back by no earlier
-- event of their document (its delivery to the subscriber open), soonest
-- due first (index deliveries_due_of_subscriber): what a lease slot given
-- back takes next.
SELECT d.event_id, d.subscriber_id FROM deliveries d JOIN events e ON e.id = d.event_id
WHERE d.subscriber_id = @subscriber_id AND d.status IN ('pending', 'failed') AND d.next_attempt_at <= clock_timestamp()
  AND NOT EXISTS (
    SELECT 1 FROM events p JOIN deliveries pd ON pd.event_id = p.id AND pd.subscriber_id = d.subscriber_id
    WHERE p.entity = e.entity AND p.entity_id = e.entity_id AND p.id < e.id AND pd.status IN ('pending', 'failed'))
ORDER BY d.next_attempt_at LIMIT @max_rows;
