package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"erp/db"
)

// server is the real erp binary running `serve` against the bench cluster.
type server struct {
	cmd   *exec.Cmd
	URL   string
	Token string
	// Pprof is the base URL of the server's profiling listener
	// (PPROF_ADDR), http://127.0.0.1:port/debug/pprof.
	Pprof string
	done  chan struct{}
	http  *http.Client
	tmp   string
}

// startServer runs the built binary and waits for /healthz.
func (e *env) startServer(extraEnv ...string) (*server, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	pprofAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	token, err := db.NewToken()
	if err != nil {
		return nil, err
	}
	dbURL := e.cluster.URL()
	if e.opts.poolMax > 0 {
		dbURL += fmt.Sprintf(" pool_max_conns=%d", e.opts.poolMax)
	}
	cmd := exec.Command(e.binary, "serve")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL, "ADDR="+addr, "ADMIN_TOKEN="+token,
		"DATA_DIR="+filepath.Join(e.tmp, "data"), "PPROF_ADDR="+pprofAddr)
	cmd.Env = append(cmd.Env, extraEnv...)
	logf, err := os.OpenFile(filepath.Join(e.tmp, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, URL: "http://" + addr, Token: token, Pprof: "http://" + pprofAddr + "/debug/pprof",
		done: make(chan struct{}), tmp: e.tmp,
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1000, MaxConnsPerHost: 0}, Timeout: 30 * time.Second}}
	go func() { _ = cmd.Wait(); logf.Close(); close(s.done) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		res, err := http.Get(s.URL + "/healthz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("server exited during start (see %s)", filepath.Join(e.tmp, "server.log"))
		default:
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("server did not start in 60 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freeAddr is a free loopback host:port.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// memStats reads the server's live heap and goroutine stacks after a GC,
// in bytes, and its goroutine count, through the pprof listener: the heap profile with
// debug=1 ends with runtime.MemStats, of which HeapAlloc (live heap
// objects after gc=1) and StackInuse are the counterparts of the
// reference's runtime/metrics /memory/classes/heap/objects and
// /memory/classes/heap/stacks.
func (s *server) memStats() (heap, stack float64, goroutines int, err error) {
	b, err := s.pprofGet("/heap?gc=1&debug=1")
	if err != nil {
		return 0, 0, 0, err
	}
	var heapAlloc, stackInuse, stackSys int64
	found := 0
	for _, l := range bytes.Split(b, []byte("\n")) {
		if n, _ := fmt.Sscanf(string(l), "# HeapAlloc = %d", &heapAlloc); n == 1 {
			found++
		}
		if n, _ := fmt.Sscanf(string(l), "# Stack = %d / %d", &stackInuse, &stackSys); n == 2 {
			found++
		}
	}
	if found != 2 {
		return 0, 0, 0, fmt.Errorf("no HeapAlloc/Stack in the heap profile")
	}
	g, err := s.pprofGet("/goroutine?debug=1")
	if err != nil {
		return 0, 0, 0, err
	}
	if _, err := fmt.Sscanf(string(g), "goroutine profile: total %d", &goroutines); err != nil {
		return 0, 0, 0, fmt.Errorf("goroutine profile: %w", err)
	}
	return float64(heapAlloc), float64(stackInuse), goroutines, nil
}

// saveProfile writes the server's profile at path (under /debug/pprof,
// with its query) to name in the temp dir's profiles/ (kept with -keep)
// and returns the file's path.
func (s *server) saveProfile(path, name string) (string, error) {
	b, err := s.pprofGet(path)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(s.tmp, "profiles")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	file := filepath.Join(dir, name)
	return file, os.WriteFile(file, b, 0o644)
}

// profileServer takes the server's CPU profile for d (at least 1 s) from
// now into the temp dir's profiles/name-server.pprof; the channel yields
// the file, or "" when profiling failed.
func (e *env) profileServer(s *server, d time.Duration, name string) <-chan string {
	done := make(chan string, 1)
	go func() {
		file, err := s.saveProfile(fmt.Sprintf("/profile?seconds=%d", max(1, int(d.Seconds()))), name+"-server.pprof")
		if err != nil {
			fmt.Println("    warning: server CPU profile:", err)
			file = ""
		}
		done <- file
	}()
	return done
}

func (s *server) pprofGet(path string) ([]byte, error) {
	res, err := http.Get(s.Pprof + path)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("pprof %s: HTTP %d: %s", path, res.StatusCode, b)
	}
	return b, nil
}

// stop sends SIGTERM and waits up to 20 s, then kills.
func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

func rssOf(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range bytes.Split(b, []byte("\n")) {
		var v int64
		if n, _ := fmt.Sscanf(string(l), "VmRSS: %d kB", &v); n == 1 {
			return v, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

// gql posts one GraphQL operation and decodes data into out (may be nil).
func (s *server) gql(ctx context.Context, query string, vars map[string]any, out any) error {
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/graphql", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+s.Token)
	res, err := s.http.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	var r struct {
		Data   json.RawMessage `json:"data"`
		Errors []struct {
			Message string `json:"message"`
		} `json:"errors"`
	}
	if err := json.NewDecoder(res.Body).Decode(&r); err != nil {
		return fmt.Errorf("decode response (HTTP %d): %w", res.StatusCode, err)
	}
	if len(r.Errors) > 0 {
		return fmt.Errorf("graphql: %s", r.Errors[0].Message)
	}
	if out != nil {
		return json.Unmarshal(r.Data, out)
	}
	return nil
}

const createSalesOrder = `mutation($c: String!) { createSalesOrder(input: {customer: $c, lines: [{sku: "BENCH-1", quantity: "1", price: "10"}]}) { id number } }`

// ensureItem creates the item the bench's orders sell (once).
func (s *server) ensureItem(ctx context.Context) error {
	err := s.gql(ctx, `mutation { createItem(input: {sku: "BENCH-1", name: "Стол", unit: "шт"}) { id } }`, nil, nil)
	if err != nil && !bytes.Contains([]byte(err.Error()), []byte("exist")) {
		return err
	}
	return nil
}

// salesOrder creates one order and returns its id.
func (s *server) salesOrder(ctx context.Context) (string, error) {
	var out struct {
		CreateSalesOrder struct {
			ID string `json:"id"`
		} `json:"createSalesOrder"`
	}
	err := s.gql(ctx, createSalesOrder, map[string]any{"c": "ООО Бенч"}, &out)
	return out.CreateSalesOrder.ID, err
}

// waitDrained waits (at most limit) until every event is processed and no
// River job is pending, so that a reference never shares the machine with
// the server's leftover work.
func (e *env) waitDrained(limit time.Duration) { e.waitDrainedOn(e.pool, limit) }

// waitDrainedOn is waitDrained for the database of pool.
func (e *env) waitDrainedOn(pool *pgxpool.Pool, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && e.ctx.Err() == nil {
		var n int
		err := pool.QueryRow(e.ctx, `SELECT (SELECT count(*) FROM events WHERE processed_at IS NULL)
			+ (SELECT count(*) FROM river_job WHERE state IN ('available', 'running', 'retryable') AND kind <> 'sweep_events')`).Scan(&n)
		if err == nil && n == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Println("    warning: server work not drained within", limit)
}

var dbnameRE = regexp.MustCompile(`dbname='[^']*'`)

// replaceDB points a key=value connection string at another database.
func replaceDB(url, name string) string { return dbnameRE.ReplaceAllString(url, "dbname='"+name+"'") }
