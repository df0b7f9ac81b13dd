package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// observer samples, while a run lasts, what PostgreSQL backends wait on
// (pg_stat_activity every 20 ms) and meters the CPU of the server, the
// cluster and this tool: the evidence for "what limits this figure" and
// for what a unit of work costs.
type observer struct {
	e       *env
	cancel  context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	waits   map[string]int
	samples int
	meter   *meter
	machine float64 // busy CPU seconds of the whole machine at the start
	t0      time.Time
}

// observed is what an observer saw: a note for the row, the CPU the run
// took and its statements.
type observed struct {
	note       string
	cpu        cpu
	statements []statement
}

// statement is one pg_stat_statements entry: its text (shortened), calls
// and total execution time in ms.
type statement struct {
	query   string
	calls   float64
	totalMS float64
	maxMS   float64
}

// observe starts observing a run; serverPID is the process counted as the
// server (0: none yet, see meter.attach).
func (e *env) observe(serverPID int) *observer {
	ctx, cancel := context.WithCancel(e.ctx)
	o := &observer{e: e, cancel: cancel, done: make(chan struct{}), waits: map[string]int{}, t0: time.Now()}
	if _, err := e.pool.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		fmt.Fprintln(os.Stderr, "pg_stat_statements_reset:", err)
	}
	o.machine = machineBusy()
	o.meter = e.meter(serverPID)
	go func() {
		defer close(o.done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rows, err := e.pool.Query(ctx, `SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU'), left(regexp_replace(query, '\s+', ' ', 'g'), 60)
				FROM pg_stat_activity WHERE state = 'active' AND backend_type = 'client backend' AND pid <> pg_backend_pid() AND datname IN ('erp', 'riverref')`)
			if err != nil {
				continue
			}
			o.mu.Lock()
			o.samples++
			for rows.Next() {
				var w, q string
				if rows.Scan(&w, &q) == nil {
					if w == "Lock:transactionid" || w == "Lock:tuple" {
						w += " (" + q + ")"
					}
					o.waits[w]++
				}
			}
			o.mu.Unlock()
			rows.Close()
		}
	}()
	return o
}

// finish stops sampling and metering and summarises: the top waits
// (average number of active backends in each state), the CPU in cores of
// the wall time (the machine's too, neighbours included) and the top
// statements.
func (o *observer) finish() observed {
	o.cancel()
	<-o.done
	used := o.meter.used()
	machine := machineBusy() - o.machine
	wall := time.Since(o.t0).Seconds()
	type kv struct {
		k string
		v int
	}
	var all []kv
	for k, v := range o.waits {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v > all[j].v })
	var parts []string
	for i, w := range all {
		if i == 4 {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.1f", w.k, float64(w.v)/float64(max(o.samples, 1))))
	}
	stmts, err := o.e.topStatements()
	nats := ""
	if used.Nats > 0 {
		nats = fmt.Sprintf(", nats %.2f", used.Nats/wall)
	}
	note := fmt.Sprintf("active backends by wait: %s; CPU (cores): server %.2f, postgres %.2f, bench %.2f%s, machine %.2f of %d; top statements: %s",
		strings.Join(parts, ", "), used.Server/wall, used.Postgres/wall, used.Tool/wall, nats, machine/wall, nproc(), statementsNote(stmts, err))
	return observed{note: note, cpu: used, statements: stmts}
}

// topStatements lists the 20 statements with the most execution time
// since pg_stat_statements was last reset (observe and withTopStatements
// reset it; this tool's sampling excepted).
func (e *env) topStatements() ([]statement, error) {
	rows, err := e.pool.Query(e.ctx, `
		SELECT left(regexp_replace(query, '\s+', ' ', 'g'), 70), calls, total_exec_time, max_exec_time
		FROM pg_stat_statements
		WHERE query NOT LIKE '%pg_stat_%' AND query NOT LIKE 'SELECT pg_stat_statements_reset%'
		ORDER BY total_exec_time DESC LIMIT 20`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var all []statement
	for rows.Next() {
		var s statement
		var calls int64
		if err := rows.Scan(&s.query, &calls, &s.totalMS, &s.maxMS); err != nil {
			return all, err
		}
		s.calls = float64(calls)
		all = append(all, s)
	}
	return all, rows.Err()
}

// statementsNote is the first eight of stmts as a note: total ms, calls,
// mean ms and the longest call's ms each.
func statementsNote(stmts []statement, err error) string {
	if err != nil {
		return "unavailable (" + err.Error() + ")"
	}
	var top []string
	for _, s := range stmts[:min(8, len(stmts))] {
		top = append(top, fmt.Sprintf("[%s] %.0f ms / %.0f calls = %.3f ms (max %.1f)", s.query, s.totalMS, s.calls, s.totalMS/max(s.calls, 1), s.maxMS))
	}
	return strings.Join(top, "; ")
}

func nproc() int {
	n := 0
	b, _ := os.ReadFile("/proc/stat")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "cpu") && !strings.HasPrefix(l, "cpu ") {
			n++
		}
	}
	return n
}

// machineBusy is the busy CPU seconds of the whole machine (/proc/stat),
// neighbours included.
func machineBusy() float64 {
	b, _ := os.ReadFile("/proc/stat")
	f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
	var busy float64
	for i, v := range f[1:] {
		x, _ := strconv.ParseFloat(v, 64)
		if i == 3 || i == 4 || i >= 7 { // idle, iowait, steal, guest (already in user)
			continue
		}
		busy += x
	}
	return busy / clkTck
}
