package main

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A backend that ends during a run has been reaped by the postmaster when
// the run ends: its CPU must still count, through the postmaster's
// cutime+cstime. This process stands in for the postmaster.
func TestClusterCPUCountsReapedChildren(t *testing.T) {
	// A child busy long enough to measure at 10 ms a tick, whatever the
	// machine's speed: the loop grows until one run spends 0.05 s.
	var before, spent float64
	for n := 400_000; spent < 0.05; n *= 4 {
		if n > 1<<28 {
			t.Fatal("no child spent 0.05 s of CPU")
		}
		before = clusterCPU(os.Getpid())
		child := exec.Command("sh", "-c", fmt.Sprintf("i=0; while [ $i -lt %d ]; do i=$((i+1)); done", n))
		if err := child.Run(); err != nil {
			t.Fatal(err)
		}
		spent = (child.ProcessState.UserTime() + child.ProcessState.SystemTime()).Seconds()
	}
	if got := clusterCPU(os.Getpid()) - before; got < spent-0.02 {
		t.Errorf("clusterCPU grew by %.3f s after a child that spent %.3f s exited, want at least the child's", got, spent)
	}
}

func TestSummarize(t *testing.T) {
	// Three pairs: ours costs 2, 3 and 4 ms of CPU per unit, the reference
	// 1 ms each time, half of it in the NATS server (figure H); the server
	// takes half of ours.
	var ours, ref []sample
	for i, ms := range []float64{2, 3, 4} {
		ours = append(ours, sample{value: float64(100 + i), units: 1000, cpu: cpu{Server: ms / 2, Postgres: ms / 2}})
		ref = append(ref, sample{value: 200, units: 1000, cpu: cpu{Nats: 0.5, Tool: 0.5}})
	}
	r := summarize(Row{}, "mutation", "total", ours, ref)
	if r.Runs != 3 || r.Ours != 101 || r.Reference != 200 || !near(r.Ratio, 101.0/200) {
		t.Errorf("runs, ours, reference, ratio = %d, %v, %v, %v, want 3, 101, 200, 0.505", r.Runs, r.Ours, r.Reference, r.Ratio)
	}
	c := r.Cost
	if !near(c.Ours.Total, 3) || !near(c.Ours.Server, 1.5) || !near(c.Reference.Total, 1) || !near(c.Reference.Nats, 0.5) || !near(c.Ratio, 3) {
		t.Errorf("cost = %+v, want ours 3 ms (server 1.5), reference 1 ms (nats 0.5), ratio 3", *c)
	}
	if want := (4.0 - 2) / 3; !near(c.Ours.Spread, want) || !near(c.RatioSpread, want) {
		t.Errorf("spreads = %v, %v, want %v", c.Ours.Spread, c.RatioSpread, want)
	}
	if r.noisyNote() == "" {
		t.Error("a 67 % spread is not reported")
	}
	server := summarize(Row{}, "frame", "server", ours, ref)
	if server.Cost.Ratio != 0 {
		t.Errorf("server ratio with a reference without server CPU = %v, want 0 (none)", server.Cost.Ratio)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// Figure F counts PostgreSQL's CPU alone: the journal's size shows there,
// not in the server's HTTP work, which the total would dilute.
func TestSummarizeCountsPostgres(t *testing.T) {
	ours := []sample{{value: 3, units: 20, cpu: cpu{Server: 0.2, Postgres: 0.04, Tool: 0.02}}}
	ref := []sample{{value: 2, units: 20, cpu: cpu{Server: 0.1, Postgres: 0.02, Tool: 0.02}}}
	r := summarize(Row{}, "query", "postgres", ours, ref)
	if !near(r.Cost.Ratio, 2) || !near(r.Cost.Ours.counted("postgres"), 2) || !near(r.Cost.Reference.counted("postgres"), 1) {
		t.Errorf("cost = %+v, want postgres 2 vs 1 ms per query, ratio 2", *r.Cost)
	}
	if got, want := r.line(), "postgres ms/query: 2.000 vs 1.000 = 2.00×"; !strings.Contains(got, want) {
		t.Errorf("line = %q, want it to contain %q", got, want)
	}
	for _, spent := range []float64{0, -0.01} {
		none := summarize(Row{}, "query", "postgres", ours, []sample{{value: 2, units: 20, cpu: cpu{Postgres: spent}}})
		if got, want := none.line(), "= n/a (a run measured no CPU)"; !strings.Contains(got, want) {
			t.Errorf("line with a reference that spent %v s = %q, want it to contain %q", spent, got, want)
		}
	}
}

// Figure D: what 1,000 subscriptions add to an idle server, per
// subscription and second, with the windows before they opened taken off.
func TestIdleCost(t *testing.T) {
	before := []cpu{{Server: 0.1, Postgres: 0.05}, {Server: 0.2, Postgres: 0.05}}
	open := []cpu{{Server: 0.5, Postgres: 0.05, Tool: 0.3}, {Server: 0.8, Postgres: 0.05, Tool: 0.3}}
	rs := idleCost(open, before, 1000, 10*time.Second)
	// 0.4 and 0.6 s of server CPU over 1,000 × 10 subscription·s: 40 and 60 µs.
	if len(rs) != 2 || !near(rs[0].value, 40) || !near(rs[1].value, 60) || !near(rs[0].units, 10) {
		t.Fatalf("samples = %+v, want values 40 and 60 µs per subscription·s over 10 units", rs)
	}
	if got := spread([]float64{-0.01, 0, 0.005}); got != 0 {
		t.Errorf("spread about a median of 0 = %v, want 0 (none)", got)
	}
	// One reference window of three above zero, by a tick: no ratio.
	ref := []sample{{value: 0, units: 10}, {value: 0.1, units: 10, cpu: cpu{Server: 0.001}}, {value: -0.1, units: 10, cpu: cpu{Server: -0.001}}}
	if got := summarize(Row{}, "1,000 subscription·s", "server", rs, ref); got.Ratio != 0 || got.Cost.Ratio != 0 {
		t.Errorf("ratio, cost ratio = %v, %v against a reference at 0 but for one tick, want 0, 0 (none)", got.Ratio, got.Cost.Ratio)
	}
	r := summarize(Row{}, "1,000 subscription·s", "server", rs, rs)
	if c := r.Cost; !near(c.Ours.Server, 50) || !near(c.Ours.Postgres, 0) || !near(c.Ours.Tool, 30) {
		t.Errorf("cost = %+v, want server 50, postgres 0, tool 30 ms per 1,000 subscription·s", c.Ours)
	}
}

// The table's cost total is the median of the runs' totals, the figure the
// breakdown line and the JSON give, not the sum of the parts' medians.
func TestLineTotalIsTheMedianOfTotals(t *testing.T) {
	// Totals 2, 3 and 3 ms per unit (median 3); the parts' medians are 1
	// and 1, whose sum would be 2.
	var ours []sample
	for _, c := range []cpu{{Server: 1, Postgres: 1}, {Server: 3}, {Postgres: 3}} {
		ours = append(ours, sample{value: 1, units: 1000, cpu: c})
	}
	ref := []sample{{value: 1, units: 1000, cpu: cpu{Postgres: 1}}, {value: 1, units: 1000, cpu: cpu{Postgres: 1}}, {value: 1, units: 1000, cpu: cpu{Postgres: 1}}}
	r := summarize(Row{}, "mutation", "total", ours, ref)
	if got, want := r.line(), "total ms/mutation: 3.000 ±33% vs 1.000"; !strings.Contains(got, want) {
		t.Errorf("line = %q, want it to contain %q", got, want)
	}
	if got := fixed(-0.001); strings.TrimSpace(got) != "0.00" {
		t.Errorf("fixed(-0.001) = %q, want 0.00", got)
	}
}

// Every option is checked before the tool builds or starts anything.
func TestOptionsParse(t *testing.T) {
	good := func() options {
		return options{out: t.TempDir(), runs: 3, duration: 10 * time.Second, eEvents: 1, dSubscribers: 1, fEvents: 1, hEvents: 1}
	}
	o := good()
	if err := o.parse(" e, a,E,,h "); err != nil || strings.Join(o.figures, ",") != "E,A,H" {
		t.Errorf("parse(\" e, a,E,,h \") = %v, figures %v, want nil and E,A,H", err, o.figures)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, figures, want string
		change              func(*options)
	}{
		{"unknown figure", "A,X", `unknown figure "X"`, nil},
		{"no figure", " , ", "no figure", nil},
		{"no runs", "A", "-runs", func(o *options) { o.runs = 0 }},
		{"zero duration", "A", "-duration", func(o *options) { o.duration = 0 }},
		{"negative duration", "B", "-duration", func(o *options) { o.duration = -time.Second }},
		{"no subscribers", "D", "-d-subscribers", func(o *options) { o.dSubscribers = 0 }},
		{"negative events", "H", "-h-events", func(o *options) { o.hEvents = -5 }},
		{"negative pool", "A", "-pool", func(o *options) { o.poolMax = -1 }},
		{"out is a file", "A", "-out", func(o *options) { o.out = file }},
	} {
		o := good()
		if c.change != nil {
			c.change(&o)
		}
		if err := o.parse(c.figures); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: parse(%q) = %v, want an error naming %s", c.name, c.figures, err, c.want)
		}
	}
}
