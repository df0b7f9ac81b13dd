package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// cpu is CPU time (user + system) in seconds, split by who spent it.
type cpu struct {
	Server   float64 // the server process (ours) or the reference's own server (refws); 0 when there is none
	Postgres float64 // the private cluster: the postmaster and every process it forked
	Tool     float64 // this process and the children it reaped meanwhile (pgbench)
	Nats     float64 // the NATS server of figure H (`bench natsd`); 0 in the other figures
}

func (c cpu) total() float64 { return c.Server + c.Postgres + c.Tool + c.Nats }

func (c cpu) minus(d cpu) cpu {
	return cpu{c.Server - d.Server, c.Postgres - d.Postgres, c.Tool - d.Tool, c.Nats - d.Nats}
}

// meter counts the CPU a run takes, from /proc and getrusage, so that a
// neighbour's load on the shared machine does not count. The server's
// process may be attached after the start (a process started during the
// run has spent nothing before it).
type meter struct {
	e         *env
	serverPID int
	start     cpu
}

func (e *env) meter(serverPID int) *meter {
	m := &meter{e: e, serverPID: serverPID}
	m.start = m.read()
	return m
}

// attach counts the process pid, started after the meter, as the server.
func (m *meter) attach(pid int) { m.serverPID = pid }

// used is the CPU spent since the meter started.
func (m *meter) used() cpu { return m.read().minus(m.start) }

func (m *meter) read() cpu {
	var c cpu
	if m.serverPID > 0 {
		c.Server = procCPU(strconv.Itoa(m.serverPID)).total
	}
	c.Postgres = clusterCPU(m.e.postmasterPID())
	if m.e.natsPID > 0 {
		c.Nats = procCPU(strconv.Itoa(m.e.natsPID)).total
	}
	var self, children syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	c.Tool = rusageSeconds(self) + rusageSeconds(children)
	return c
}

func rusageSeconds(r syscall.Rusage) float64 {
	return float64(r.Utime.Sec+r.Stime.Sec) + float64(r.Utime.Usec+r.Stime.Usec)/1e6
}

// postmasterPID is the pid of the bench cluster's postmaster, the first
// line of its postmaster.pid.
func (e *env) postmasterPID() int {
	b, err := os.ReadFile(filepath.Join(e.tmp, "pg", "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	return pid
}

// clusterCPU is the CPU, in seconds, of the postmaster pm and of every
// process it ever forked: its own utime+stime, its cutime+cstime (the
// children it has reaped: backends that disconnected, autovacuum workers)
// and the utime+stime of its live children. A child reaped between the
// two reads is missed by that reading; the error is bounded by the CPU of
// the children that end within the microseconds a reading takes.
func clusterCPU(pm int) float64 {
	if pm == 0 {
		return 0
	}
	root := procCPU(strconv.Itoa(pm))
	t := root.total + root.children
	ents, _ := os.ReadDir("/proc")
	for _, d := range ents {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		if p := procCPU(d.Name()); p.comm == "postgres" && p.ppid == pm {
			t += p.total
		}
	}
	return t
}

// procStat is what the tool reads of /proc/<pid>/stat; times in seconds.
type procStat struct {
	comm     string
	ppid     int
	total    float64 // utime + stime
	children float64 // cutime + cstime: the children it waited for
}

const clkTck = 100.0 // USER_HZ, the unit of /proc/<pid>/stat's times on Linux

func procCPU(pid string) procStat {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return procStat{}
	}
	s := string(b)
	l, r := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if l < 0 || r < 0 || r+2 > len(s) {
		return procStat{}
	}
	// After "(comm) ": state ppid pgrp session tty_nr tpgid flags minflt
	// cminflt majflt cmajflt utime stime cutime cstime …
	f := strings.Fields(s[r+2:])
	if len(f) < 15 {
		return procStat{}
	}
	num := func(i int) float64 { v, _ := strconv.ParseFloat(f[i], 64); return v }
	ppid, _ := strconv.Atoi(f[1])
	return procStat{comm: s[l+1 : r], ppid: ppid, total: (num(11) + num(12)) / clkTck, children: (num(13) + num(14)) / clkTck}
}

// sample is one side of one run of a figure: its value (a rate or a
// latency), the units of work it did and what they cost.
type sample struct {
	value      float64
	units      float64 // mutations, events, frames
	cpu        cpu
	statements []statement
	profile    string // the server's CPU profile of the run, if taken
}

// perUnit is CPU per unit of work in ms, medians over the runs.
type perUnit struct {
	Server   float64 `json:"server_ms"`
	Postgres float64 `json:"postgres_ms"`
	Tool     float64 `json:"tool_ms"`
	Nats     float64 `json:"nats_ms,omitempty"`
	Total    float64 `json:"total_ms"`
	Spread   float64 `json:"spread"` // of the counted part ((max-min)/median over the runs)
}

// Cost is a row's CPU per unit of work, ours against the reference's,
// over the same runs.
type Cost struct {
	Unit      string  `json:"unit"`    // what one unit of work is: "mutation", "event", "frame"
	Counted   string  `json:"counted"` // which part the ratio and the target take: "total", "server" or "postgres"
	Ours      perUnit `json:"ours"`
	Reference perUnit `json:"reference"`
	// Ratio is the median of the runs' ours/reference ratios of the
	// counted part; RatioSpread is their spread.
	Ratio       float64 `json:"ratio"`
	RatioSpread float64 `json:"ratio_spread"`
}

// noisy is the spread past which a figure says it is not settled.
const noisy = 0.15

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// spread is (max-min)/median of xs: 0 for one value, and for a median not
// above zero (a CPU difference below /proc's resolution, figure D's).
func spread(xs []float64) float64 {
	m := median(xs)
	if len(xs) < 2 || m <= 0 {
		return 0
	}
	return (slices.Max(xs) - slices.Min(xs)) / m
}

// ratios are ours[i]/ref[i] of paired runs (a pair ran back to back);
// none when a reference is not positive (a CPU difference below /proc's
// resolution can be 0 or negative: figure D's reference), since a median
// over the other pairs alone would overstate the ratio.
func ratios(ours, ref []float64) []float64 {
	var r []float64
	for i := range min(len(ours), len(ref)) {
		if ref[i] <= 0 {
			return nil
		}
		r = append(r, ours[i]/ref[i])
	}
	return r
}

func each(rs []sample, f func(sample) float64) []float64 {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = f(r)
	}
	return xs
}

// costOf is the CPU per unit of runs in ms; counted picks the part whose
// spread is given.
func costOf(rs []sample, counted func(cpu) float64) perUnit {
	per := func(f func(cpu) float64) []float64 {
		return each(rs, func(r sample) float64 { return 1000 * f(r.cpu) / max(r.units, 1) })
	}
	return perUnit{
		Server:   median(per(func(c cpu) float64 { return c.Server })),
		Postgres: median(per(func(c cpu) float64 { return c.Postgres })),
		Tool:     median(per(func(c cpu) float64 { return c.Tool })),
		Nats:     median(per(func(c cpu) float64 { return c.Nats })),
		Total:    median(per(cpu.total)),
		Spread:   spread(per(counted)),
	}
}

// countedPart is the part of a cost that a row's cost ratio takes:
// "server" the server's CPU alone, "postgres" PostgreSQL's, else the total.
func countedPart(counted string) func(cpu) float64 {
	switch counted {
	case "server":
		return func(c cpu) float64 { return c.Server }
	case "postgres":
		return func(c cpu) float64 { return c.Postgres }
	}
	return cpu.total
}

// counted is p's part named as in countedPart; the total is the median
// of the runs' totals (Total), as the breakdown line and the JSON give it,
// not the sum of the parts' medians.
func (p perUnit) counted(counted string) float64 {
	switch counted {
	case "server":
		return p.Server
	case "postgres":
		return p.Postgres
	}
	return p.Total
}

// summarize fills r from paired runs of ours and the reference: the
// medians of their values, the median of the pairs' ratios and the spreads,
// and the CPU per unit (ms per unit), whose ratio counts the part counted
// names (countedPart: "server", "postgres" or "total").
func summarize(r Row, unit, counted string, ours, ref []sample) Row {
	part := countedPart(counted)
	value := func(x sample) float64 { return x.value }
	r.Runs = len(ours)
	r.Ours, r.Reference = median(each(ours, value)), median(each(ref, value))
	rs := ratios(each(ours, value), each(ref, value))
	r.Ratio, r.RatioSpread = median(rs), spread(rs)
	r.OursSpread, r.ReferenceSpread = spread(each(ours, value)), spread(each(ref, value))
	perRun := func(x sample) float64 { return part(x.cpu) / max(x.units, 1) }
	cr := ratios(each(ours, perRun), each(ref, perRun))
	r.Cost = &Cost{Unit: unit, Counted: counted, Ours: costOf(ours, part), Reference: costOf(ref, part),
		Ratio: median(cr), RatioSpread: spread(cr)}
	return r
}

// noisyNote says which of a row's spreads pass noisy, "" when none does.
func (r Row) noisyNote() string {
	var parts []string
	for _, s := range []struct {
		name string
		v    float64
	}{{"ours", r.OursSpread}, {"reference", r.ReferenceSpread}, {"ratio", r.RatioSpread}} {
		if s.v > noisy {
			parts = append(parts, fmt.Sprintf("%s %.0f %%", s.name, 100*s.v))
		}
	}
	if c := r.Cost; c != nil {
		for _, s := range []struct {
			name string
			v    float64
		}{{"cost ours", c.Ours.Spread}, {"cost reference", c.Reference.Spread}, {"cost ratio", c.RatioSpread}} {
			if s.v > noisy {
				parts = append(parts, fmt.Sprintf("%s %.0f %%", s.name, 100*s.v))
			}
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "spread > 15 %: " + strings.Join(parts, ", ")
}

// whereItGoes prints where a row's CPU goes: per unit of work, by process,
// by statement (pg_stat_statements' execution time summed over the runs,
// per unit) and, when profiles were taken, by Go function in the server
// (`go tool pprof -top` over the runs' profiles merged).
func (e *env) whereItGoes(r Row, ours, ref []sample) {
	c := r.Cost
	fmt.Println(r.costByProcess())
	for _, side := range []struct {
		name string
		runs []sample
	}{{"ours", ours}, {"reference", ref}} {
		fmt.Printf("      %s: statements by execution time per %s (ms, calls per %s):\n", side.name, c.Unit, c.Unit)
		for _, s := range topPerUnit(side.runs, 8) {
			fmt.Printf("        %8.3f  %6.2f  %s\n", s.totalMS, s.calls, s.query)
		}
	}
	var profiles []string
	for _, x := range ours {
		if x.profile != "" {
			profiles = append(profiles, x.profile)
		}
	}
	if len(profiles) == 0 {
		return
	}
	for _, view := range []struct{ title, args string }{
		{"the server's functions by own time", "-top -nodecount=15"},
		{"the project's own functions (erp/) by time including callees", "-top -cum -nodecount=15 -show=^erp/"},
	} {
		args := append(append([]string{"tool", "pprof"}, strings.Fields(view.args)...), profiles...)
		out, err := exec.CommandContext(e.ctx, "go", args...).CombinedOutput()
		if err != nil {
			fmt.Println("      server profile: go tool pprof:", err, string(out))
			return
		}
		fmt.Printf("      ours: %s (go tool pprof %s, %d profiles merged):\n", view.title, view.args, len(profiles))
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if strings.HasPrefix(l, "File:") || strings.HasPrefix(l, "Build ID:") || strings.HasPrefix(l, "Type:") || strings.HasPrefix(l, "Time:") {
				continue
			}
			fmt.Println("        " + l)
		}
	}
}

// costByProcess is a line of r's CPU per unit of work by process, ours and
// the reference's (ms, medians over the runs).
func (r Row) costByProcess() string {
	c := r.Cost
	side := func(p perUnit) string {
		s := fmt.Sprintf("server %.3f + postgres %.3f + tool %.3f", p.Server, p.Postgres, p.Tool)
		if p.Nats > 0 {
			s += fmt.Sprintf(" + nats %.3f", p.Nats)
		}
		return s + fmt.Sprintf(" = %.3f", p.Total)
	}
	return fmt.Sprintf("    %s %s, CPU per %s over %d runs (ms, median): ours %s | reference %s",
		r.Figure, r.Case, c.Unit, r.Runs, side(c.Ours), side(c.Reference))
}

// topPerUnit sums the runs' statements by text and divides by the runs'
// units: the n statements with the most execution time per unit, and
// their calls per unit.
func topPerUnit(rs []sample, n int) []statement {
	sum := map[string]*statement{}
	var units float64
	for _, x := range rs {
		units += x.units
		for _, s := range x.statements {
			t := sum[s.query]
			if t == nil {
				t = &statement{query: s.query}
				sum[s.query] = t
			}
			t.totalMS += s.totalMS
			t.calls += s.calls
		}
	}
	var all []statement
	for _, s := range sum {
		all = append(all, statement{query: s.query, totalMS: s.totalMS / max(units, 1), calls: s.calls / max(units, 1)})
	}
	slices.SortFunc(all, func(a, b statement) int { return int(b.totalMS*1e6 - a.totalMS*1e6) })
	return all[:min(n, len(all))]
}
