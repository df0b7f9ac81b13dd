package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// gRates are the steady rates of figure G, in createSalesOrder calls per
// second.
var gRates = []int{50, 150, 300, 400, 500}

// gKneeP99 is the p99 below which a rate of figure G counts as held.
const gKneeP99 = 100 * time.Millisecond

// figureG: the whole path as a client sees it. A steady rate of
// createSalesOrder over HTTP (bearer token, gqlgen, the mutation's
// transaction with its event and dispatch job) with one websocket
// subscriber to doc.created; the latency is from the HTTP answer to the
// order's event on the socket. The reference is a bare River client's
// pickup at the same rate (figure B's: InsertTx committed, a no-op worker
// starts it), the least any job-driven dispatch can take. The knee is the
// highest rate whose p99 stays within gKneeP99.
func (e *env) figureG() error {
	s, err := e.startServer()
	if err != nil {
		return err
	}
	defer s.stop()
	if err := s.ensureItem(e.ctx); err != nil {
		return err
	}
	ref, err := newRiverRef(e.ctx, e.cluster.URL())
	if err != nil {
		return err
	}
	defer ref.stop()

	// The knee is the top of the unbroken run of held rates from the
	// lowest.
	knee, refKnee := 0, 0
	held, refHeld := true, true
	for _, rate := range gRates {
		n := int(float64(rate) * e.opts.duration.Seconds())
		e.waitDrained(time.Minute)
		obs := e.observe(s.cmd.Process.Pid)
		profiled := e.profileBoth(s, e.opts.duration, fmt.Sprintf("g-%d", rate))
		run, err := e.endToEnd(s, e.pool, rate, n)
		if err != nil {
			return err
		}
		o := obs.finish()
		oursNote := o.note
		if files := <-profiled; files != "" {
			oursNote += "; CPU profiles " + files
		}
		e.waitDrained(time.Minute)
		obs = e.observe(0)
		theirs, theirsRate, theirsLost, err := ref.latency(e.ctx, rate, n)
		if err != nil {
			return err
		}
		rf := obs.finish()
		refNote := rf.note
		p50, p99 := pct(run.latency, 50), pct(run.latency, 99)
		r50, r99 := pct(theirs, 50), pct(theirs, 99)
		ok := run.lost == 0 && run.failed == 0 && p99 <= gKneeP99
		if held = held && ok; held {
			knee = rate
		}
		if refHeld = refHeld && theirsLost == 0 && r99 <= gKneeP99; refHeld {
			refKnee = rate
		}
		set := e.settings("rate", fmt.Sprintf("%d/s", rate), "orders", strconv.Itoa(n), "subscribers", "1")
		note := fmt.Sprintf("ours: %d createSalesOrder at %.0f/s offered, %d failed, %d events not on the socket within 10 s; "+
			"mutation (HTTP round trip) p50 %.1f p99 %.1f ms; %s; %s | reference: %.0f/s, %d not picked up; %s",
			n, run.offered, run.failed, run.lost, ms(pct(run.mutation, 50)), ms(pct(run.mutation, 99)), run.breakdown, oursNote,
			theirsRate, theirsLost, refNote)
		// One run a rate (the knee needs every rate, not their spread); the
		// CPU per order against the bare job's, as information.
		one := func(v time.Duration, units int, x observed) []sample {
			return []sample{{value: ms(v), units: float64(units), cpu: x.cpu, statements: x.statements}}
		}
		for _, p := range []struct {
			name      string
			ours, ref time.Duration
		}{{"p50", p50, r50}, {"p99", p99, r99}} {
			r := summarize(Row{Figure: "G", Case: fmt.Sprintf("%d/s %s", rate, p.name), Metric: "ms, HTTP answer→ws vs commit→pickup",
				Target: "p99 ≤ 100 ms up to ≥ 400/s", Pass: ok, Settings: set, Notes: note},
				"order", "total", one(p.ours, n-run.failed, o), one(p.ref, n, rf))
			e.add(r)
		}
		fmt.Println("   ", note)
	}
	e.add(Row{Figure: "G", Case: "knee", Metric: "highest rate with p99 ≤ 100 ms, orders/s",
		Ours: float64(knee), Reference: float64(refKnee), Target: "≥ 400/s", Pass: knee >= 400,
		Settings: e.settings("rates", strings.Trim(strings.ReplaceAll(fmt.Sprint(gRates), " ", ","), "[]"))})
	return nil
}

// endToEndRun is one rate of figure G.
type endToEndRun struct {
	latency   []time.Duration // HTTP answer → event on the socket, one per order seen
	mutation  []time.Duration // the createSalesOrder round trip, one per answered call
	offered   float64         // calls per second as sent
	failed    int             // calls that returned an error
	lost      int             // answered orders whose event did not arrive within 10 s
	breakdown string          // where an event's time went, from the journal's stamps
}

// endToEnd sends n createSalesOrder calls at rate per second over HTTP
// while one websocket subscription takes doc.created of sales orders, and
// times each order from its answer to its event; pool is the server's
// database, for the breakdown.
func (e *env) endToEnd(s *server, pool *pgxpool.Pool, rate, n int) (endToEndRun, error) {
	sub, err := s.subscribe(e.ctx, []string{"doc.created"}, "id entity entityId")
	if err != nil {
		return endToEndRun{}, err
	}
	defer sub.close()
	time.Sleep(200 * time.Millisecond) // let the subscription register

	type seen struct {
		event int64
		at    time.Time
	}
	var mu sync.Mutex
	answered := make(map[int64]time.Time, n) // sales order id → answer
	received := make(map[int64]seen, n)      // sales order id → its event on the socket
	var mutation []time.Duration
	var arrived atomic.Int64
	go func() {
		_ = sub.read(func(raw json.RawMessage) {
			now := time.Now()
			var ev struct{ ID, Entity, EntityID string }
			if json.Unmarshal(raw, &ev) != nil || ev.Entity != "sales_orders" {
				return
			}
			order, _ := strconv.ParseInt(ev.EntityID, 10, 64)
			id, _ := strconv.ParseInt(ev.ID, 10, 64)
			mu.Lock()
			received[order] = seen{id, now}
			mu.Unlock()
			arrived.Add(1)
		})
	}()

	var failed atomic.Int64
	var firstErr atomic.Value
	offered := pace(e.ctx, rate, n, func(int) {
		start := time.Now()
		id, err := s.salesOrder(e.ctx)
		now := time.Now()
		if err != nil {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, err)
			return
		}
		order, _ := strconv.ParseInt(id, 10, 64)
		mu.Lock()
		answered[order] = now
		mutation = append(mutation, now.Sub(start))
		mu.Unlock()
	})
	if v := firstErr.Load(); v != nil {
		fmt.Println("    first createSalesOrder error:", v)
	}
	deadline := time.Now().Add(10 * time.Second)
	for arrived.Load() < int64(n)-failed.Load() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}

	mu.Lock()
	defer mu.Unlock()
	run := endToEndRun{mutation: mutation, offered: offered, failed: int(failed.Load())}
	committed := make(map[int64]time.Time, len(answered)) // event id → the answer, for breakdown
	onSocket := make(map[int64]time.Time, len(answered))  // event id → arrival
	for order, a := range answered {
		r, ok := received[order]
		if !ok {
			run.lost++
			continue
		}
		run.latency = append(run.latency, max(0, r.at.Sub(a)))
		committed[r.event], onSocket[r.event] = a, r.at
	}
	run.breakdown = e.breakdownOf(pool, "answer", committed, onSocket)
	return run, nil
}
