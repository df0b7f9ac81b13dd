package db_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"erp/db"
	"erp/db/pgtest"
)

// seedJobs writes n River jobs in one statement over generate_series. Job
// i is, by i mod 1000: 0–4 available, 5 running, 6–7 retryable, 8–9
// scheduled, 10 discarded, 11 cancelled, the rest completed (the finished
// jobs RETENTION keeps); created over the last week.
func seedJobs(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, n int) {
	tb.Helper()
	_, err := pool.Exec(ctx, `
INSERT INTO river_job (state, kind, args, queue, attempt, created_at, scheduled_at, finalized_at)
SELECT st.state, 'dispatch_event', jsonb_build_object('event_id', g), 'dispatch', 1, t, t,
       CASE WHEN st.state IN ('completed', 'discarded', 'cancelled') THEN t END
FROM generate_series(1, $1) g
CROSS JOIN LATERAL (SELECT now() - interval '7 days' + g * (interval '7 days' / $1) AS t) at
CROSS JOIN LATERAL (SELECT (CASE WHEN g % 1000 < 5 THEN 'available' WHEN g % 1000 < 6 THEN 'running'
    WHEN g % 1000 < 8 THEN 'retryable' WHEN g % 1000 < 10 THEN 'scheduled' WHEN g % 1000 < 11 THEN 'discarded'
    WHEN g % 1000 < 12 THEN 'cancelled' ELSE 'completed' END)::river_job_state AS state) st`, n)
	require.NoError(tb, err)
}

// Each state is counted exactly below JobCountExact; above it the figure
// is the statistics' estimate, and never below JobCountExact, not even
// before the table was ever analyzed.
func TestRiverJobCountsExactThenEstimate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seedJobs(b.ctx, t, b.pool, 40_000) // 39,520 completed, 200 available, 40 running …

	counts, err := db.RiverJobCounts(b.ctx, b.pool)
	require.NoError(t, err)
	want := []db.JobCount{
		{State: "available", Jobs: 200}, {State: "cancelled", Jobs: 40}, {State: "completed", Jobs: db.JobCountExact},
		{State: "discarded", Jobs: 40}, {State: "pending", Jobs: 0}, {State: "retryable", Jobs: 80},
		{State: "running", Jobs: 40}, {State: "scheduled", Jobs: 80},
	}
	require.Equal(t, want, counts, "never analyzed: the capped state reports the cap")

	_, err = b.pool.Exec(b.ctx, `ANALYZE river_job`)
	require.NoError(t, err)
	counts, err = db.RiverJobCounts(b.ctx, b.pool)
	require.NoError(t, err)
	require.Len(t, counts, len(want))
	require.Equal(t, "completed", counts[2].State)
	// ANALYZE samples 30,000 rows of the 40,000: the share is estimated.
	require.InEpsilon(t, 39_520, counts[2].Jobs, 0.02, "the estimate")
	counts[2].Jobs = db.JobCountExact
	require.Equal(t, want, counts, "the others exact")
}

// A subscriber's open records are counted up to PendingCountExact, the
// age of the oldest exactly, whatever the backlog.
func TestSubscribersPendingCapsTheCount(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const open = db.PendingCountExact + 50
	_, err := b.pool.Exec(b.ctx, `
WITH s AS (INSERT INTO subscribers (name, kind, url) VALUES ('down', 'webhook', 'http://down.example/') RETURNING id),
e AS (
    INSERT INTO events (type, entity, entity_id, payload, created_at, dispatched_at)
    SELECT 'doc.created', 'sales_orders', g, '{}', now() - interval '1 hour' + g * interval '1 ms', now()
    FROM generate_series(1, $1) g RETURNING id, created_at)
INSERT INTO deliveries (event_id, subscriber_id, status, created_at, updated_at)
SELECT e.id, s.id, 'pending', e.created_at, e.created_at FROM e, s`, open)
	require.NoError(t, err)

	pending, err := db.SubscribersPending(b.ctx, b.pool)
	require.NoError(t, err)
	var down *db.SubscriberPending
	for i := range pending {
		if pending[i].Subscriber == "down" {
			down = &pending[i]
		}
	}
	require.NotNil(t, down)
	require.Equal(t, int64(db.PendingCountExact), down.Pending, "capped")
	require.InDelta(t, 3600, down.OldestPendingSeconds, 60, "the oldest, an hour ago")
	lags, err := db.SubscriberLags(b.ctx, b.pool)
	require.NoError(t, err)
	for _, l := range lags {
		if l.Subscriber == "down" {
			require.Equal(t, int64(open), l.Pending, "the GraphQL lag stays exact")
		}
	}
}

// BenchmarkScrapeStatements measures the database statements behind a
// /metrics scrape on 1,000,000 River jobs (98.8 % completed; seedJobs) and
// 1,000,000 delivery records (200,000 events × 5 webhooks, 98.3 %
// delivered; seedDeliveries), vacuumed and analyzed: RiverJobCounts and
// SubscribersPending, each and both (a scrape that finds its cache stale
// runs both), and for comparison the statements scrapes ran before, River's
// JobCountByAllStates and SubscriberLags. It fails if a plan of the
// scrape's statements reads river_job or deliveries by Seq Scan; with -v
// it logs the plans (EXPLAIN ANALYZE).
func BenchmarkScrapeStatements(b *testing.B) {
	ctx := b.Context()
	pool := pgtest.NewPool(b)
	seedJobs(ctx, b, pool, 1_000_000)
	seedDeliveries(ctx, b, pool, 200_000, 5) // vacuums and analyzes deliveries
	// As a database in production: vacuumed (the visibility map set, so
	// that index-only scans stay so) and checkpointed.
	_, err := pool.Exec(ctx, `VACUUM (ANALYZE) river_job, deliveries, subscribers`)
	require.NoError(b, err)
	_, err = pool.Exec(ctx, `CHECKPOINT`)
	require.NoError(b, err)
	var jobs, deliveries int
	require.NoError(b, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM river_job), (SELECT count(*) FROM deliveries)`).Scan(&jobs, &deliveries))
	require.Equal(b, 1_000_000, jobs)
	require.Equal(b, 1_000_000, deliveries)

	for name, stmt := range map[string]string{"RiverJobCountByState": statementSQL(b, "river_job.sql", "RiverJobCountByState"),
		"SubscriberPendingList": statementSQL(b, "subscriber.sql", "SubscriberPendingList")} {
		plan := explain(ctx, b, pool, stmt)
		for _, table := range []string{"river_job", "deliveries"} {
			require.NotContains(b, plan, "Seq Scan on "+table, "%s:\n%s", name, plan)
		}
		if testing.Verbose() {
			b.Logf("%s:\n%s", name, plan)
			b.Logf("%s: median Execution Time of 21 runs, the server's time without the round trip: %.2f ms",
				name, medianExecution(ctx, b, pool, stmt, 21))
		}
	}

	river := riverpgxv5.New(pool).GetExecutor()
	for _, c := range []struct {
		name string
		run  func() error
	}{
		{"RiverJobCounts", func() error { _, err := db.RiverJobCounts(ctx, pool); return err }},
		{"SubscribersPending", func() error { _, err := db.SubscribersPending(ctx, pool); return err }},
		{"scrape", func() error {
			if _, err := db.RiverJobCounts(ctx, pool); err != nil {
				return err
			}
			_, err := db.SubscribersPending(ctx, pool)
			return err
		}},
		{"before/JobCountByAllStates", func() error {
			_, err := river.JobCountByAllStates(ctx, &riverdriver.JobCountByAllStatesParams{})
			return err
		}},
		{"before/SubscriberLags", func() error { _, err := db.SubscriberLags(ctx, pool); return err }},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if err := c.run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// explain is EXPLAIN (ANALYZE, BUFFERS) of stmt, one line each.
func explain(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, stmt string) string {
	tb.Helper()
	rows, err := pool.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) `+stmt)
	require.NoError(tb, err)
	var plan []string
	for rows.Next() {
		var line string
		require.NoError(tb, rows.Scan(&line))
		plan = append(plan, line)
	}
	require.NoError(tb, rows.Err())
	return strings.Join(plan, "\n")
}

// medianExecution is the median Execution Time, in ms, of n runs of
// EXPLAIN (ANALYZE, TIMING OFF) stmt.
func medianExecution(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, stmt string, n int) float64 {
	tb.Helper()
	times := make([]float64, n)
	for i := range times {
		var plan []map[string]any
		require.NoError(tb, pool.QueryRow(ctx, `EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) `+stmt).Scan(&plan))
		times[i] = plan[0]["Execution Time"].(float64)
	}
	slices.Sort(times)
	return times[n/2]
}
