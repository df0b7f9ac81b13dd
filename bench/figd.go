package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// figureD: memory per idle subscription. The server holds N subscribed
// graphql-transport-ws sockets (filtered on a type nothing produces
// meanwhile); the reference, `bench refws` (a bare gorilla server in its
// own process), holds N sockets with one reader goroutine each. Both
// are measured by RSS delta (VmRSS after − before, over N) and by
// heap+stack delta after a GC: the reference's from
// runtime/metrics, the server's from MemStats through its pprof listener
// (PPROF_ADDR), which also gives the goroutines per socket and a heap
// profile (profiles/d-heap.pprof in the temp dir, kept with -keep).
// The CPU an idle subscription costs (its keepalive) is the server's CPU
// over windows of -duration with the N sockets open, minus the same
// windows before they opened, per subscription and second.
func (e *env) figureD() error {
	n := e.opts.dSubscribers
	s, err := e.startServer()
	if err != nil {
		return err
	}
	defer s.stop()
	time.Sleep(time.Second)
	heapBefore, stackBefore, gBefore, err := s.memStats()
	if err != nil {
		return err
	}
	oursBase, err := e.idleWindows(s.cmd.Process.Pid)
	if err != nil {
		return err
	}
	var oursOpen []cpu
	var heapAfter, stackAfter float64
	var gAfter int
	var heapFile string
	// A subscription that ends (an error, a dropped socket) is no longer
	// idle: the figure fails rather than measure fewer.
	var ended atomic.Int64
	var endErr atomic.Value
	var closing atomic.Bool
	oursKiB, err := e.idleRSSHook(s.cmd.Process.Pid, n, func(ctx context.Context) (func(), error) {
		// A type nothing produces during D; the API refuses an unknown one.
		sub, err := s.subscribe(ctx, []string{"token.revoked"}, "id")
		if err != nil {
			return nil, err
		}
		go func() {
			if err := sub.read(func(json.RawMessage) {}); !closing.Load() {
				ended.Add(1)
				endErr.CompareAndSwap(nil, fmt.Sprint(err))
			}
		}()
		return sub.close, nil
	}, func() {
		var err error
		if oursOpen, err = e.idleWindows(s.cmd.Process.Pid); err != nil {
			fmt.Println("    warning: idle CPU:", err)
		}
		if heapAfter, stackAfter, gAfter, err = s.memStats(); err != nil {
			fmt.Println("    warning: server memory stats:", err)
		}
		if heapFile, err = s.saveProfile("/heap", "d-heap.pprof"); err != nil {
			fmt.Println("    warning: heap profile:", err)
		}
		_, _ = s.saveProfile("/goroutine?debug=1", "d-goroutines.txt")
		closing.Store(true)
	})
	if err != nil {
		return fmt.Errorf("ours: %w", err)
	}
	if k := ended.Load(); k > 0 {
		return fmt.Errorf("ours: %d of %d subscriptions ended while idle, the first: %v", k, n, endErr.Load())
	}
	oursHeap := (heapAfter - heapBefore) / float64(n) / 1024
	oursStack := (stackAfter - stackBefore) / float64(n) / 1024
	oursHS := oursHeap + oursStack
	oursG := float64(gAfter-gBefore) / float64(n)
	s.stop()

	self, err := os.Executable()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(self, "refws", "-addr", addr)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := bufio.NewScanner(stdout)
	lines.Scan() // "listening"
	metricsOf := func() (float64, error) {
		res, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return 0, err
		}
		defer res.Body.Close()
		var m struct{ HeapStack float64 }
		return m.HeapStack, json.NewDecoder(res.Body).Decode(&m)
	}
	hsBefore, err := metricsOf()
	if err != nil {
		return err
	}
	refBase, err := e.idleWindows(cmd.Process.Pid)
	if err != nil {
		return err
	}
	var refOpen []cpu
	var hsAfter float64
	dialer := websocket.Dialer{HandshakeTimeout: 30 * time.Second, ReadBufferSize: 1024, WriteBufferSize: 1024}
	refKiB, err := e.idleRSSHook(cmd.Process.Pid, n, func(ctx context.Context) (func(), error) {
		c, _, err := dialer.DialContext(ctx, "ws://"+addr+"/ws", nil) //nolint:bodyclose // gorilla: a handshake response needs no closing
		if err != nil {
			return nil, err
		}
		go func() {
			for {
				if _, _, err := c.ReadMessage(); err != nil {
					return
				}
			}
		}()
		return func() { _ = c.Close() }, nil
	}, func() {
		var err error
		if refOpen, err = e.idleWindows(cmd.Process.Pid); err != nil {
			fmt.Println("    warning: idle CPU:", err)
		}
		hsAfter, _ = metricsOf()
	})
	if err != nil {
		return fmt.Errorf("reference: %w", err)
	}
	refHS := (hsAfter - hsBefore) / float64(n) / 1024
	note := fmt.Sprintf("RSS delta per socket; heap+stack after GC per socket: ours %.1f KiB = heap %.1f + stacks %.1f (MemStats HeapAlloc+StackInuse via pprof, %.2f goroutines per socket; heap profile %s), reference %.1f KiB (runtime/metrics, 1 goroutine per socket)",
		oursHS, oursHeap, oursStack, oursG, heapFile, refHS)
	e.add(Row{Figure: "D", Case: fmt.Sprintf("%d idle subscriptions", n), Metric: "KiB RSS per subscription",
		Ours: oursKiB, Reference: refKiB, Target: "≤ 2× and ≤ 40 KiB", Pass: oursKiB <= 2*refKiB && oursKiB <= 40,
		Settings: e.settings("subscribers", fmt.Sprint(n)), Notes: note})
	e.add(Row{Figure: "D", Case: fmt.Sprintf("%d idle subscriptions", n), Metric: "KiB heap+stack per subscription",
		Ours: oursHS, Reference: refHS, Target: "≤ 2× and ≤ 40 KiB", Pass: oursHS <= 2*refHS && oursHS <= 40,
		Settings: e.settings("subscribers", fmt.Sprint(n)), Notes: "live heap objects + goroutine stacks after GC, delta over N"})
	fmt.Println("   ", note)

	w := e.opts.duration
	idle := summarize(Row{Figure: "D", Case: fmt.Sprintf("%d idle subscriptions", n), Metric: "µs server CPU per subscription·s",
		Target: "information", Pass: true, Settings: e.settings("subscribers", fmt.Sprint(n), "duration", w.String()),
		Notes: fmt.Sprintf("the server's CPU over %d windows of %s with the sockets open, each minus a window before they opened (keepalive: a ping every 10 s, app's wsKeepAlive; the reference sends none); /proc's 10 ms ticks are %.2f µs per subscription·s",
			len(oursOpen), w, 1e4/(float64(n)*w.Seconds()))},
		"1,000 subscription·s", "server", idleCost(oursOpen, oursBase, n, w), idleCost(refOpen, refBase, n, w))
	e.add(idle)
	fmt.Println(idle.costByProcess())
	return nil
}

// idleWindows meters -runs windows of -duration each, pid counted as the
// server, and returns the CPU of each.
func (e *env) idleWindows(pid int) ([]cpu, error) {
	var cs []cpu
	for range e.opts.runs {
		m := e.meter(pid)
		select {
		case <-e.ctx.Done():
			return cs, e.ctx.Err()
		case <-time.After(e.opts.duration):
		}
		cs = append(cs, m.used())
	}
	return cs, nil
}

// idleCost pairs windows of length w with n subscriptions open with the
// windows before they opened: what the n add in each pair, as a sample
// whose unit of work is 1,000 subscription·seconds (so its ms per unit
// are µs per subscription and second) and whose value is the server's
// part in those µs.
func idleCost(open, before []cpu, n int, w time.Duration) []sample {
	var rs []sample
	for i := range min(len(open), len(before)) {
		c := open[i].minus(before[i])
		units := float64(n) * w.Seconds() / 1000
		rs = append(rs, sample{value: 1000 * c.Server / units, units: units, cpu: c})
	}
	return rs
}

// idleRSSHook opens n sockets with open (50 at a time), lets them settle,
// and returns the RSS growth of pid per socket in KiB; hook runs while they
// are open.
func (e *env) idleRSSHook(pid, n int, open func(context.Context) (func(), error), hook func()) (float64, error) {
	time.Sleep(time.Second)
	before, err := rssOf(pid)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) && ctx.Err() == nil {
				c, err := open(ctx)
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					cancel()
					return
				}
				mu.Lock()
				closers = append(closers, c)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if v := firstErr.Load(); v != nil {
		return 0, v.(error)
	}
	time.Sleep(3 * time.Second)
	after, err := rssOf(pid)
	if err != nil {
		return 0, err
	}
	if hook != nil {
		hook()
	}
	return float64(after-before) / float64(n), nil
}

// runRefWS is the reference server of figure D: gorilla's upgrader, one
// reader goroutine per socket (the least a server must run to notice a
// close), nothing else. /metrics reports heap+stack bytes.
func runRefWS(args []string) int {
	fs := flag.NewFlagSet("refws", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	if fs.Parse(args) != nil {
		return 2
	}
	up := websocket.Upgrader{ReadBufferSize: 1024, WriteBufferSize: 1024}
	var mu sync.Mutex
	conns := map[*websocket.Conn]struct{}{}
	mux := http.NewServeMux()
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		mu.Lock()
		conns[c] = struct{}{}
		mu.Unlock()
		go func() {
			defer func() {
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
				c.Close()
			}()
			for {
				if _, _, err := c.ReadMessage(); err != nil {
					return
				}
			}
		}()
	})
	// /broadcast?count=K&rate=R sends K frames at R per second, each one
	// pre-serialised frame written to every socket in turn.
	mux.HandleFunc("/broadcast", func(w http.ResponseWriter, r *http.Request) {
		var count, rate int
		fmt.Sscan(r.URL.Query().Get("count"), &count)
		fmt.Sscan(r.URL.Query().Get("rate"), &rate)
		start := time.Now()
		for i := range count {
			time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(max(rate, 1)))))
			b, _ := json.Marshal(map[string]int64{"seq": int64(i), "t": time.Now().UnixNano()})
			pm, err := websocket.NewPreparedMessage(websocket.TextMessage, b)
			if err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			mu.Lock()
			all := make([]*websocket.Conn, 0, len(conns))
			for c := range conns {
				all = append(all, c)
			}
			mu.Unlock()
			for _, c := range all {
				_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
				_ = c.WritePreparedMessage(pm)
			}
		}
	})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		runtime.GC()
		_ = json.NewEncoder(w).Encode(map[string]float64{"HeapStack": heapStack()})
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("listening", ln.Addr())
	_ = http.Serve(ln, mux)
	return 0
}

// heapStack is live heap objects plus goroutine stacks, in bytes.
func heapStack() float64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/stacks:bytes"}}
	metrics.Read(s)
	var sum float64
	for _, x := range s {
		if x.Value.Kind() == metrics.KindUint64 {
			sum += float64(x.Value.Uint64())
		}
	}
	return sum
}
