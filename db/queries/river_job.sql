-- River's job table, read for the Prometheus scrape (River's own driver
-- writes it and reads it otherwise).

-- name: RiverJobCountByState :many
-- Jobs by state, every state of the enum, zero included. Each state is
-- counted exactly up to 1000 jobs (db.JobCountExact), a bounded read of
-- River's index on (state, …); a state with 1000 or more gets the
-- planner's estimate instead (pg_class.reltuples × the state's share in
-- pg_stats, as of the last ANALYZE), never less than 1000. So no call
-- reads more than 8 × 1000 index entries, however many finished jobs
-- RETENTION keeps (docs/query-plans.md). The bound is a literal, not a
-- parameter, so that a generic plan knows it too.
SELECT s.state::text AS state,
    (CASE WHEN c.n < 1000 THEN c.n
        ELSE greatest(1000, round(greatest(t.reltuples, 0)
            * coalesce(st.freqs[array_position(st.vals, s.state::text)], 0))::bigint)
    END)::bigint AS jobs
FROM unnest(enum_range(NULL::river_job_state)) s(state)
CROSS JOIN LATERAL (
    SELECT count(*) AS n FROM (SELECT 1 FROM river_job j WHERE j.state = s.state LIMIT 1000) capped
) c
LEFT JOIN pg_catalog.pg_class t ON t.oid = to_regclass('river_job')
LEFT JOIN LATERAL (
    SELECT p.most_common_vals::text::text[] AS vals, p.most_common_freqs AS freqs FROM pg_catalog.pg_stats p
    WHERE p.schemaname = current_schema() AND p.tablename = 'river_job' AND p.attname = 'state'
) st ON true
ORDER BY 1;
