-- Dispatch: locking the events a dispatch transaction takes, the
-- document-order rule, and marking events processed for the live feed.
-- Locks are taken on events in a CTE and the rows read through event_rows:
-- the columns a lock re-check could change (dispatched_at, processed_at)
-- are null in both versions, the others never change.
--
-- Backlogs. The statistics of a journal are taken while it is quiet (no
-- event unprocessed, no delivery open), so until the next analyze the
-- planner takes events_unprocessed and the open-delivery indexes for a
-- handful of rows: a plan that reads one of them whole, once per event of
-- a batch, is the cheapest on paper and quadratic in the backlog an outage
-- leaves. The statements here reach events by id or by document
-- (events_entity) and open deliveries by their event (deliveries_pkey);
-- an open delivery is written as status NOT IN the closed ones, which the
-- planner cannot match to the open-delivery indexes' predicate.

-- name: EventLockForDispatch :one
-- Waits while another transaction holds the event.
WITH l AS (
    SELECT e.id FROM events e WHERE e.id = @id AND e.dispatched_at IS NULL AND e.processed_at IS NULL FOR UPDATE
)
SELECT sqlc.embed(event_rows), extract(epoch FROM clock_timestamp() - event_rows.created_at)::float8 AS waited_s
FROM event_rows WHERE event_rows.id IN (SELECT l.id FROM l);

-- name: EventLockForDispatchNowait :one
-- Fails with lock_not_available while another transaction holds the event.
WITH l AS (
    SELECT e.id FROM events e WHERE e.id = @id AND e.dispatched_at IS NULL AND e.processed_at IS NULL FOR UPDATE NOWAIT
)
SELECT sqlc.embed(event_rows), extract(epoch FROM clock_timestamp() - event_rows.created_at)::float8 AS waited_s
FROM event_rows WHERE event_rows.id IN (SELECT l.id FROM l);

-- name: EventClaimBacklog :many
-- Up to @max_events undispatched events after @after_id that no other
-- transaction holds, except @skip_ids: the oldest of those not in
-- @waiting_ids first (index events_undispatched), then, for the room
-- left, the oldest of @waiting_ids (events whose dispatch jobs wait in
-- the caller's process).
WITH c AS (
    SELECT e.id FROM events e
    WHERE e.dispatched_at IS NULL AND e.processed_at IS NULL AND e.id > @after_id
      AND e.id <> ALL(@skip_ids::bigint[]) AND e.id <> ALL(@waiting_ids::bigint[])
    ORDER BY e.id LIMIT sqlc.arg(max_events)::int FOR UPDATE SKIP LOCKED
), w AS (
    SELECT e.id FROM events e
    WHERE e.id = ANY(@waiting_ids::bigint[]) AND e.dispatched_at IS NULL AND e.processed_at IS NULL AND e.id > @after_id
      AND e.id <> ALL(@skip_ids::bigint[])
    ORDER BY e.id LIMIT greatest(sqlc.arg(max_events)::int - (SELECT count(*) FROM c), 0) FOR UPDATE SKIP LOCKED
)
SELECT * FROM event_rows WHERE event_rows.id IN (SELECT c.id FROM c UNION ALL SELECT w.id FROM w) ORDER BY event_rows.id;

-- name: EventPlanDispatch :many
-- Per event of the batch @ids (locked by the caller): whether an earlier
-- unprocessed event of its document outside the batch is held by another
-- transaction (held; the others are share-locked here, so that a fresh
-- statement sees what their holders committed), whether its document has
-- an earlier event (only then can the document's order hold a delivery
-- back) or a later one outside the batch, and the subscribers whose types
-- and entities it matches (their conditions are the caller's).
WITH b AS (
    SELECT id, type, entity, entity_id FROM events WHERE id = ANY(@ids::bigint[])
), doc AS MATERIALIZED (
    -- The other events of the batch's documents, found by document
    -- (events_entity), with no test of processed_at the planner could
    -- answer from a backlog's index (see the file's note on backlogs).
    SELECT x.id, x.entity, x.entity_id, x.processed_at IS NULL AS unprocessed
    FROM (SELECT DISTINCT entity, entity_id FROM b) k
    JOIN events x ON x.entity = k.entity AND x.entity_id = k.entity_id
    WHERE x.id <> ALL(@ids::bigint[])
), outside AS (
    SELECT o.id FROM events o
    WHERE o.id = ANY(ARRAY(SELECT doc.id FROM doc WHERE doc.unprocessed AND doc.id < (SELECT max(id) FROM b)))
      AND o.processed_at IS NULL
    ORDER BY o.id
    FOR SHARE SKIP LOCKED
), f AS (
    SELECT b.id,
        coalesce(bool_or(x.id < b.id AND x.unprocessed AND x.id NOT IN (SELECT id FROM outside)), false)::boolean AS held,
        coalesce(bool_or(x.id < b.id), false)::boolean AS earlier,
        coalesce(bool_or(x.id > b.id), false)::boolean AS later
    FROM b LEFT JOIN doc x ON x.entity = b.entity AND x.entity_id = b.entity_id
    GROUP BY b.id
)
-- One row per event and matching subscriber (none: one row, s null).
SELECT b.id AS event_id, f.held, f.earlier, f.later, s.*
FROM b JOIN f ON f.id = b.id
LEFT JOIN subscriber_rows s ON (cardinality(s.event_types) = 0 OR b.type = ANY(s.event_types))
    AND (cardinality(s.entities) = 0 OR b.entity = ANY(s.entities))
ORDER BY b.id, s.id;

-- name: EventLockEarlier :exec
-- Share-locks the unprocessed events of a document before @id, waiting
-- for a dispatch or a finishing delivery of them in flight.
SELECT id FROM events
WHERE id = ANY(ARRAY(SELECT d.id FROM events d WHERE d.entity = @entity AND d.entity_id = @entity_id AND d.id < @id))
  AND processed_at IS NULL
ORDER BY id FOR SHARE;

-- name: DeliveryListBlocked :many
-- The document-order rule, the one place it is written: a delivery (an
-- event to a subscriber) waits while an earlier event of the same document
-- (entity, entity_id), outside @batch_ids, has its delivery to that
-- subscriber open (pending or failed), or has not been dispatched yet (its
-- deliveries are not known). A dead earlier delivery does not hold the
-- document (it would forever); a redelivered one holds it again. A running
-- replay of the subscriber holds it too, at an earlier event of the
-- document whose replayed delivery is open or that the replay's batches
-- have not reached yet (its range, types and tables; the condition is not
-- known before). The rule holds for a replayed delivery (a key of its
-- event and the replay's subscriber) as for a live one. Returns the keys
-- of the given deliveries that wait.
SELECT k.event_id::bigint AS event_id, k.subscriber_id::bigint AS subscriber_id
FROM (SELECT unnest(@event_ids::bigint[]) AS event_id, unnest(@subscriber_ids::bigint[]) AS subscriber_id) k
JOIN events e ON e.id = k.event_id
WHERE EXISTS (
    SELECT 1 FROM events p
    LEFT JOIN deliveries pd ON pd.event_id = p.id AND pd.subscriber_id = k.subscriber_id
    WHERE p.entity = e.entity AND p.entity_id = e.entity_id AND p.id < e.id AND p.id <> ALL(@batch_ids::bigint[])
      AND (pd.status IN ('pending', 'failed') OR (pd.event_id IS NULL AND p.processed_at IS NULL AND p.dispatched_at IS NULL))
) OR EXISTS (
    SELECT 1 FROM replays r JOIN events p ON p.entity = e.entity AND p.entity_id = e.entity_id AND p.id < e.id
    WHERE r.subscriber_id = k.subscriber_id AND r.status = 'running'
      AND (EXISTS (SELECT 1 FROM replay_deliveries rd WHERE rd.replay_id = r.id AND rd.event_id = p.id
                   AND rd.status IN ('pending', 'failed'))
           OR (NOT r.written AND p.id > r.cursor_id AND p.feed_seq > r.after_seq AND p.feed_seq <= r.last_seq
               AND (r.created_from IS NULL OR p.created_at >= r.created_from)
               AND (r.created_to IS NULL OR p.created_at < r.created_to)
               AND (cardinality(r.event_types) = 0 OR p.type = ANY(r.event_types))
               AND (cardinality(r.entities) = 0 OR p.entity = ANY(r.entities))))
);

-- name: EventMarkDispatched :many
-- Records the deliveries a dispatch made or left (one row per key, with
-- the outcome of its first attempt, if any: attempts 0 is pending) and
-- stamps the events @stamp_ids dispatched (EventMarkProcessed stamps the
-- ones it marks). Returns the records of failed attempts with their next
-- attempt time (database clock + retry_in_s).
WITH t AS (
    SELECT clock_timestamp() AS at
), ins AS (
    INSERT INTO deliveries (event_id, subscriber_id, status, attempts, last_error, delivered_at, duration_ms,
        next_attempt_at, created_at, updated_at)
    SELECT k.event_id, k.subscriber_id, k.status, k.attempts, nullif(k.last_error, ''),
        CASE WHEN k.status = 'delivered' THEN t.at END, CASE WHEN k.attempts > 0 THEN k.duration_ms END,
        t.at + make_interval(secs => k.retry_in_s), t.at, t.at
    FROM (SELECT unnest(@event_ids::bigint[]) AS event_id, unnest(@subscriber_ids::bigint[]) AS subscriber_id,
            unnest(@statuses::text[]) AS status, unnest(@attempts::integer[]) AS attempts,
            unnest(@last_errors::text[]) AS last_error, unnest(@durations_ms::integer[]) AS duration_ms,
            unnest(@retry_in_s::float8[]) AS retry_in_s) k, t
    RETURNING event_id, subscriber_id, status, next_attempt_at
), stamp AS (
    -- Runs whether or not it is read, as every data-modifying CTE.
    UPDATE events SET dispatched_at = t.at FROM t
    WHERE events.id = ANY(@stamp_ids::bigint[]) AND events.dispatched_at IS NULL AND events.processed_at IS NULL
    RETURNING events.id
)
SELECT event_id, subscriber_id, next_attempt_at FROM ins WHERE status = 'failed';

-- name: EventLockUnprocessed :exec
-- Locks the events @ids not processed yet, in id order.
SELECT id FROM events WHERE id = ANY(@ids::bigint[]) AND processed_at IS NULL ORDER BY id FOR UPDATE;

-- name: EventMarkProcessed :many
-- Marks processed those of the events @ids not processed yet none of whose
-- built-in deliveries is open (pending or failed): an external delivery
-- (a webhook's) never holds an event, its record is enough. Stamps undispatched ones
-- dispatched too, gives them the next feed sequences in id order, and
-- queues one NOTIFY on @channel whose payload is the highest, delivered at
-- commit. Taking the sequences row-locks feed_counter until commit, so
-- sequences commit, and notifications arrive, in increasing order. Returns
-- each marked event with its latency (processed_at - created_at, seconds).
-- Every scan is bounded by @ids (see the file's note on backlogs).
WITH todo AS (
    SELECT e.id, row_number() OVER (ORDER BY e.id) AS n, count(*) OVER () AS total
    FROM events e WHERE e.id = ANY(@ids::bigint[]) AND e.processed_at IS NULL
      AND NOT EXISTS (SELECT 1 FROM deliveries d JOIN subscribers b ON b.id = d.subscriber_id
                      WHERE d.event_id = e.id AND d.status NOT IN ('delivered', 'dead') AND b.kind = 'builtin')
), s AS (
    UPDATE feed_counter SET last_seq = last_seq + (SELECT count(*) FROM todo)
    WHERE EXISTS (SELECT 1 FROM todo)
    RETURNING last_seq
), marked AS (
    UPDATE events SET processed_at = t.at, dispatched_at = coalesce(events.dispatched_at, t.at),
        feed_seq = s.last_seq - todo.total + todo.n
    FROM todo, s, (SELECT clock_timestamp() AS at) t
    WHERE events.id = todo.id AND events.id = ANY(@ids::bigint[]) AND events.processed_at IS NULL
    RETURNING events.id, events.feed_seq, events.processed_at - events.created_at AS latency
)
SELECT id, extract(epoch FROM latency)::float8 AS latency_s, pg_notify(@channel, (max(feed_seq) OVER ())::text)::text AS notified
FROM marked ORDER BY id;

-- name: EventSetDispatchJobs :exec
-- Notes the dispatch job River enqueued for each event.
UPDATE events SET dispatch_job_id = j.job_id
FROM (SELECT unnest(@event_ids::bigint[]) AS event_id, unnest(@job_ids::bigint[]) AS job_id) j
WHERE events.id = j.event_id;

-- name: TxSetTimeouts :one
-- Bounds every lock wait and every statement of the transaction from here
-- on to @lock_timeout and @statement_timeout (their settings' syntax,
-- "0": unbounded; NULL leaves that one as it is) and returns the bounds
-- before, to restore them with.
WITH prev AS MATERIALIZED (SELECT current_setting('lock_timeout') AS lock_timeout, current_setting('statement_timeout') AS statement_timeout)
SELECT prev.lock_timeout::text AS previous_lock_timeout, prev.statement_timeout::text AS previous_statement_timeout,
    set_config('lock_timeout', coalesce(sqlc.narg('lock_timeout')::text, prev.lock_timeout), true)::text AS lock_timeout,
    set_config('statement_timeout', coalesce(sqlc.narg('statement_timeout')::text, prev.statement_timeout), true)::text AS statement_timeout
FROM prev;

-- name: EventListUndispatchedIDs :many
-- Unprocessed events whose deliveries were never created, after @after_id.
SELECT id FROM events
WHERE processed_at IS NULL AND dispatched_at IS NULL AND id > @after_id ORDER BY id LIMIT @max_rows;

-- name: EventListUnfinishedIDs :many
-- Dispatched, unprocessed events with no open built-in delivery left,
-- after @after_id.
SELECT e.id FROM events e
WHERE e.processed_at IS NULL AND e.dispatched_at IS NOT NULL AND e.id > @after_id
  AND NOT EXISTS (SELECT 1 FROM deliveries d JOIN subscribers b ON b.id = d.subscriber_id
                  WHERE d.event_id = e.id AND d.status NOT IN ('delivered', 'dead') AND b.kind = 'builtin')
ORDER BY e.id LIMIT @max_rows;
