// Command bench is the load tool: it starts a private PostgreSQL
// (db/localpg, fsync on), builds and runs the real server binary (`serve`),
// drives it over HTTP and websockets, measures a reference (pgbench, a bare
// River client, a bare gorilla server, a bare JetStream publish loop) in the
// same run on the same PostgreSQL (and NATS server), and prints each figure
// as a table row with its settings and, beside every rate and latency, the
// CPU per unit of work of both sides (A, B, C, E and H over interleaved
// runs; D over -runs windows of each side; F and G one run)
// (cost.go; BENCHMARKS.md, How it works); the rows are
// also written to bench/results/ as JSON, the console output as text.
//
// The application is importable (package app), yet the tool drives the
// built binary on purpose: a process of its own measures exactly what runs
// in production (HTTP, gqlgen, River, feed), with its own heap and
// scheduler apart from the load generator's, at the price of not reading
// its runtime/metrics.
//
//	go run ./bench -figures A,B,E,G,H      # full sizes
//	go run ./bench -figures A,B,E -quick   # a few seconds each
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"erp/db"
	"erp/db/localpg"
	"erp/jobs"
)

// Row is one figure's result: ours, the reference, their ratio and the
// settings both ran with.
type Row struct {
	Figure    string            `json:"figure"`
	Case      string            `json:"case"`
	Metric    string            `json:"metric"`
	Ours      float64           `json:"ours"`
	Reference float64           `json:"reference"`
	Ratio     float64           `json:"ratio"`
	Target    string            `json:"target"`
	Pass      bool              `json:"pass"`
	Settings  map[string]string `json:"settings"`
	Notes     string            `json:"notes,omitempty"`
	// Runs is how many interleaved runs (ours, then the reference) the row
	// has; Ours, Reference and Ratio are then medians (Ratio of the runs'
	// ratios) and each spread is (max-min)/median over the runs.
	Runs            int     `json:"runs,omitempty"`
	OursSpread      float64 `json:"ours_spread,omitempty"`
	ReferenceSpread float64 `json:"reference_spread,omitempty"`
	RatioSpread     float64 `json:"ratio_spread,omitempty"`
	// Cost is the CPU per unit of work of both sides, when measured.
	Cost *Cost `json:"cost,omitempty"`
}

type options struct {
	figures      []string // upper case, each one of allFigures
	quick        bool
	out          string
	poolMax      int
	syncCommit   string
	eEvents      int
	duration     time.Duration
	keep         bool
	dSubscribers int
	fEvents      int
	hEvents      int
	runs         int
}

// env is what every figure shares: the cluster, the server and the settings.
type env struct {
	opts    options
	ctx     context.Context
	logger  *slog.Logger
	cluster *localpg.Cluster
	tmp     string
	binary  string
	pool    *pgxpool.Pool // the bench's own connections to the erp database
	rows    []Row
	natsPID int          // figure H's NATS server while it runs, metered as cpu.Nats
	console bytes.Buffer // what the run printed, for latest.txt, complete once untee returns
	untee   func()
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "refws" {
		os.Exit(runRefWS(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "natsd" {
		os.Exit(runNatsd(os.Args[2:]))
	}
	var o options
	figures := flag.String("figures", allFigures, "comma-separated figures to run ("+allFigures+")")
	flag.BoolVar(&o.quick, "quick", false, "tiny sizes and short runs (a smoke test): sizes at most E 300, D 200, F 100,000, H 300 events, and -duration 2s unless given")
	flag.StringVar(&o.out, "out", "bench/results", "directory for the results: latest.json and latest.txt (quick.* with -quick; interrupted.* for a run stopped by a signal)")
	flag.IntVar(&o.poolMax, "pool", 0, "server pool_max_conns, the total of its API and work pools (0: unset, the product's sizes: docs/operations.md, Connections)")
	flag.StringVar(&o.syncCommit, "synchronous-commit", "on", "PostgreSQL synchronous_commit for the whole cluster (fsync stays on)")
	flag.IntVar(&o.eEvents, "e-events", 100000, "figure E: pending order.received events")
	flag.IntVar(&o.dSubscribers, "d-subscribers", 10000, "figure D: idle subscriptions")
	flag.IntVar(&o.fEvents, "f-events", 10_000_000, "figure F: events in the large journal (the reference has 10,000)")
	flag.IntVar(&o.hEvents, "h-events", 10000, "figure H: events published to NATS JetStream per run")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "length of each timed run (A, B; D's idle CPU windows)")
	flag.IntVar(&o.runs, "runs", 3, "runs of each figure, ours and the reference interleaved (A, B, C, E, H; D: idle CPU windows of each side); the table shows medians and spreads")
	flag.BoolVar(&o.keep, "keep", false, "keep the temp directory (cluster, logs, profiles)")
	flag.Parse()
	given := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if o.quick && !given["duration"] {
		o.duration = 2 * time.Second
	}
	if err := o.parse(*figures); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if o.quick {
		o.eEvents = min(o.eEvents, 300)
		o.dSubscribers = min(o.dSubscribers, 200)
		o.fEvents = min(o.fEvents, 100_000)
		o.hEvents = min(o.hEvents, 300)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// allFigures are the figures the tool knows, in the order a run takes them.
const allFigures = "A,B,C,D,E,F,G,H"

// parse sets o.figures from the -figures list and checks every option
// before anything starts: an error names the flag and what it takes, and
// -out is created (so a run cannot end with nowhere to write).
func (o *options) parse(figures string) error {
	known := strings.Split(allFigures, ",")
	for _, f := range strings.Split(figures, ",") {
		f = strings.ToUpper(strings.TrimSpace(f))
		if f == "" {
			continue
		}
		if !slices.Contains(known, f) {
			return fmt.Errorf("-figures: unknown figure %q (the figures are %s)", f, allFigures)
		}
		if !slices.Contains(o.figures, f) {
			o.figures = append(o.figures, f)
		}
	}
	switch {
	case len(o.figures) == 0:
		return fmt.Errorf("-figures: no figure given (the figures are %s)", allFigures)
	case o.runs < 1:
		return errors.New("-runs must be at least 1")
	case o.duration < time.Second:
		return fmt.Errorf("-duration must be at least 1s, not %s", o.duration)
	case o.eEvents < 1, o.dSubscribers < 1, o.fEvents < 1, o.hEvents < 1:
		return errors.New("-e-events, -d-subscribers, -f-events and -h-events must each be at least 1")
	case o.poolMax < 0:
		return errors.New("-pool must be 0 (the product's sizes) or more")
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return fmt.Errorf("-out: %w", err)
	}
	return nil
}

func run(ctx context.Context, o options) (err error) {
	raiseNoFile()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	tmp, err := os.MkdirTemp("", "erp-bench-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Println("temp dir:", tmp)
	} else {
		defer func() {
			os.RemoveAll(tmp)
			fmt.Println("the temp dir with the profiles and logs named above is removed:", tmp, "(-keep keeps it)")
		}()
	}
	e := &env{opts: o, ctx: ctx, logger: logger, tmp: tmp}
	e.untee = sync.OnceFunc(teeStdout(&e.console))
	defer e.untee()

	fmt.Println("building the server binary…")
	e.binary = filepath.Join(tmp, "erp-bench")
	build := exec.CommandContext(ctx, "go", "build", "-o", e.binary, ".")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("go build: %w", err)
	}

	fmt.Println("starting PostgreSQL (fsync on)…")
	if err := preloadStatStatements(ctx, localpg.Config{Dir: filepath.Join(tmp, "pg"), DBName: "erp", Logger: logger}); err != nil {
		return err
	}
	e.cluster, err = localpg.Start(ctx, localpg.Config{Dir: filepath.Join(tmp, "pg"), DBName: "erp", Logger: logger})
	if err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		err = errors.Join(err, e.cluster.Stop(stopCtx))
	}()
	admin, err := pgxpool.New(ctx, e.cluster.AdminURL())
	if err != nil {
		return err
	}
	for _, q := range []string{
		"ALTER SYSTEM SET synchronous_commit = " + quoteLiteral(o.syncCommit),
		"SELECT pg_reload_conf()",
		"CREATE DATABASE riverref",
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			admin.Close()
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	admin.Close()

	if e.pool, err = db.Connect(ctx, e.cluster.URL()+" pool_max_conns=40"); err != nil {
		return err
	}
	defer e.pool.Close()
	if err := db.Migrate(ctx, e.pool, logger); err != nil {
		return err
	}
	if _, err := e.pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return err
	}

	for _, f := range o.figures {
		if ctx.Err() != nil {
			break
		}
		var ferr error
		switch f {
		case "A":
			ferr = e.figureA()
		case "B":
			ferr = e.figureB()
		case "D":
			ferr = e.figureD()
		case "E":
			ferr = e.figureE()
		case "C":
			ferr = e.figureC()
		case "F":
			ferr = e.figureF()
		case "G":
			ferr = e.figureG()
		case "H":
			ferr = e.figureH()
		}
		if ferr != nil {
			fmt.Fprintf(os.Stderr, "figure %s: %v\n", f, ferr)
			err = errors.Join(err, fmt.Errorf("figure %s: %w", f, ferr))
		}
	}
	if werr := e.writeResults(); werr != nil {
		err = errors.Join(err, werr)
	}
	return err
}

// settings are the settings every row carries, plus extra.
func (e *env) settings(extra ...string) map[string]string {
	perCPU := max(4, runtime.GOMAXPROCS(0))
	pool := fmt.Sprintf("unset: api max(4, GOMAXPROCS)+4=%d, work max(4, GOMAXPROCS)+5=%d (app.PoolSizes)", perCPU+4, perCPU+5)
	if e.opts.poolMax > 0 {
		pool = fmt.Sprint(e.opts.poolMax)
	}
	s := map[string]string{
		"FetchCooldown":      jobs.FetchCooldown.String(),
		"FetchPollInterval":  jobs.FetchPollInterval.String(),
		"MaxWorkers":         "20",
		"pool_max_conns":     pool,
		"synchronous_commit": e.opts.syncCommit,
		"fsync":              "on",
		"nproc":              fmt.Sprint(runtime.NumCPU()),
	}
	for i := 0; i+1 < len(extra); i += 2 {
		s[extra[i]] = extra[i+1]
	}
	return s
}

func (e *env) add(r Row) {
	if r.Ratio == 0 && r.Reference != 0 {
		r.Ratio = r.Ours / r.Reference
	}
	e.rows = append(e.rows, r)
	fmt.Println(r.line())
}

// line is the row as a line of the table: the medians with their spreads
// when there were runs, the CPU per unit of work when measured, and a
// last column naming the spreads past 15 %.
func (r Row) line() string {
	keys := []string{}
	for _, k := range []string{"clients", "rate", "subscribers", "events", "duration"} {
		if v, ok := r.Settings[k]; ok {
			keys = append(keys, k+"="+v)
		}
	}
	pass := "FAIL"
	if r.Pass {
		pass = "ok"
	}
	ours, ref := fixed(r.Ours), fixed(r.Reference)
	if r.Runs > 1 {
		ours += fmt.Sprintf(" ±%2.0f%%", 100*r.OursSpread)
		ref += fmt.Sprintf(" ±%2.0f%%", 100*r.ReferenceSpread)
	}
	cost := "-"
	if c := r.Cost; c != nil {
		o, f := c.Ours.counted(c.Counted), c.Reference.counted(c.Counted)
		// No ratio when a reference run spent nothing measurable (ratios:
		// the other pairs' median would overstate it), or when the median
		// ratio is 0 (ours spent nothing measurable).
		ratio := "n/a (a run measured no CPU)"
		if c.Ratio != 0 {
			ratio = fmt.Sprintf("%.2f×", c.Ratio)
		}
		cost = fmt.Sprintf("%s ms/%s: %.3f vs %.3f = %s", c.Counted, c.Unit, o, f, ratio)
		if r.Runs > 1 {
			cost = fmt.Sprintf("%s ms/%s: %.3f ±%.0f%% vs %.3f ±%.0f%% = %s", c.Counted, c.Unit, o, 100*c.Ours.Spread, f, 100*c.Reference.Spread, ratio)
		}
	}
	return fmt.Sprintf("| %s | %-22s | %-28s | %s | %s | %6.2f | %s | %-22s | %-4s | %s | %s |",
		r.Figure, r.Case, r.Metric, ours, ref, r.Ratio, cost, r.Target, pass, strings.Join(keys, " "), r.noisyNote())
}

// fixed is x with two decimals, 10 wide; a difference of CPU readings
// just below zero (figure D's idle CPU) is 0.00, not -0.00.
func fixed(x float64) string {
	if x > -0.005 && x < 0 {
		x = 0
	}
	return fmt.Sprintf("%10.2f", x)
}

func (e *env) writeResults() error {
	if len(e.rows) == 0 {
		return nil
	}
	machine := map[string]string{"nproc": fmt.Sprint(runtime.NumCPU()), "goos": runtime.GOOS, "goarch": runtime.GOARCH}
	if b, err := exec.Command("free", "-h").Output(); err == nil {
		machine["free -h"] = string(b)
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				machine["cpu"] = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
				break
			}
		}
	}
	doc := map[string]any{
		"time":    time.Now().UTC().Format(time.RFC3339),
		"command": strings.Join(os.Args, " "),
		"quick":   e.opts.quick,
		"machine": machine,
		"rows":    e.rows,
	}
	// latest.* (quick.*) hold a whole run: one a signal stopped does not
	// replace them.
	name := "latest"
	if e.opts.quick {
		name = "quick"
	}
	if e.ctx.Err() != nil {
		name = "interrupted"
		doc["interrupted"] = true
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	fmt.Println()
	fmt.Printf("| fig | case | metric | ours | reference | ratio | CPU per unit: ours vs reference = ratio | target | pass | settings | spread |\n")
	for _, r := range e.rows {
		fmt.Println(r.line())
	}
	path := filepath.Join(e.opts.out, name)
	fmt.Println("results:", path+".json,", path+".txt")
	e.untee()
	return errors.Join(os.WriteFile(path+".json", append(b, '\n'), 0o644),
		os.WriteFile(path+".txt", e.console.Bytes(), 0o644))
}

// teeStdout copies what this process prints to stdout into buf as well
// (and the children's output it passes through), until the returned
// function restores stdout and waits for the copy to end.
func teeStdout(buf *bytes.Buffer) func() {
	r, w, err := os.Pipe()
	if err != nil {
		return func() {}
	}
	console := os.Stdout
	os.Stdout = w
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(io.MultiWriter(console, buf), r)
	}()
	return func() {
		os.Stdout = console
		w.Close()
		<-done
		r.Close()
	}
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// raiseNoFile lifts RLIMIT_NOFILE to its hard limit: figure D opens tens of
// thousands of sockets (both ends in this machine).
func raiseNoFile() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

// preloadStatStatements initialises the cluster in cfg.Dir and restarts it
// with pg_stat_statements loaded (it needs shared_preload_libraries), so
// that every run's notes name the statements PostgreSQL spent its time on.
func preloadStatStatements(ctx context.Context, cfg localpg.Config) error {
	c, err := localpg.Start(ctx, cfg)
	if err != nil {
		return err
	}
	admin, err := pgxpool.New(ctx, c.AdminURL())
	if err == nil {
		_, err = admin.Exec(ctx, "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
		admin.Close()
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return errors.Join(err, c.Stop(stopCtx))
}
