package db

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// This file holds the statements of the batched dispatch (jobs'
// dispatchBatch): a batch of locked, undispatched events is planned in one
// statement, its built-in deliveries are made without a savepoint each,
// and its delivery records are written with their outcome, the events
// stamped and the finished ones marked, all in one closing statement. Any
// surprise (a subscriber failing, a lock wait) rolls the whole batch back
// and the careful path, one savepoint per delivery, does it again.

// LockBatchHead locks undispatched event id like LockUndispatchedEvent
// (NOWAIT with nowait: ErrLocked) and also returns how long it has waited
// for its dispatch so far (database clock).
func LockBatchHead(ctx context.Context, tx pgx.Tx, id int64, nowait bool) (Event, time.Duration, error) {
	lock := ""
	if nowait {
		lock = "NOWAIT"
	}
	rows, err := tx.Query(ctx, `
		WITH e AS (
			SELECT * FROM events WHERE id = $1 AND dispatched_at IS NULL AND processed_at IS NULL FOR UPDATE `+lock+`
		)
		SELECT `+eventColumnsFromJoin+`, extract(epoch FROM clock_timestamp() - e.created_at)::float8 AS waited
		FROM e LEFT JOIN users u ON u.id = e.actor_id`, id)
	if err != nil {
		return Event{}, 0, fmt.Errorf("lock event %d: %w", id, translate(err))
	}
	type head struct {
		Event
		Waited float64 `db:"waited"`
	}
	h, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[head])
	if err != nil {
		return Event{}, 0, fmt.Errorf("lock event %d: %w", id, translate(err))
	}
	return h.Event, time.Duration(h.Waited * float64(time.Second)), nil
}

// ClaimBacklog is ClaimUndispatchedEvents for the batched dispatch: it
// also passes over the events whose dispatch job is running (River fetched
// it: that job is about to lock its event, and taking the event on would
// only make it wait for this batch and then find nothing to do), and it
// returns the ids of the claimed events' dispatch jobs that are not
// running (index river_job_dispatch_event), for the caller to delete
// before River fetches them.
func ClaimBacklog(ctx context.Context, tx pgx.Tx, afterID int64, limit int) ([]Event, []int64, error) {
	rows, err := tx.Query(ctx, `
		WITH running AS MATERIALIZED (
			SELECT (args ->> 'event_id')::bigint AS id FROM river_job WHERE kind = 'dispatch_event' AND state = 'running'
		), e AS (
			SELECT * FROM events WHERE dispatched_at IS NULL AND processed_at IS NULL AND id > $1
			  AND id NOT IN (SELECT id FROM running WHERE id IS NOT NULL)
			ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED
		)
		SELECT `+eventColumnsFromJoin+`, ARRAY(SELECT j.id FROM river_job j WHERE j.kind = 'dispatch_event'
			AND (j.args ->> 'event_id')::bigint = e.id AND j.state <> 'running') AS job_ids
		FROM e LEFT JOIN users u ON u.id = e.actor_id ORDER BY e.id`, afterID, limit)
	if err != nil {
		return nil, nil, fmt.Errorf("claim backlog: %w", err)
	}
	type claimed struct {
		Event
		JobIDs []int64 `db:"job_ids"`
	}
	all, err := pgx.CollectRows(rows, pgx.RowToStructByName[claimed])
	if err != nil {
		return nil, nil, fmt.Errorf("claim backlog: %w", err)
	}
	events := make([]Event, len(all))
	var jobIDs []int64
	for i, c := range all {
		events[i] = c.Event
		jobIDs = append(jobIDs, c.JobIDs...)
	}
	return events, jobIDs, nil
}

// BatchPlan is what PlanBatch found for one event of a batch.
type BatchPlan struct {
	EventID int64
	// Subscribers whose types match the event, by id. An undispatched
	// event has no delivery record yet; should one exist (written by
	// hand), CloseBatch fails with ErrConflict.
	Subscribers []Subscriber
	// Held: an earlier unprocessed event of the document, outside the
	// batch, is held by another transaction; the event must wait for it.
	Held bool
	// Check: an earlier event of the document outside the batch is
	// unprocessed (now share-locked by us) or has an open delivery; which
	// built-in deliveries it holds back needs BlockedOutsideBatch.
	Check bool
	// Later: the document has an event after this one outside the batch,
	// whose deliveries this one may have held back.
	Later bool
}

// PlanBatch share-locks, skipping those another transaction holds, the
// unprocessed events outside the batch ids that come before a batch event
// of the same document, and returns per event of ids (in id order) its
// matching subscribers and what its document's other events need. It is
// planned at every call (no cached generic plan): deliveries grows fast
// while a backlog drains, and a plan cached while it was small scans it
// whole for the open deliveries.
func PlanBatch(ctx context.Context, tx pgx.Tx, ids []int64) ([]BatchPlan, error) {
	rows, err := tx.Query(ctx, `
		WITH b AS (
			SELECT id, type, entity, entity_id FROM events WHERE id = ANY($1)
		), outside AS (
			SELECT o.id FROM events o
			WHERE (o.entity, o.entity_id) IN (SELECT entity, entity_id FROM b)
			  AND o.id < (SELECT max(id) FROM b) AND o.processed_at IS NULL AND o.id <> ALL($1)
			ORDER BY o.id
			FOR SHARE SKIP LOCKED
		), f AS (
			SELECT b.id,
				EXISTS (SELECT 1 FROM events x WHERE x.entity = b.entity AND x.entity_id = b.entity_id AND x.id < b.id
				        AND x.processed_at IS NULL AND x.id <> ALL($1) AND x.id NOT IN (SELECT id FROM outside)) AS held,
				EXISTS (SELECT 1 FROM events x WHERE x.entity = b.entity AND x.entity_id = b.entity_id AND x.id < b.id
				        AND x.id <> ALL($1) AND (x.processed_at IS NULL
				            OR EXISTS (SELECT 1 FROM deliveries xd WHERE xd.event_id = x.id AND xd.status IN ('pending', 'failed')))) AS check,
				EXISTS (SELECT 1 FROM events x WHERE x.entity = b.entity AND x.entity_id = b.entity_id AND x.id > b.id
				        AND x.id <> ALL($1)) AS later
			FROM b
		)
		SELECT b.id AS batch_event_id, f.held, f.check, f.later,
			s.id, s.name, s.kind, s.event_types, s.url, s.secret IS NOT NULL AND s.secret <> '' AS has_secret,
			s.max_attempts, s.timeout_ms, s.paused, s.created_at, s.updated_at
		FROM b JOIN f ON f.id = b.id
		LEFT JOIN subscribers s ON cardinality(s.event_types) = 0 OR b.type = ANY (s.event_types)
		ORDER BY b.id, s.id`, pgx.QueryExecModeExec, ids)
	if err != nil {
		return nil, fmt.Errorf("plan dispatch of %d events: %w", len(ids), translate(err))
	}
	defer rows.Close()
	var plans []BatchPlan
	for rows.Next() {
		var evID int64
		var held, check, later bool
		var subID *int64
		var s Subscriber
		var name, kind *string
		var types []string
		var hasSecret, paused *bool
		var maxAttempts, timeoutMs *int32
		var created, updated *time.Time
		if err := rows.Scan(&evID, &held, &check, &later, &subID, &name, &kind, &types, &s.URL, &hasSecret,
			&maxAttempts, &timeoutMs, &paused, &created, &updated); err != nil {
			return nil, fmt.Errorf("plan dispatch of %d events: %w", len(ids), err)
		}
		if len(plans) == 0 || plans[len(plans)-1].EventID != evID {
			plans = append(plans, BatchPlan{EventID: evID, Held: held, Check: check, Later: later})
		}
		if subID == nil {
			continue
		}
		s.ID, s.Name, s.Kind, s.EventTypes = *subID, *name, *kind, types
		s.HasSecret, s.MaxAttempts, s.TimeoutMs, s.Paused = *hasSecret, *maxAttempts, *timeoutMs, *paused
		s.CreatedAt, s.UpdatedAt = *created, *updated
		p := &plans[len(plans)-1]
		p.Subscribers = append(p.Subscribers, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("plan dispatch of %d events: %w", len(ids), translate(err))
	}
	return plans, nil
}

// BlockedOutsideBatch returns, of the deliveries keys (events of the batch
// ids to their built-in subscribers), those an earlier event of the same
// document outside the batch holds back (see BlockedSubscribers): it is
// not dispatched yet, or its delivery to the subscriber is open. Run it in
// a statement after PlanBatch's locks, so that it sees what the holders of
// those events committed.
func BlockedOutsideBatch(ctx context.Context, tx pgx.Tx, ids []int64, keys []DeliveryKey) (map[DeliveryKey]bool, error) {
	evIDs := make([]int64, len(keys))
	subIDs := make([]int64, len(keys))
	for i, k := range keys {
		evIDs[i], subIDs[i] = k.EventID, k.SubscriberID
	}
	rows, err := tx.Query(ctx, `
		SELECT k.event_id, k.subscriber_id FROM unnest($2::bigint[], $3::bigint[]) k (event_id, subscriber_id)
		JOIN events e ON e.id = k.event_id
		WHERE EXISTS (
			SELECT 1 FROM events p
			LEFT JOIN deliveries pd ON pd.event_id = p.id AND pd.subscriber_id = k.subscriber_id
			WHERE p.entity = e.entity AND p.entity_id = e.entity_id AND p.id < e.id AND p.id <> ALL($1)
			  AND `+earlierHoldsBack+`)`,
		pgx.QueryExecModeExec, ids, evIDs, subIDs)
	if err != nil {
		return nil, fmt.Errorf("check order of %d deliveries: %w", len(keys), err)
	}
	blocked, err := pgx.CollectRows(rows, pgx.RowToStructByName[DeliveryKey])
	if err != nil {
		return nil, fmt.Errorf("check order of %d deliveries: %w", len(keys), err)
	}
	return setOf(blocked), nil
}

// BatchDelivery is a delivery record CloseBatch writes: delivered (one
// attempt, taking DurationMs) or pending (not attempted yet).
type BatchDelivery struct {
	Key        DeliveryKey
	Delivered  bool
	DurationMs int32
}

// CloseBatch ends a batched dispatch in one statement: it inserts the
// delivery records with their outcome, stamps the events dispatched
// dispatched, and marks processed those of them in done (none of whose
// deliveries is open), giving them the next feed sequences in id order
// and queueing the NOTIFY, as MarkEventsProcessed does. It takes the feed
// counter, held until commit: call it last. It returns the events it
// marked, in id order; ErrConflict when one of the delivery records
// exists already.
//
// With unbound it first lifts a bound on lock waits (lock_timeout) in the
// same round trip: waiting for the feed counter is waiting for the
// previous holder's commit, not a risk of a deadlock.
func CloseBatch(ctx context.Context, tx pgx.Tx, unbound bool, dispatched, done []int64, deliveries []BatchDelivery) ([]ProcessedEvent, error) {
	evIDs := make([]int64, len(deliveries))
	subIDs := make([]int64, len(deliveries))
	delivered := make([]bool, len(deliveries))
	durations := make([]int32, len(deliveries))
	for i, d := range deliveries {
		evIDs[i], subIDs[i], delivered[i], durations[i] = d.Key.EventID, d.Key.SubscriberID, d.Delivered, d.DurationMs
	}
	b := &pgx.Batch{}
	if unbound {
		b.Queue(`SET LOCAL lock_timeout TO DEFAULT`)
	}
	b.Queue(`
		WITH t AS (
			SELECT clock_timestamp() AS at
		), ins AS (
			INSERT INTO deliveries (event_id, subscriber_id, status, attempts, delivered_at, duration_ms, next_attempt_at, created_at, updated_at)
			SELECT k.event_id, k.subscriber_id, CASE WHEN k.delivered THEN 'delivered' ELSE 'pending' END,
				CASE WHEN k.delivered THEN 1 ELSE 0 END, CASE WHEN k.delivered THEN t.at END,
				CASE WHEN k.delivered THEN k.duration_ms END, t.at, t.at, t.at
			FROM unnest($3::bigint[], $4::bigint[], $5::boolean[], $6::integer[]) k (event_id, subscriber_id, delivered, duration_ms), t
		), todo AS (
			SELECT id, row_number() OVER (ORDER BY id) AS n, count(*) OVER () AS total FROM unnest($2::bigint[]) id
		), s AS (
			UPDATE feed_counter SET last_seq = last_seq + (SELECT count(*) FROM todo)
			WHERE EXISTS (SELECT 1 FROM todo)
			RETURNING last_seq
		), e AS (
			UPDATE events SET dispatched_at = t.at,
				processed_at = CASE WHEN todo.id IS NOT NULL THEN t.at END,
				feed_seq = (SELECT last_seq FROM s) - todo.total + todo.n
			FROM unnest($1::bigint[]) a (id) LEFT JOIN todo ON todo.id = a.id CROSS JOIN t
			WHERE events.id = a.id AND events.dispatched_at IS NULL AND events.processed_at IS NULL
			RETURNING events.id, events.feed_seq, events.processed_at - events.created_at AS latency
		)
		SELECT id, extract(epoch FROM latency)::float8, pg_notify($7, (max(feed_seq) OVER ())::text)
		FROM e WHERE feed_seq IS NOT NULL ORDER BY id`,
		dispatched, done, evIDs, subIDs, delivered, durations, notifyEventProcessed)
	res := tx.SendBatch(ctx, b)
	defer res.Close()
	if unbound {
		if _, err := res.Exec(); err != nil {
			return nil, fmt.Errorf("unbind lock waits: %w", err)
		}
	}
	rows, err := res.Query()
	if err != nil {
		return nil, fmt.Errorf("close dispatch of %d events: %w", len(dispatched), translate(err))
	}
	marked, err := collectProcessed(rows)
	if err != nil {
		return nil, fmt.Errorf("close dispatch of %d events: %w", len(dispatched), translate(err))
	}
	if len(marked) != len(done) {
		return nil, fmt.Errorf("close dispatch of %d events: marked %d of %d done", len(dispatched), len(marked), len(done))
	}
	return marked, nil
}
