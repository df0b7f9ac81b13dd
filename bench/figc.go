package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5"

	"erp/db"
	"erp/jobs"
)

type recv struct {
	id int64
	at time.Time
}

// figureC: deliveries/s to N subscribers while events are committed at 10
// per second (the outbox path, as in B), with loss and commit→socket p99,
// against `bench refws` broadcasting a pre-serialised frame to N sockets at
// the same rate (send→socket p99), in interleaved runs; the target is on
// the server's CPU per delivered frame.
func (e *env) figureC() error {
	const rate = 10
	events := int(e.opts.duration.Seconds()) * rate
	sizes := []int{1000, 5000}
	if e.opts.quick {
		sizes = []int{50, 200}
	}
	insertOnly, err := jobs.NewRiverClient(e.pool, jobs.NewDispatcher(e.pool, jobs.DispatcherConfig{}),
		jobs.RiverConfig{DispatchInterval: time.Hour, MaxWorkers: 1, Logger: e.logger})
	if err != nil {
		return err
	}
	outbox := jobs.NewOutbox(e.pool, insertOnly)
	for _, n := range sizes {
		var ours, ref []sample
		var notes []string
		lostAny := false
		for i := range e.opts.runs {
			o, lost, note, err := e.broadcastOurs(outbox, n, rate, events, i)
			if err != nil {
				return err
			}
			r, refP99, refLost, err := e.broadcastRef(n, rate, events)
			if err != nil {
				return err
			}
			lostAny = lostAny || lost > 0
			ours, ref = append(ours, o), append(ref, r)
			notes = append(notes, fmt.Sprintf("run %d: %s | reference: lost %d, send→socket p99 %.1f ms", i+1, note, refLost, ms(refP99)))
		}
		r := summarize(Row{Figure: "C", Case: fmt.Sprintf("%d subscribers", n), Metric: "deliveries/s at 10 ev/s",
			Target:   "0 lost, server CPU/frame ≤ 2× ref",
			Settings: e.settings("subscribers", strconv.Itoa(n), "rate", "10/s", "events", strconv.Itoa(events)),
			Notes:    strings.Join(notes, " || ")}, "frame", "server", ours, ref)
		r.Pass = !lostAny && r.Cost.Ratio > 0 && r.Cost.Ratio <= 2
		e.add(r)
		fmt.Println("   ", r.Notes)
		e.whereItGoes(r, ours, ref)
	}
	return nil
}

// broadcastOurs is one run of figure C on our side: a server with n
// subscribed sockets, events committed through outbox at rate; the run's
// value is deliveries/s, its units the frames delivered. It returns the
// deliveries lost and a note.
func (e *env) broadcastOurs(outbox *jobs.Outbox, n, rate, events, i int) (sample, int, string, error) {
	s, err := e.startServer()
	if err != nil {
		return sample{}, 0, "", err
	}
	defer s.stop()
	e.waitDrained(time.Minute)
	got := make([][]recv, n)
	var gotMu sync.Mutex
	var followers []*follower
	var frames atomic.Int64
	resumes := 0
	stopAll := func() {
		for _, f := range followers {
			resumes += f.stop()
		}
		followers = nil
	}
	defer stopAll()
	for i := range n {
		f, err := s.follow(e.ctx, []string{db.EventDocCreated}, func(id int64) {
			now := time.Now()
			gotMu.Lock()
			got[i] = append(got[i], recv{id, now})
			gotMu.Unlock()
			frames.Add(1)
		})
		if err != nil {
			return sample{}, 0, "", fmt.Errorf("subscriber %d: %w", i, err)
		}
		followers = append(followers, f)
	}
	time.Sleep(time.Second)
	var mu sync.Mutex
	committed := map[int64]time.Time{}
	obs := e.observe(s.cmd.Process.Pid)
	profiled := e.profileBoth(s, e.opts.duration, fmt.Sprintf("c-%d-%d", n, i))
	t0 := time.Now()
	pace(e.ctx, rate, events, func(j int) {
		id, err := jobs.Write(e.ctx, outbox, func(tx pgx.Tx) (int64, []db.Event, error) {
			var id int64
			err := tx.QueryRow(e.ctx, `INSERT INTO events (type, entity, entity_id, payload)
				VALUES ('doc.created', 'sales_orders', $1, jsonb_build_object('id', $1::bigint, 'no', 'bench', 'entity', 'sales_order')) RETURNING id`,
				benchDocBase+int64(n)*1_000_000+500_000_000+int64(i)*100_000+int64(j)).Scan(&id) // a document of its own (see figure B)
			return id, []db.Event{{ID: id}}, err
		})
		if err == nil {
			mu.Lock()
			committed[id] = time.Now()
			mu.Unlock()
		}
	})
	mu.Lock()
	want := int64(n * len(committed))
	mu.Unlock()
	catchUp(e.ctx, &frames, want)
	elapsed := time.Since(t0)
	o := obs.finish()
	stopAll()
	note := o.note
	files := <-profiled
	if files != "" {
		note += "; CPU profiles " + files
	}
	var lat []time.Duration
	total, doubled := 0, 0
	mu.Lock()
	gotMu.Lock()
	for i := range got {
		seen := make(map[int64]bool, len(got[i]))
		for _, r := range got[i] {
			if c, ok := committed[r.id]; ok {
				if seen[r.id] {
					doubled++
					continue
				}
				seen[r.id] = true
				lat = append(lat, max(0, r.at.Sub(c)))
				total++
			}
		}
	}
	gotMu.Unlock()
	mu.Unlock()
	note = fmt.Sprintf("ours: %d of %d deliveries (lost %d, twice %d; sockets dropped and resumed by cursor %d), commit→socket p50 %.1f ms p99 %.1f ms; %s",
		total, want, int(want)-total, doubled, resumes, ms(pct(lat, 50)), ms(pct(lat, 99)), note)
	serverProfile, _, _ := strings.Cut(files, ", ")
	return sample{value: float64(total) / elapsed.Seconds(), units: float64(total), cpu: o.cpu,
		statements: o.statements, profile: serverProfile}, int(want) - total, note, nil
}

// catchUp waits until the readers got want frames, or got none for
// cStall: on a starved machine the server delivers the run's frames late,
// and a frame late is not lost (its CPU is counted all the same).
func catchUp(ctx context.Context, frames *atomic.Int64, want int64) {
	last, since := frames.Load(), time.Now()
	for ctx.Err() == nil && last < want && time.Since(since) < cStall {
		time.Sleep(250 * time.Millisecond)
		if got := frames.Load(); got != last {
			last, since = got, time.Now()
		}
	}
}

// cStall is how long the readers of figure C may get nothing before the
// frames still missing count as lost.
const cStall = 10 * time.Second

// profileBoth takes CPU profiles of the server (through its pprof
// listener) and of this tool, for d from now, into the temp dir's
// profiles/ (kept with -keep): name-server.pprof and name-tool.pprof. The
// channel yields the files, or "" when profiling failed.
func (e *env) profileBoth(s *server, d time.Duration, name string) <-chan string {
	done := make(chan string, 1)
	dir := filepath.Join(e.tmp, "profiles")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		done <- ""
		return done
	}
	toolFile := filepath.Join(dir, name+"-tool.pprof")
	f, err := os.Create(toolFile)
	if err == nil {
		if err = pprof.StartCPUProfile(f); err != nil {
			f.Close()
		}
	}
	toolOK := err == nil
	go func() {
		serverFile, err := s.saveProfile(fmt.Sprintf("/profile?seconds=%d", int(d.Seconds())), name+"-server.pprof")
		if toolOK {
			pprof.StopCPUProfile()
			f.Close()
		}
		if err != nil || !toolOK {
			fmt.Println("    warning: CPU profiles:", err)
			done <- ""
			return
		}
		done <- serverFile + ", " + toolFile
	}()
	return done
}

// broadcastRef runs `bench refws`, connects n sockets and has it send
// events frames at rate; it returns the run (deliveries/s, the frames
// delivered, the CPU with refws as the server), the send→socket p99 and
// the frames lost.
func (e *env) broadcastRef(n, rate, events int) (sample, time.Duration, int, error) {
	self, err := os.Executable()
	if err != nil {
		return sample{}, 0, 0, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return sample{}, 0, 0, err
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(self, "refws", "-addr", addr)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		return sample{}, 0, 0, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	bufio.NewScanner(stdout).Scan()
	dialer := websocket.Dialer{HandshakeTimeout: 30 * time.Second, ReadBufferSize: 1024, WriteBufferSize: 1024}
	lats := make([][]time.Duration, n)
	var latMu sync.Mutex
	var count atomic.Int64
	var conns []*websocket.Conn
	for i := range n {
		c, _, err := dialer.DialContext(e.ctx, "ws://"+addr+"/ws", nil) //nolint:bodyclose // gorilla: a handshake response needs no closing
		if err != nil {
			return sample{}, 0, 0, err
		}
		conns = append(conns, c)
		go func() {
			for {
				_, b, err := c.ReadMessage()
				if err != nil {
					return
				}
				now := time.Now()
				var m struct{ T int64 }
				_ = json.Unmarshal(b, &m)
				latMu.Lock()
				lats[i] = append(lats[i], now.Sub(time.Unix(0, m.T)))
				latMu.Unlock()
				count.Add(1)
			}
		}()
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	time.Sleep(time.Second)
	obs := e.observe(cmd.Process.Pid)
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("http://%s/broadcast?count=%d&rate=%d", addr, events, rate), nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		obs.finish()
		return sample{}, 0, 0, err
	}
	res.Body.Close()
	time.Sleep(3 * time.Second)
	elapsed := time.Since(t0) - 3*time.Second
	o := obs.finish()
	var all []time.Duration
	latMu.Lock()
	defer latMu.Unlock()
	for _, l := range lats {
		all = append(all, l...)
	}
	got := int(count.Load())
	return sample{value: float64(got) / elapsed.Seconds(), units: float64(got), cpu: o.cpu, statements: o.statements},
		pct(all, 99), n*events - got, nil
}
