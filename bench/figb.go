package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"erp/db"
	"erp/jobs"
)

// figureB: commit → websocket delivery latency of an event written the way
// a mutation writes it (jobs.Write: the event row and its dispatch job in
// one transaction, committed by this tool so that the commit instant is
// known exactly), against a bare River job inserted with InsertTx and the
// time until a no-op worker starts it, with the same River settings.
func (e *env) figureB() error {
	s, err := e.startServer()
	if err != nil {
		return err
	}
	defer s.stop()
	// The product's River client, not started (as `erp user` uses it): the
	// outbox enqueues on it with the server's settings (its FetchCooldown
	// also paces River's insert notifications), the server's River works
	// the jobs.
	insertOnly, err := jobs.NewRiverClient(e.pool, jobs.NewDispatcher(e.pool, jobs.DispatcherConfig{}),
		jobs.RiverConfig{DispatchInterval: time.Hour, MaxWorkers: 1, Logger: e.logger})
	if err != nil {
		return err
	}
	outbox := jobs.NewOutbox(e.pool, insertOnly)

	ref, err := newRiverRef(e.ctx, e.cluster.URL())
	if err != nil {
		return err
	}
	defer ref.stop()

	for _, rate := range []int{50, 500} {
		d := e.opts.duration
		n := int(float64(rate) * d.Seconds())
		// One sample per run and percentile: the same run's CPU, per event.
		var ours50, ours99, ref50, ref99 []sample
		var notes []string
		lostAny := false
		for i := range e.opts.runs {
			e.waitDrained(time.Minute)
			obs := e.observe(s.cmd.Process.Pid)
			ours, oursRate, lost, err := e.latencyOurs(s, outbox, rate, n, i)
			if err != nil {
				return err
			}
			o := obs.finish()
			e.waitDrained(time.Minute)
			obs = e.observe(0)
			theirs, theirsRate, theirsLost, err := ref.latency(e.ctx, rate, n)
			if err != nil {
				return err
			}
			r := obs.finish()
			lostAny = lostAny || lost > 0 || theirsLost > 0
			run := func(lat []time.Duration, p int, x observed) sample {
				return sample{value: ms(pct(lat, p)), units: float64(n), cpu: x.cpu, statements: x.statements}
			}
			ours50, ours99 = append(ours50, run(ours, 50, o)), append(ours99, run(ours, 99, o))
			ref50, ref99 = append(ref50, run(theirs, 50, r)), append(ref99, run(theirs, 99, r))
			notes = append(notes, fmt.Sprintf("run %d: ours: %d events at %.0f/s offered, %d not delivered within 10 s; %s | reference: %.0f/s, %d not picked up; %s",
				i+1, n, oursRate, lost, o.note, theirsRate, theirsLost, r.note))
		}
		set := e.settings("rate", fmt.Sprintf("%d/s", rate), "events", strconv.Itoa(n), "subscribers", "1")
		note := strings.Join(notes, " || ")
		p50 := summarize(Row{Figure: "B", Case: fmt.Sprintf("%d ev/s p50", rate), Metric: "ms, commit→ws vs commit→pickup",
			Target: "≤ ref + 5 ms", Settings: set, Notes: note}, "event", "total", ours50, ref50)
		p50.Pass = !lostAny && p50.Ours <= p50.Reference+5
		p99 := summarize(Row{Figure: "B", Case: fmt.Sprintf("%d ev/s p99", rate), Metric: "ms, commit→ws vs commit→pickup",
			Target: "≤ 2× ref", Settings: set, Notes: note}, "event", "total", ours99, ref99)
		p99.Pass = !lostAny && p99.Ours <= 2*p99.Reference
		e.add(p50)
		e.add(p99)
		fmt.Println("   ", note)
		e.whereItGoes(p50, ours50, ref50)
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// pace calls fn(i) for i in [0, n) at rate per second, each in its own
// goroutine (at most 256 in flight), and returns the offered rate.
func pace(ctx context.Context, rate, n int, fn func(i int)) float64 {
	sem := make(chan struct{}, 256)
	var wg sync.WaitGroup
	start := time.Now()
	interval := time.Second / time.Duration(rate)
	for i := 0; i < n && ctx.Err() == nil; i++ {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(i)
		}()
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}

// latencyOurs commits n doc.created events at rate per second, each about
// a document of its own (run keeps the runs' documents apart), and returns
// each delivered event's commit→socket latency, the offered rate and the
// events not delivered within 10 s.
func (e *env) latencyOurs(s *server, outbox *jobs.Outbox, rate, n, run int) ([]time.Duration, float64, int, error) {
	sub, err := s.subscribe(e.ctx, []string{db.EventDocCreated}, "id")
	if err != nil {
		return nil, 0, 0, err
	}
	defer sub.close()
	time.Sleep(200 * time.Millisecond) // let the subscription register
	var mu sync.Mutex
	committed := make(map[int64]time.Time, n)
	received := make(map[int64]time.Time, n)
	var got atomic.Int64
	go func() {
		_ = sub.read(func(raw json.RawMessage) {
			now := time.Now()
			var ev struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(raw, &ev) == nil {
				id, _ := strconv.ParseInt(ev.ID, 10, 64)
				mu.Lock()
				received[id] = now
				mu.Unlock()
				got.Add(1)
			}
		})
	}()
	var firstErr atomic.Value
	offered := pace(e.ctx, rate, n, func(i int) {
		id, err := jobs.Write(e.ctx, outbox, func(tx pgx.Tx) (int64, []db.Event, error) {
			var id int64
			// A doc.created is its document's first event: each one is
			// about a document of its own, past every id in use (not an
			// existing order, which would make it a later event of it).
			err := tx.QueryRow(e.ctx, `INSERT INTO events (type, entity, entity_id, payload)
				VALUES ('doc.created', 'sales_orders', $1, jsonb_build_object('id', $1::bigint, 'no', 'bench', 'entity', 'sales_order')) RETURNING id`,
				benchDocBase+int64(rate)*1_000_000+int64(run)*100_000+int64(i)).Scan(&id)
			return id, []db.Event{{ID: id}}, err
		})
		now := time.Now()
		if err != nil {
			firstErr.CompareAndSwap(nil, err)
			return
		}
		mu.Lock()
		committed[id] = now
		mu.Unlock()
	})
	if v := firstErr.Load(); v != nil {
		return nil, 0, 0, v.(error)
	}
	deadline := time.Now().Add(10 * time.Second)
	for got.Load() < int64(n) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	e.breakdown(committed, received)
	var lat []time.Duration
	lost := 0
	for id, c := range committed {
		r, ok := received[id]
		if !ok {
			lost++
			continue
		}
		lat = append(lat, max(0, r.Sub(c)))
	}
	return lat, offered, lost, nil
}

// riverRef is the reference of figure B: a bare River client on its own
// database with the product's fetch settings and a no-op worker.
type riverRef struct {
	pool   *pgxpool.Pool
	client *river.Client[pgx.Tx]
	mu     sync.Mutex
	picked map[int]time.Time
}

type pingArgs struct {
	Seq int `json:"seq"`
}

func (pingArgs) Kind() string { return "bench_ping" }

type pingWorker struct {
	river.WorkerDefaults[pingArgs]
	ref *riverRef
}

func (w *pingWorker) Work(_ context.Context, j *river.Job[pingArgs]) error {
	now := time.Now()
	w.ref.mu.Lock()
	w.ref.picked[j.Args.Seq] = now
	w.ref.mu.Unlock()
	return nil
}

func newRiverRef(ctx context.Context, erpURL string) (*riverRef, error) {
	url := replaceDB(erpURL, "riverref") // the same PostgreSQL
	pool, err := db.Connect(ctx, url+" pool_max_conns=40")
	if err != nil {
		return nil, err
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		pool.Close()
		return nil, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		pool.Close()
		return nil, err
	}
	ref := &riverRef{pool: pool, picked: map[int]time.Time{}}
	workers := river.NewWorkers()
	river.AddWorker(workers, &pingWorker{ref: ref})
	ref.client, err = river.NewClient(riverpgxv5.New(pool), &river.Config{
		Workers:           workers,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 20}},
		FetchCooldown:     jobs.FetchCooldown,
		FetchPollInterval: jobs.FetchPollInterval,
	})
	if err != nil {
		pool.Close()
		return nil, err
	}
	if err := ref.client.Start(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return ref, nil
}

func (r *riverRef) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = r.client.Stop(ctx)
	r.pool.Close()
}

func (r *riverRef) latency(ctx context.Context, rate, n int) ([]time.Duration, float64, int, error) {
	r.mu.Lock()
	r.picked = map[int]time.Time{}
	r.mu.Unlock()
	committed := make([]time.Time, n)
	var firstErr atomic.Value
	offered := pace(ctx, rate, n, func(i int) {
		err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
			_, err := r.client.InsertTx(ctx, tx, pingArgs{Seq: i}, nil)
			return err
		})
		committed[i] = time.Now()
		if err != nil {
			firstErr.CompareAndSwap(nil, err)
		}
	})
	if v := firstErr.Load(); v != nil {
		return nil, 0, 0, v.(error)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		k := len(r.picked)
		r.mu.Unlock()
		if k >= n {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var lat []time.Duration
	lost := 0
	for i, c := range committed {
		p, ok := r.picked[i]
		if !ok {
			lost++
			continue
		}
		lat = append(lat, max(0, p.Sub(c)))
	}
	return lat, offered, lost, nil
}

// benchDocBase starts the entity ids of figure B's and C's documents, far
// past the sales orders the other figures create.
const benchDocBase = 1_000_000_000

// breakdown prints where an event's time goes, from the rows' own
// timestamps (the database and this tool share the machine's clock):
// commit → dispatched_at (picked up by its dispatch job or another's
// batch, deliveries created) → processed_at (built-in deliveries made,
// stamped just before commit) → websocket.
func (e *env) breakdown(committed, received map[int64]time.Time) {
	fmt.Println("   ", e.breakdownOf(e.pool, "commit", committed, received))
}

// breakdownOf is breakdown's line, by event id, from the journal of pool:
// from (the commit, or the mutation's answer) at start → dispatched_at →
// processed_at → received.
func (e *env) breakdownOf(pool *pgxpool.Pool, from string, start, received map[int64]time.Time) string {
	ids := make([]int64, 0, len(start))
	for id := range start {
		ids = append(ids, id)
	}
	rows, err := pool.Query(e.ctx, `SELECT id, dispatched_at, processed_at FROM events WHERE id = ANY($1)`, ids)
	if err != nil {
		return "breakdown: " + err.Error()
	}
	defer rows.Close()
	var toDispatched, dispatchedToProcessed, processedToWS []time.Duration
	for rows.Next() {
		var id int64
		var dispatched, processed *time.Time
		if err := rows.Scan(&id, &dispatched, &processed); err != nil {
			return "breakdown: " + err.Error()
		}
		if dispatched != nil {
			toDispatched = append(toDispatched, dispatched.Sub(start[id]))
		}
		if dispatched != nil && processed != nil {
			dispatchedToProcessed = append(dispatchedToProcessed, processed.Sub(*dispatched))
		}
		if r, ok := received[id]; ok && processed != nil {
			processedToWS = append(processedToWS, r.Sub(*processed))
		}
	}
	f := func(name string, d []time.Duration) string {
		return fmt.Sprintf("%s p50 %.1f p99 %.1f", name, ms(pct(d, 50)), ms(pct(d, 99)))
	}
	return fmt.Sprintf("breakdown (ms): %s; %s; %s",
		f(from+"→dispatched_at", toDispatched),
		f("dispatched_at→processed_at", dispatchedToProcessed),
		f("processed_at→websocket", processedToWS))
}
