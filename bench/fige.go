package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// seedSQL writes n (the parameter) pending sales orders as receiveOrder
// commits them: the order, its line, its doc.created and order.received
// events and their dispatch jobs (2n events). Running it with the
// server stopped makes the backlog of an outage of the workers.
const seedSQL = `
WITH so AS (
	INSERT INTO sales_orders (number, customer, status, source)
	SELECT 'ЗК-BENCH-' || gen_random_uuid(), 'ООО Бенч', 'new', 'manual' FROM generate_series(1, $1)
	RETURNING id),
ln AS (
	INSERT INTO sales_order_lines (sales_order_id, line_no, item_id, quantity, price)
	SELECT id, 1, (SELECT id FROM items WHERE sku = 'BENCH-1'), 1, 10 FROM so
	RETURNING sales_order_id),
ev AS (
	INSERT INTO events (type, entity, entity_id, payload)
	SELECT t.type, 'sales_orders', sales_order_id, CASE t.type
		WHEN 'doc.created' THEN jsonb_build_object('id', sales_order_id, 'no', 'ЗК-BENCH', 'entity', 'sales_order')
		ELSE jsonb_build_object('lines', 1, 'source', 'manual', 'order_id', sales_order_id) END
	FROM ln CROSS JOIN (VALUES (1, 'doc.created'), (2, 'order.received')) t(k, type)
	ORDER BY sales_order_id, t.k
	RETURNING id)
INSERT INTO river_job (args, kind, max_attempts, queue, state, priority)
SELECT jsonb_build_object('event_id', id), 'dispatch_event', 25, 'default', 'available', 1 FROM ev`

// seedJobIDsSQL notes on each seeded event its dispatch job, as
// jobs.EnqueueDispatch does, so that a batch deletes the jobs of the
// events it takes on.
const seedJobIDsSQL = `
UPDATE events e SET dispatch_job_id = j.id FROM river_job j
WHERE j.kind = 'dispatch_event' AND (j.args ->> 'event_id')::bigint = e.id AND e.dispatch_job_id IS NULL`

// refSeedSQL gives the reference n unprocessed rows in its copy of events.
const refSeedSQL = `
INSERT INTO bench_ref.events (type, entity, entity_id, payload)
SELECT 'order.received', 'sales_orders', g, jsonb_build_object('lines', 1, 'source', 'manual', 'order_id', g)
FROM generate_series(1, $1) g`

// refDrainScript marks one pending row processed per transaction.
const refDrainScript = `UPDATE bench_ref.events SET processed_at = clock_timestamp(), feed_seq = id
WHERE id = (SELECT id FROM bench_ref.events WHERE processed_at IS NULL ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED);
`

// figureE: the drain of a backlog of pending events, each with its
// dispatch job committed (as after an outage of the workers: the mutations
// committed, nothing ran), through the built-in subscribers:
// order_acceptance and production_planning take order.received (BENCH-1
// has no bill of materials: nothing to plan, so material_issue, which
// takes production orders' doc.created only, gets nothing).
// The reference marks rows of a copy of events processed one by one with
// FOR UPDATE SKIP LOCKED from pgbench, at 20 clients (the server's
// MaxWorkers). Runs interleave, each on a fresh backlog; the target is on
// CPU per event.
func (e *env) figureE() error {
	n := e.opts.eEvents
	const clients = 20
	if _, err := e.pool.Exec(e.ctx, refTablesSQL); err != nil {
		return err
	}
	// The item and the built-in subscribers exist once a server ran.
	s, err := e.startServer()
	if err != nil {
		return err
	}
	if err := s.ensureItem(e.ctx); err != nil {
		s.stop()
		return err
	}
	e.waitDrained(time.Minute)
	s.stop()

	var ours, ref []sample
	var notes []string
	drained := true
	for i := range e.opts.runs {
		o, note, pending, err := e.drainOurs(n, i)
		if err != nil {
			return err
		}
		drained = drained && pending == 0
		r, refNote, err := e.drainReference(n, clients)
		if err != nil {
			return err
		}
		ours, ref = append(ours, o), append(ref, r)
		notes = append(notes, fmt.Sprintf("run %d: %s | reference: %.0f rows/s, %s", i+1, note, r.value, refNote))
	}
	r := summarize(Row{Figure: "E", Case: fmt.Sprintf("%d events, 3 built-ins", n), Metric: "events drained/s vs rows/s",
		Target:   "CPU/event ≤ 1.5× ref",
		Settings: e.settings("events", strconv.Itoa(n), "clients", fmt.Sprintf("server MaxWorkers 20; pgbench -c %d", clients)),
		Notes:    strings.Join(notes, " || ")}, "event", "total", ours, ref)
	r.Pass = drained && r.Cost.Ratio > 0 && r.Cost.Ratio <= 1.5
	e.add(r)
	fmt.Println("   ", r.Notes)
	e.whereItGoes(r, ours, ref)
	return nil
}

// drainOurs seeds n pending events with the server stopped, then starts it
// and measures until none is pending (server start included), and stops
// it. It returns the run, a note and the events still pending at the end.
func (e *env) drainOurs(n, i int) (sample, string, int, error) {
	var before int64
	if err := e.pool.QueryRow(e.ctx, `SELECT coalesce(max(id), 0) FROM events`).Scan(&before); err != nil {
		return sample{}, "", 0, err
	}
	fmt.Printf("    seeding %d orders: %d pending events with their dispatch jobs…\n", n/2, n)
	if _, err := e.pool.Exec(e.ctx, seedSQL, n/2); err != nil {
		return sample{}, "", 0, fmt.Errorf("seed: %w", err)
	}
	// The previous run left every event with its job id: without fresh
	// statistics the planner expects one row to join and loops over
	// river_job for each of the n (a seed of minutes, not seconds).
	if _, err := e.pool.Exec(e.ctx, "ANALYZE events, river_job"); err != nil {
		return sample{}, "", 0, err
	}
	if _, err := e.pool.Exec(e.ctx, seedJobIDsSQL); err != nil {
		return sample{}, "", 0, fmt.Errorf("seed dispatch job ids: %w", err)
	}
	for _, q := range []string{"VACUUM ANALYZE events", "VACUUM ANALYZE river_job", "VACUUM ANALYZE sales_orders"} {
		if _, err := e.pool.Exec(e.ctx, q); err != nil {
			return sample{}, "", 0, err
		}
	}

	obs := e.observe(0)
	t0 := time.Now()
	s, err := e.startServer()
	if err != nil {
		return sample{}, "", 0, err
	}
	defer s.stop()
	obs.meter.attach(s.cmd.Process.Pid)
	// The server's CPU profile of the drain's first 10 s (1 s with -quick;
	// kept with -keep), taken to its end however soon the drain ends.
	seconds := 10 * time.Second
	if e.opts.quick {
		seconds = time.Second
	}
	profiled := e.profileServer(s, seconds, fmt.Sprintf("e-%d", i))
	limit := 30 * time.Minute
	// Poll with EXISTS: a count over the shrinking backlog cost PostgreSQL
	// 20 ms a poll (0.1 core at 5 polls/s), taken from the server.
	for time.Since(t0) < limit && e.ctx.Err() == nil {
		var waiting bool
		if err := e.pool.QueryRow(e.ctx, `SELECT EXISTS (SELECT 1 FROM events WHERE processed_at IS NULL)`).Scan(&waiting); err != nil {
			return sample{}, "", 0, err
		}
		if !waiting {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	elapsed := time.Since(t0)
	o := obs.finish()
	var pending int
	if err := e.pool.QueryRow(e.ctx, `SELECT count(*) FROM events WHERE processed_at IS NULL`).Scan(&pending); err != nil {
		return sample{}, "", 0, err
	}
	// Jobs still queued once every event is processed: dispatch jobs whose
	// event a batch took on, left to find nothing to do. The server stops
	// before the reference runs so that they do not load it.
	var leftJobs int64
	_ = e.pool.QueryRow(e.ctx, `SELECT count(*) FROM river_job WHERE state IN ('available', 'running')`).Scan(&leftJobs)
	s.stop()
	var processed, deliveries int64
	if err := e.pool.QueryRow(e.ctx, `SELECT count(*) FROM events WHERE id > $1 AND processed_at IS NOT NULL`, before).Scan(&processed); err != nil {
		return sample{}, "", 0, err
	}
	_ = e.pool.QueryRow(e.ctx, `SELECT count(*) FROM deliveries d JOIN events ev ON ev.id = d.event_id WHERE ev.id > $1`, before).Scan(&deliveries)
	note := fmt.Sprintf("ours: %d seeded events drained in %s (server start included; %d events processed in all (any beyond the seeded were journaled by subscribers); %d deliveries); %d still pending at the end, %d River jobs left with nothing to do (server stopped before the reference); %s",
		n, elapsed.Round(time.Millisecond), processed, deliveries, pending, leftJobs, o.note)
	return sample{value: float64(n) / elapsed.Seconds(), units: float64(n), cpu: o.cpu, statements: o.statements, profile: <-profiled}, note, pending, nil
}

// drainReference gives the reference n pending rows and has pgbench mark
// them processed at clients; the run's value is rows per second.
func (e *env) drainReference(n, clients int) (sample, string, error) {
	if _, err := e.pool.Exec(e.ctx, `TRUNCATE bench_ref.events`); err != nil {
		return sample{}, "", err
	}
	if _, err := e.pool.Exec(e.ctx, refSeedSQL, n); err != nil {
		return sample{}, "", err
	}
	if _, err := e.pool.Exec(e.ctx, "VACUUM ANALYZE bench_ref.events"); err != nil {
		return sample{}, "", err
	}
	t0 := time.Now()
	r, note, err := e.pgbenchRun(refDrainScript, clients, "-t", strconv.Itoa((n+clients-1)/clients))
	elapsed := time.Since(t0)
	r.value, r.units = float64(n)/elapsed.Seconds(), float64(n)
	return r, elapsed.Round(time.Millisecond).String() + ", " + note, err
}
