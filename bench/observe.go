package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// observer samples, while a run lasts, what PostgreSQL backends wait on
// (pg_stat_activity every 20 ms) and how the CPU time splits between the
// server process, the postgres processes and this tool: the evidence for
// "what limits this figure".
type observer struct {
	e       *env
	cancel  context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	waits   map[string]int
	samples int
	start   cpuSnap
	t0      time.Time
	pid     int
}

type cpuSnap struct{ server, postgres, self, total float64 } // seconds of CPU

func (e *env) observe(serverPID int) *observer {
	ctx, cancel := context.WithCancel(e.ctx)
	o := &observer{e: e, cancel: cancel, done: make(chan struct{}), waits: map[string]int{}, pid: serverPID, t0: time.Now()}
	o.start = snap(serverPID)
	if _, err := e.pool.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		fmt.Fprintln(os.Stderr, "pg_stat_statements_reset:", err)
	}
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

// finish stops sampling and summarises: the top waits (average number of
// active backends in each state) and the CPU shares of the wall time.
func (o *observer) finish() string {
	o.cancel()
	<-o.done
	end := snap(o.pid)
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
	return fmt.Sprintf("active backends by wait: %s; CPU (cores): server %.2f, postgres %.2f, bench %.2f, machine %.2f of %d; top statements: %s",
		strings.Join(parts, ", "),
		(end.server-o.start.server)/wall, (end.postgres-o.start.postgres)/wall, (end.self-o.start.self)/wall,
		(end.total-o.start.total)/wall, nproc(), o.e.topStatements())
}

// topStatements lists the eight statements with the most execution time
// since pg_stat_statements was last reset (observe and withTopStatements
// reset it; this tool's sampling excepted): total ms, calls, mean ms and
// the longest call's ms each.
func (e *env) topStatements() string {
	rows, err := e.pool.Query(e.ctx, `
		SELECT left(regexp_replace(query, '\s+', ' ', 'g'), 70), calls, total_exec_time, max_exec_time
		FROM pg_stat_statements
		WHERE query NOT LIKE '%pg_stat_%' AND query NOT LIKE 'SELECT pg_stat_statements_reset%'
		ORDER BY total_exec_time DESC LIMIT 8`)
	if err != nil {
		return "unavailable (" + err.Error() + ")"
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var q string
		var calls int64
		var total, longest float64
		if rows.Scan(&q, &calls, &total, &longest) == nil {
			parts = append(parts, fmt.Sprintf("[%s] %.0f ms / %d calls = %.3f ms (max %.1f)", q, total, calls, total/float64(max(calls, 1)), longest))
		}
	}
	return strings.Join(parts, "; ")
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

const clkTck = 100.0

func procCPU(pid string) (string, float64) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return "", 0
	}
	s := string(b)
	l, r := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if l < 0 || r < 0 {
		return "", 0
	}
	f := strings.Fields(s[r+2:])
	if len(f) < 13 {
		return "", 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return s[l+1 : r], (u + st) / clkTck
}

func snap(serverPID int) cpuSnap {
	var c cpuSnap
	ents, _ := os.ReadDir("/proc")
	for _, d := range ents {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		comm, t := procCPU(d.Name())
		if comm == "postgres" {
			c.postgres += t
		}
	}
	if serverPID > 0 {
		_, c.server = procCPU(strconv.Itoa(serverPID))
	}
	_, c.self = procCPU(strconv.Itoa(os.Getpid()))
	b, _ := os.ReadFile("/proc/stat")
	line := strings.SplitN(string(b), "\n", 2)[0]
	f := strings.Fields(line)
	var busy float64
	for i, v := range f[1:] {
		x, _ := strconv.ParseFloat(v, 64)
		if i == 3 || i == 4 || i >= 7 { // idle, iowait, steal, guest (already in user)
			continue
		}
		busy += x
	}
	c.total = busy / clkTck
	return c
}
