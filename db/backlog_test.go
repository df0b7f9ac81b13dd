package db_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"erp/db"
)

// A backlog the statistics do not know of: the journal was analyzed while
// quiet, then an outage left backlogEvents events unprocessed (two per
// document) and a built-in subscriber's deliveries of half of them failed
// (only a built-in's open delivery holds its event unprocessed). The
// dispatch of a batch at the backlog's end, and the sweep's and a
// delivery's lookups, must read in proportion to what they touch, not to
// the backlog: a plan that reads the unprocessed events or the open
// deliveries whole, once per event of the batch, is what the planner
// picks on such statistics unless the statements leave it no such index.
func TestDispatchOfABatchReadsTheBatchNotTheBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const backlogEvents = 4000
	const batchSize = 128
	for _, q := range []string{
		`ALTER TABLE events SET (autovacuum_enabled = off)`,
		`ALTER TABLE deliveries SET (autovacuum_enabled = off)`,
		`INSERT INTO subscribers (name, kind) VALUES ('backlog-builtin', 'builtin')`,
		// The quiet journal: processed, delivered.
		`INSERT INTO events (type, entity, entity_id, payload, created_at, processed_at, dispatched_at, feed_seq)
		 SELECT 'order.received', 'sales_orders', g, '{}', now(), now(), now(), g FROM generate_series(1, 1000) g`,
		`UPDATE feed_counter SET last_seq = 1000`,
		`INSERT INTO deliveries (event_id, subscriber_id, status, attempts, delivered_at, next_attempt_at, created_at, updated_at)
		 SELECT e.id, s.id, 'delivered', 1, clock_timestamp(), clock_timestamp(), clock_timestamp(), clock_timestamp()
		 FROM events e, subscribers s WHERE s.name = 'backlog-builtin'`,
		`ANALYZE events`,
		`ANALYZE deliveries`,
		// The backlog: each document's first event dispatched, its
		// delivery failed; the second not dispatched yet.
		`INSERT INTO events (type, entity, entity_id, payload)
		 SELECT 'order.received', 'sales_orders', 1000000 + g / 2, '{}' FROM generate_series(0, 3999) g`,
		`UPDATE events SET dispatched_at = clock_timestamp()
		 WHERE id IN (SELECT min(id) FROM events WHERE processed_at IS NULL GROUP BY entity_id)`,
		`INSERT INTO deliveries (event_id, subscriber_id, status, attempts, next_attempt_at, created_at, updated_at)
		 SELECT e.id, s.id, 'failed', 1, clock_timestamp(), clock_timestamp(), clock_timestamp()
		 FROM events e, subscribers s WHERE s.name = 'backlog-builtin' AND e.processed_at IS NULL AND e.dispatched_at IS NOT NULL`,
	} {
		_, err := b.pool.Exec(b.ctx, q)
		require.NoError(t, err, q)
	}
	var hook, journal int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM events`).Scan(&journal))
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT id FROM subscribers WHERE name = 'backlog-builtin'`).Scan(&hook))

	// The batch: the second event of each of the last batchSize
	// documents, whose first event stays outside it, unprocessed.
	rows, err := b.pool.Query(b.ctx, `SELECT max(id) FROM events WHERE processed_at IS NULL
		GROUP BY entity_id ORDER BY entity_id DESC LIMIT $1`, batchSize)
	require.NoError(t, err)
	batch, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, batch, batchSize)

	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx) //nolint:errcheck
	_, err = tx.Exec(b.ctx, `SELECT id FROM events WHERE id = ANY($1) ORDER BY id FOR UPDATE`, batch)
	require.NoError(t, err)
	readSoFar := func() int64 {
		var n int64
		require.NoError(t, tx.QueryRow(b.ctx, `SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(c.oid)), 0)::bigint
			FROM pg_class c WHERE c.relname IN ('events', 'deliveries')
			   OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid IN ('events'::regclass, 'deliveries'::regclass))`).Scan(&n))
		return n
	}
	start := readSoFar()

	plans, err := db.PlanDispatch(b.ctx, tx, batch)
	require.NoError(t, err)
	require.Len(t, plans, batchSize)
	for _, p := range plans {
		require.True(t, p.Earlier, "event %d: its document's first event is outside the batch", p.EventID)
		require.False(t, p.Held, "event %d: no other transaction holds the earlier event", p.EventID)
		require.False(t, p.Later, "event %d is its document's last", p.EventID)
	}
	head, err := db.EventByID(b.ctx, tx, batch[0])
	require.NoError(t, err)
	require.NoError(t, db.LockEarlierEvents(b.ctx, tx, head))
	first, err := db.EventByID(b.ctx, tx, batch[0]-1)
	require.NoError(t, err)
	require.Equal(t, head.EntityID, first.EntityID)
	later, err := db.LaterOpenDeliveries(b.ctx, tx, first, nil)
	require.NoError(t, err)
	require.Empty(t, later, "the document's later event has no delivery")
	_, err = db.LockOpenDelivery(b.ctx, tx, db.DeliveryKey{EventID: first.ID, SubscriberID: hook})
	require.NoError(t, err, "the first event's failed delivery is due")
	marked, err := db.MarkEventsProcessed(b.ctx, tx, batch)
	require.NoError(t, err)
	require.Len(t, marked, batchSize, "the batch's events have no open delivery")
	// What the statements touch: the batch, its documents' other events,
	// a delivery key each, with at most one pass over the journal (on a
	// journal this small a scan of it beats 128 index lookups). A plan
	// reading the backlog once per event of the batch reads half a
	// million.
	dispatched := readSoFar()
	require.Less(t, dispatched-start, 20*batchSize+journal,
		"rows and index entries read to dispatch a batch of %d in a backlog of %d", batchSize, backlogEvents)

	// The sweep's page of finished events reads the dispatched backlog
	// once (none is finished), not once per candidate.
	unfinished, err := db.UnfinishedEventIDs(b.ctx, tx, 0, 100)
	require.NoError(t, err)
	require.Empty(t, unfinished, "every dispatched event of the backlog has a failed delivery")
	require.Less(t, readSoFar()-dispatched, int64(4*backlogEvents),
		"rows and index entries read by the sweep's page in a backlog of %d", backlogEvents)
}
