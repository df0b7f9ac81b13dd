package main

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"testing"
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
