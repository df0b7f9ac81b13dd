package db_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"erp/db"
	"erp/db/pgtest"
)

// seedDeliveries writes events × subscribers delivery records (webhooks
// lag-0 … lag-N-1) in two statements over generate_series. Record i of a
// subscriber is, by i mod 1000: 0–9 pending, 10–14 failed, 15–16 dead,
// the rest delivered; created over the last week, oldest first.
func seedDeliveries(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, events, subscribers int) {
	tb.Helper()
	_, err := pool.Exec(ctx, `
INSERT INTO subscribers (name, kind, url) SELECT 'lag-' || g, 'webhook', 'http://lag.example/' || g FROM generate_series(0, $1 - 1) g`, subscribers)
	require.NoError(tb, err)
	_, err = pool.Exec(ctx, `
INSERT INTO events (type, entity, entity_id, payload, created_at, processed_at, feed_seq, dispatched_at)
SELECT 'doc.created', 'sales_orders', g, '{}', now() - interval '7 days' + g * interval '1 ms',
       CASE WHEN g % 1000 >= 17 THEN now() END, CASE WHEN g % 1000 >= 17 THEN g END, now()
FROM generate_series(1, $1) g`, events)
	require.NoError(tb, err)
	_, err = pool.Exec(ctx, `
INSERT INTO deliveries (event_id, subscriber_id, status, attempts, delivered_at, created_at, updated_at)
SELECT e.id, s.id, st.status, CASE WHEN st.status = 'pending' THEN 0 ELSE 1 END,
       CASE WHEN st.status = 'delivered' THEN e.created_at + interval '5 ms' END, e.created_at, e.created_at
FROM events e CROSS JOIN subscribers s
CROSS JOIN LATERAL (SELECT CASE WHEN e.id % 1000 < 10 THEN 'pending' WHEN e.id % 1000 < 15 THEN 'failed'
    WHEN e.id % 1000 < 17 THEN 'dead' ELSE 'delivered' END AS status) st
WHERE s.name LIKE 'lag-%'`)
	require.NoError(tb, err)
	_, err = pool.Exec(ctx, `VACUUM ANALYZE deliveries`)
	require.NoError(tb, err)
}

func TestSubscriberLagsMatchRecords(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const events, subscribers = 2000, 3
	seedDeliveries(b.ctx, t, b.pool, events, subscribers)

	lags, err := db.SubscriberLags(b.ctx, b.pool)
	require.NoError(t, err)
	var mine []db.SubscriberLag
	for _, l := range lags {
		if strings.HasPrefix(l.Subscriber, "lag-") {
			mine = append(mine, l)
		}
	}
	require.Len(t, mine, subscribers)
	var firstEvent, lastDelivered time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT min(created_at) FROM events`).Scan(&firstEvent))
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT max(delivered_at) FROM deliveries`).Scan(&lastDelivered))
	for _, l := range mine {
		// Pending: events 1–9, 1000–1009 and 2000; failed: 10–14 and
		// 1010–1014; dead: 15, 16, 1015, 1016.
		require.Equal(t, int64(20+10), l.Pending, l.Subscriber)
		require.Equal(t, int64(10), l.Failing, l.Subscriber)
		require.Equal(t, int64(4), l.Dead, l.Subscriber)
		require.NotNil(t, l.OldestPendingAt)
		require.WithinDuration(t, firstEvent, *l.OldestPendingAt, 0, "event 1 is the oldest open one")
		require.InDelta(t, 7*24*3600, l.OldestPendingSeconds, 60)
		require.NotNil(t, l.LastDeliveredAt)
		require.WithinDuration(t, lastDelivered, *l.LastDeliveredAt, 0)
	}

	// The scrape's statement agrees.
	pending, err := db.SubscribersPending(b.ctx, b.pool)
	require.NoError(t, err)
	byName := map[string]db.SubscriberPending{}
	for _, p := range pending {
		byName[p.Subscriber] = p
	}
	for _, l := range mine {
		p := byName[l.Subscriber]
		require.Equal(t, l.Pending, p.Pending, l.Subscriber)
		require.InDelta(t, l.OldestPendingSeconds, p.OldestPendingSeconds, 60, l.Subscriber)
	}

	byID, err := db.SubscriberLagsByIDs(b.ctx, b.pool, []int64{mine[1].SubscriberID, mine[0].SubscriberID, -1})
	require.NoError(t, err)
	require.Equal(t, zeroAges(mine[0], mine[1]), zeroAges(byID...), "in id order, unknown ids skipped")

	// With every record delivered the lag is zero and the age absent.
	_, err = b.pool.Exec(b.ctx, `UPDATE deliveries SET status = 'delivered', delivered_at = now()`)
	require.NoError(t, err)
	byID, err = db.SubscriberLagsByIDs(b.ctx, b.pool, []int64{mine[0].SubscriberID})
	require.NoError(t, err)
	require.Len(t, byID, 1)
	require.Zero(t, byID[0].Pending+byID[0].Failing+byID[0].Dead)
	require.Nil(t, byID[0].OldestPendingAt)
	require.Zero(t, byID[0].OldestPendingSeconds)
}

// zeroAges returns lags without their OldestPendingSeconds, which differ
// between two reads.
func zeroAges(lags ...db.SubscriberLag) []db.SubscriberLag {
	out := make([]db.SubscriberLag, len(lags))
	for i, l := range lags {
		l.OldestPendingSeconds = 0
		out[i] = l
	}
	return out
}

// statementSQL is statement name as db/queries/file has it.
func statementSQL(tb testing.TB, file, name string) string {
	tb.Helper()
	src, err := os.ReadFile("queries/" + file)
	require.NoError(tb, err)
	_, rest, ok := strings.Cut(string(src), "-- name: "+name+" :")
	require.True(tb, ok)
	_, rest, _ = strings.Cut(rest, "\n")
	var stmt strings.Builder
	for line := range strings.Lines(rest) {
		if strings.HasPrefix(line, "--") {
			continue
		}
		if text, last := strings.CutSuffix(line, ";\n"); last {
			stmt.WriteString(text)
			return stmt.String()
		}
		stmt.WriteString(line)
	}
	tb.Fatalf("no end of statement %s", name)
	return ""
}

// BenchmarkSubscriberLags measures the statement behind every /metrics
// scrape (SubscriberLagList) on 1,000,000 delivery records: 200,000 events
// × 5 webhooks, 98.3 % delivered, 1 % pending, 0.5 % failed, 0.2 % dead.
// With -v it logs the statement's plan (EXPLAIN ANALYZE).
func BenchmarkSubscriberLags(b *testing.B) {
	ctx := b.Context()
	pool := pgtest.NewPool(b)
	seedDeliveries(ctx, b, pool, 200_000, 5)
	var n int
	require.NoError(b, pool.QueryRow(ctx, `SELECT count(*) FROM deliveries`).Scan(&n))
	require.Equal(b, 1_000_000, n)
	if testing.Verbose() {
		rows, err := pool.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) `+statementSQL(b, "subscriber.sql", "SubscriberLagList"))
		require.NoError(b, err)
		var plan []string
		for rows.Next() {
			var line string
			require.NoError(b, rows.Scan(&line))
			plan = append(plan, line)
		}
		require.NoError(b, rows.Err())
		b.Log("\n" + strings.Join(plan, "\n"))
	}
	b.ResetTimer()
	for b.Loop() {
		lags, err := db.SubscriberLags(ctx, pool)
		if err != nil {
			b.Fatal(err)
		}
		if len(lags) != 5 || lags[0].Pending != 3000 {
			b.Fatalf("lags %+v", lags)
		}
	}
}
