package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"erp/db/localpg"
)

// pgbenchPath is pgbench beside the server binaries localpg uses (for
// example /usr/lib/postgresql/15/bin), else from PATH.
func pgbenchPath() string {
	if dir, err := localpg.FindBinaries(); err == nil {
		if p := filepath.Join(dir, "pgbench"); isFile(p) {
			return p
		}
	}
	return "pgbench"
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// refTablesSQL makes the reference's tables: copies of the real ones
// (columns, defaults, constraints, indexes) in their own schema, so that
// pgbench pays the same index maintenance without the server's River
// working its rows.
const refTablesSQL = `
CREATE SCHEMA IF NOT EXISTS bench_ref;
CREATE TABLE IF NOT EXISTS bench_ref.sales_orders (LIKE public.sales_orders INCLUDING ALL);
CREATE TABLE IF NOT EXISTS bench_ref.events (LIKE public.events INCLUDING ALL);
CREATE TABLE IF NOT EXISTS bench_ref.river_job (LIKE public.river_job INCLUDING ALL);
CREATE TABLE IF NOT EXISTS bench_ref.number_series (LIKE public.number_series INCLUDING ALL);
`

// figureAScript is the reference transaction: the document, its event and
// its River job, plus the pg_notify River's InsertTx sends in the same
// transaction.
const figureAScript = `BEGIN;
INSERT INTO bench_ref.sales_orders (number, customer) VALUES (gen_random_uuid()::text, 'ООО Бенч') RETURNING id AS so \gset
INSERT INTO bench_ref.events (type, entity, entity_id, payload) VALUES ('doc.created', 'sales_orders', :so::bigint, jsonb_build_object('id', :so::bigint, 'no', 'x', 'entity', 'sales_order')) RETURNING id AS ev \gset
INSERT INTO bench_ref.river_job (args, kind, max_attempts, queue, state, priority) VALUES (jsonb_build_object('event_id', :ev::bigint), 'dispatch_event', 25, 'default', 'available', 1);
SELECT pg_notify('bench_ref_insert', '{"queue":"default"}');
COMMIT;
`

// figureANumberedScript is figureAScript plus the gapless number: a
// diagnostic, not the reference, to show what the series costs.
var figureANumberedScript = strings.Replace(figureAScript, "BEGIN;\n", `BEGIN;
INSERT INTO bench_ref.number_series (prefix, year, last_value) VALUES ('ЗК', 2026, 1) ON CONFLICT (prefix, year) DO UPDATE SET last_value = bench_ref.number_series.last_value + 1 RETURNING last_value \gset
`, 1)

var socketRE = regexp.MustCompile(`host='([^']*)'`)

// pgbench runs script at clients for d and returns tps and the output.
func (e *env) pgbench(script string, clients int, extra ...string) (float64, string, error) {
	path := filepath.Join(e.tmp, fmt.Sprintf("script-%d.sql", time.Now().UnixNano()))
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		return 0, "", err
	}
	m := socketRE.FindStringSubmatch(e.cluster.URL())
	if m == nil {
		return 0, "", fmt.Errorf("no socket dir in %s", e.cluster.URL())
	}
	args := append([]string{"-n", "-h", m[1], "-U", "postgres", "-M", "prepared",
		"-c", strconv.Itoa(clients), "-j", "2", "-f", path}, extra...)
	args = append(args, "erp")
	out, err := exec.CommandContext(e.ctx, pgbenchPath(), args...).CombinedOutput()
	if err != nil {
		return 0, string(out), fmt.Errorf("pgbench: %w: %s", err, out)
	}
	tm := regexp.MustCompile(`tps = ([0-9.]+)`).FindStringSubmatch(string(out))
	if tm == nil {
		return 0, string(out), fmt.Errorf("no tps in pgbench output: %s", out)
	}
	tps, _ := strconv.ParseFloat(tm[1], 64)
	return tps, string(out), nil
}

// figureA: createSalesOrder mutations/s at 8 and 32 clients against
// pgbench's three-INSERT transaction at the same concurrency.
func (e *env) figureA() error {
	if _, err := e.pool.Exec(e.ctx, refTablesSQL); err != nil {
		return err
	}
	s, err := e.startServer()
	if err != nil {
		return err
	}
	defer s.stop()
	if err := s.ensureItem(e.ctx); err != nil {
		return err
	}
	d := e.opts.duration
	var numbered8 float64
	for _, clients := range []int{8, 32} {
		// Warm up the connections and caches.
		e.loadMutations(s, clients, d/4)
		obs := e.observe(s.cmd.Process.Pid)
		ok, failed, lat := e.loadMutations(s, clients, d)
		ours := float64(ok) / d.Seconds()
		oursNote := obs.finish()
		e.waitDrained(time.Minute)
		obs = e.observe(0)
		ref, _, err := e.pgbench(figureAScript, clients, "-T", strconv.Itoa(int(d.Seconds())))
		if err != nil {
			return err
		}
		refNote := obs.finish()
		e.waitDrained(time.Minute)
		numbered, _, err := e.pgbench(figureANumberedScript, clients, "-T", strconv.Itoa(int(d.Seconds())))
		if err != nil {
			return err
		}
		if clients == 8 {
			numbered8 = numbered
		}
		r := Row{Figure: "A", Case: fmt.Sprintf("%d clients", clients), Metric: "mutations/s vs pgbench tps",
			Ours: ours, Reference: ref, Target: "≥ 0.5",
			Settings: e.settings("clients", strconv.Itoa(clients), "duration", d.String(), "pgbench", "-M prepared -j 2"),
			Notes:    fmt.Sprintf("ours: %d ok, %d failed, mean latency %s; %s | reference: %s | diagnostic: the reference plus the gapless number-series upsert runs %.1f tps", ok, failed, lat, oursNote, refNote, numbered)}
		r.Pass = ref > 0 && ours/ref >= 0.5
		e.add(r)
		fmt.Println("   ", r.Notes)
	}

	// Bulk intake: the same orders through receiveOrders, 100 a call (one
	// transaction), against pgbench's numbered transaction, one order each.
	const clients, perCall = 8, 100
	e.waitDrained(time.Minute)
	e.loadIntake(s, clients, perCall, d/4)
	e.waitDrained(time.Minute)
	obs := e.observe(s.cmd.Process.Pid)
	orders, failed := e.loadIntake(s, clients, perCall, d)
	ours := float64(orders) / d.Seconds()
	r := Row{Figure: "A", Case: fmt.Sprintf("receiveOrders ×%d, %d clients", perCall, clients), Metric: "orders/s vs pgbench numbered tps",
		Ours: ours, Reference: numbered8, Target: "≥ 1.0",
		Settings: e.settings("clients", strconv.Itoa(clients), "per call", strconv.Itoa(perCall), "duration", d.String()),
		Notes:    fmt.Sprintf("ours: %d orders, %d calls failed; %s", orders, failed, obs.finish())}
	r.Pass = numbered8 > 0 && ours/numbered8 >= 1.0
	e.add(r)
	fmt.Println("   ", r.Notes)
	return nil
}

// intakeSeq numbers the bench's shop orders, so that every intake input
// is a new order.
var intakeSeq atomic.Int64

// loadIntake runs clients goroutines sending receiveOrders calls of
// perCall new shop orders for d and returns the orders written and the
// calls that failed.
func (e *env) loadIntake(s *server, clients, perCall int, d time.Duration) (orders, failed int64) {
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for range clients {
		wg.Go(func() {
			for time.Now().Before(deadline) && e.ctx.Err() == nil {
				in := make([]map[string]any, perCall)
				for i := range in {
					in[i] = map[string]any{"source": "SHOP", "externalId": fmt.Sprintf("bench-%d", intakeSeq.Add(1)),
						"customer": "ООО Бенч", "lines": []map[string]any{{"sku": "BENCH-1", "quantity": "1", "price": "10"}}}
				}
				var out struct {
					ReceiveOrders []*struct{ Duplicate bool } `json:"receiveOrders"`
				}
				err := s.gql(e.ctx, `mutation($in: [ReceiveOrderInput!]!) { receiveOrders(inputs: $in) { duplicate } }`, map[string]any{"in": in}, &out)
				if err != nil {
					atomic.AddInt64(&failed, 1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				atomic.AddInt64(&orders, int64(len(out.ReceiveOrders)))
			}
		})
	}
	wg.Wait()
	if v := firstErr.Load(); v != nil {
		fmt.Println("    first intake error:", strings.TrimSpace(v.(string)))
	}
	return orders, failed
}

// loadMutations runs clients goroutines creating sales orders for d.
func (e *env) loadMutations(s *server, clients int, d time.Duration) (ok, failed int64, mean time.Duration) {
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	var total atomic.Int64
	var firstErr atomic.Value
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && e.ctx.Err() == nil {
				t := time.Now()
				if _, err := s.salesOrder(e.ctx); err != nil {
					atomic.AddInt64(&failed, 1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				total.Add(int64(time.Since(t)))
				atomic.AddInt64(&ok, 1)
			}
		}()
	}
	wg.Wait()
	if v := firstErr.Load(); v != nil {
		fmt.Println("    first mutation error:", strings.TrimSpace(v.(string)))
	}
	if ok > 0 {
		mean = time.Duration(total.Load() / ok)
	}
	return ok, failed, mean.Round(time.Microsecond)
}
