package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Figure H's streams: ours is created by createNatsSubscriber, the
// reference's is a copy of its configuration on other subjects.
const (
	hStream    = "ERP"
	hPrefix    = "erp.journal"
	hRefStream = "REF"
	hRefPrefix = "ref.journal"
)

// hSeedSQL writes n (the first parameter) pending doc.created events of
// sales orders with their dispatch jobs, each about a document of its own
// (ids after the second parameter), as a mutation's outbox leaves them. No
// built-in subscriber takes a sales order's doc.created, so the NATS
// subscriber is the events' only delivery.
const hSeedSQL = `
WITH ev AS (
	INSERT INTO events (type, entity, entity_id, payload)
	SELECT 'doc.created', 'sales_orders', g, jsonb_build_object('id', g, 'no', 'ЗК-BENCH-' || g, 'entity', 'sales_order')
	FROM generate_series($2::bigint + 1, $2::bigint + $1) g
	RETURNING id)
INSERT INTO river_job (args, kind, max_attempts, queue, state, priority)
SELECT jsonb_build_object('event_id', id), 'dispatch_event', 25, 'default', 'available', 1 FROM ev`

// figureH: events published from the dispatch to NATS JetStream, each
// acknowledged by the stream, against a bare jetstream.PublishMsg loop of
// the same messages (the payloads and headers ours stored, under new
// message ids) to a stream of the same configuration, in the same run.
// Ours: with the server stopped, n pending doc.created events and their
// dispatch jobs are inserted; the server starts and the run ends when the
// NATS subscriber's every delivery is recorded delivered. The rate is
// from the first to the last acknowledgement (the records' delivered_at);
// the CPU is the whole run's, server start included, as in E. The NATS
// server is a process of its own (`bench natsd`), metered on both sides.
// A PublishMsgAsync loop of the same messages is measured too, for
// information.
func (e *env) figureH() error {
	n := e.opts.hEvents
	nd, err := e.startNatsd()
	if err != nil {
		return err
	}
	defer nd.stop()
	e.natsPID = nd.cmd.Process.Pid
	defer func() { e.natsPID = 0 }()
	natsEnv := "NATS_URL=" + nd.url

	s, err := e.startServer(natsEnv)
	if err != nil {
		return err
	}
	err = s.gql(e.ctx, `mutation { createNatsSubscriber(input: {name: "bench-h", stream: "`+hStream+`", subjectPrefix: "`+hPrefix+`",
		eventTypes: ["doc.created"], entities: ["sales_orders"]}) { id } }`, nil, nil)
	s.stop()
	if err != nil {
		return fmt.Errorf("create the nats subscriber: %w", err)
	}
	var subID int64
	if err := e.pool.QueryRow(e.ctx, `SELECT id FROM subscribers WHERE name = 'bench-h'`).Scan(&subID); err != nil {
		return err
	}

	nc, err := nats.Connect(nd.url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ours, err := js.Stream(e.ctx, hStream)
	if err != nil {
		return err
	}
	refCfg := ours.CachedInfo().Config
	refCfg.Name, refCfg.Subjects = hRefStream, []string{hRefPrefix + ".>"}
	if _, err := js.CreateStream(e.ctx, refCfg); err != nil {
		return fmt.Errorf("create stream %s: %w", hRefStream, err)
	}

	var oursRuns, syncRuns, asyncRuns []sample
	var notes []string
	complete := true
	for i := range e.opts.runs {
		o, stored, note, err := e.publishOurs(js, natsEnv, subID, n, i)
		if err != nil {
			return err
		}
		complete = complete && len(stored) == n
		r, rNote, err := e.publishReference(js, refMsgs(stored, fmt.Sprintf("s%d_", i)), false)
		if err != nil {
			return err
		}
		a, aNote, err := e.publishReference(js, refMsgs(stored, fmt.Sprintf("a%d_", i)), true)
		if err != nil {
			return err
		}
		oursRuns, syncRuns, asyncRuns = append(oursRuns, o), append(syncRuns, r), append(asyncRuns, a)
		notes = append(notes, fmt.Sprintf("run %d: %s | reference (PublishMsg): %s | PublishMsgAsync: %s", i+1, note, rNote, aNote))
	}
	set := e.settings("events", strconv.Itoa(n), "subscribers", "1 NATS (maxInFlight 4, the default)")
	note := strings.Join(notes, " || ")
	r := summarize(Row{Figure: "H", Case: fmt.Sprintf("%d events to JetStream", n), Metric: "events acked/s vs PublishMsg/s",
		Target: "information", Settings: set, Notes: note}, "event", "total", oursRuns, syncRuns)
	r.Pass = complete
	e.add(r)
	a := summarize(Row{Figure: "H", Case: "… vs PublishMsgAsync", Metric: "events acked/s vs async/s",
		Target: "information", Settings: set, Notes: note}, "event", "total", oursRuns, asyncRuns)
	a.Pass = complete
	e.add(a)
	fmt.Println("   ", note)
	e.whereItGoes(r, oursRuns, syncRuns)
	return nil
}

// publishOurs seeds n pending events with the server stopped, starts it
// with natsEnv and measures until subscriber subID's deliveries of them
// are all delivered (at most 30 min), and stops it. It returns the run
// (events per second from the first to the last acknowledgement), the
// messages the run stored in the stream, and a note.
func (e *env) publishOurs(js jetstream.JetStream, natsEnv string, subID int64, n, i int) (sample, []*jetstream.RawStreamMsg, string, error) {
	var before int64
	if err := e.pool.QueryRow(e.ctx, `SELECT coalesce(max(id), 0) FROM events`).Scan(&before); err != nil {
		return sample{}, nil, "", err
	}
	if _, err := e.pool.Exec(e.ctx, hSeedSQL, n, before); err != nil {
		return sample{}, nil, "", fmt.Errorf("seed: %w", err)
	}
	for _, q := range []string{"ANALYZE events, river_job", seedJobIDsSQL, "VACUUM ANALYZE events", "VACUUM ANALYZE river_job", "VACUUM ANALYZE deliveries"} {
		if _, err := e.pool.Exec(e.ctx, q); err != nil {
			return sample{}, nil, "", fmt.Errorf("%s: %w", strings.Fields(q)[0], err)
		}
	}
	stream, err := js.Stream(e.ctx, hStream)
	if err != nil {
		return sample{}, nil, "", err
	}
	firstSeq := stream.CachedInfo().State.LastSeq + 1

	obs := e.observe(0)
	t0 := time.Now()
	s, err := e.startServer(natsEnv)
	if err != nil {
		return sample{}, nil, "", err
	}
	defer s.stop()
	obs.meter.attach(s.cmd.Process.Pid)
	seconds := 10 * time.Second
	if e.opts.quick {
		seconds = time.Second
	}
	profiled := e.profileServer(s, seconds, fmt.Sprintf("h-%d", i))
	for time.Since(t0) < 30*time.Minute && e.ctx.Err() == nil {
		var waiting bool
		err := e.pool.QueryRow(e.ctx, `SELECT EXISTS (SELECT 1 FROM events WHERE processed_at IS NULL)
			OR EXISTS (SELECT 1 FROM deliveries WHERE subscriber_id = $1 AND status IN ('pending', 'failed'))`, subID).Scan(&waiting)
		if err != nil {
			return sample{}, nil, "", err
		}
		if !waiting {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	elapsed := time.Since(t0)
	o := obs.finish()
	s.stop()

	var delivered, other, attempts int64
	var first, last time.Time
	if err := e.pool.QueryRow(e.ctx, `SELECT count(*) FILTER (WHERE status = 'delivered'), count(*) FILTER (WHERE status <> 'delivered'),
		coalesce(sum(attempts), 0), coalesce(min(delivered_at), now()), coalesce(max(delivered_at), now())
		FROM deliveries WHERE subscriber_id = $1 AND event_id > $2`, subID, before).Scan(&delivered, &other, &attempts, &first, &last); err != nil {
		return sample{}, nil, "", err
	}
	info, err := stream.Info(e.ctx)
	if err != nil {
		return sample{}, nil, "", err
	}
	var stored []*jetstream.RawStreamMsg
	for seq := firstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := stream.GetMsg(e.ctx, seq)
		if err != nil {
			return sample{}, nil, "", fmt.Errorf("read back seq %d: %w", seq, err)
		}
		stored = append(stored, m)
	}
	span := last.Sub(first)
	note := fmt.Sprintf("ours: %d of %d deliveries delivered (%d not), %d attempts, %d messages stored; first→last acknowledgement %s, serve start→all delivered %s; %s",
		delivered, n, other, attempts, len(stored), span.Round(time.Millisecond), elapsed.Round(time.Millisecond), o.note)
	return sample{value: float64(delivered) / max(span.Seconds(), 1e-3), units: float64(delivered), cpu: o.cpu,
		statements: o.statements, profile: <-profiled}, stored, note, nil
}

// refMsgs are the messages ours stored, to publish again to the
// reference's stream: the same payload and headers on the reference's
// subjects, each Nats-Msg-Id prefixed with tag (so that no publish is
// taken for a duplicate of another run's). JetStream's own headers other
// than the id (the expected stream) are left to the publish's options.
func refMsgs(stored []*jetstream.RawStreamMsg, tag string) []*nats.Msg {
	out := make([]*nats.Msg, 0, len(stored))
	for _, s := range stored {
		m := nats.NewMsg(hRefPrefix + strings.TrimPrefix(s.Subject, hPrefix))
		m.Data = s.Data
		for k, v := range s.Header {
			if !strings.HasPrefix(k, "Nats-") {
				m.Header[k] = v
			}
		}
		m.Header.Set(jetstream.MsgIDHeader, tag+s.Header.Get(jetstream.MsgIDHeader))
		out = append(out, m)
	}
	return out
}

// publishReference publishes msgs to the reference's stream, one
// acknowledged publish after the other (jetstream.PublishMsg, as the
// server does each delivery), or all at once with PublishMsgAsync when
// async (at most the library's default of 4,000 awaiting their
// acknowledgement), and returns the run: messages acknowledged per second.
func (e *env) publishReference(js jetstream.JetStream, msgs []*nats.Msg, async bool) (sample, string, error) {
	obs := e.observe(0)
	t0 := time.Now()
	var dup int
	if async {
		futures := make([]jetstream.PubAckFuture, 0, len(msgs))
		for _, m := range msgs {
			f, err := js.PublishMsgAsync(m, jetstream.WithExpectStream(hRefStream))
			if err != nil {
				obs.finish()
				return sample{}, "", fmt.Errorf("publish async: %w", err)
			}
			futures = append(futures, f)
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(time.Minute):
			obs.finish()
			return sample{}, "", errors.New("publish async: no acknowledgement of every message within a minute")
		}
		for _, f := range futures {
			select {
			case ack := <-f.Ok():
				if ack.Duplicate {
					dup++
				}
			case err := <-f.Err():
				obs.finish()
				return sample{}, "", fmt.Errorf("publish async: %w", err)
			}
		}
	} else {
		for _, m := range msgs {
			ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
			ack, err := js.PublishMsg(ctx, m, jetstream.WithExpectStream(hRefStream))
			cancel()
			if err != nil {
				obs.finish()
				return sample{}, "", fmt.Errorf("publish: %w", err)
			}
			if ack.Duplicate {
				dup++
			}
		}
	}
	elapsed := time.Since(t0)
	o := obs.finish()
	note := fmt.Sprintf("%d messages in %s, %d taken for duplicates; %s", len(msgs), elapsed.Round(time.Millisecond), dup, o.note)
	return sample{value: float64(len(msgs)) / elapsed.Seconds(), units: float64(len(msgs)), cpu: o.cpu, statements: o.statements}, note, nil
}

// natsd is `bench natsd`, a NATS server with JetStream in a process of its
// own, so that its CPU is read from /proc apart from the server's and the
// tool's.
type natsd struct {
	cmd *exec.Cmd
	url string
}

// startNatsd starts `bench natsd` storing under the temp dir and waits
// until it takes connections.
func (e *env) startNatsd() (*natsd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "natsd", "-dir", filepath.Join(e.tmp, "nats"))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, errors.New("bench natsd did not start")
	}
	return &natsd{cmd: cmd, url: strings.TrimSpace(sc.Text())}, nil
}

// stop shuts the NATS server down (SIGTERM) and waits for it.
func (n *natsd) stop() {
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	_ = n.cmd.Wait()
}

// runNatsd is `bench natsd -dir DIR`: a NATS server with JetStream (file
// storage under DIR) on a free loopback port, the one the product's tests
// run (jobs/natstest), at the module's version. It prints its client URL
// once it takes connections and runs until SIGTERM or SIGINT.
func runNatsd(args []string) int {
	fs := flag.NewFlagSet("natsd", flag.ContinueOnError)
	dir := fs.String("dir", "", "JetStream store directory")
	if err := fs.Parse(args); err != nil || *dir == "" {
		fmt.Fprintln(os.Stderr, "usage: bench natsd -dir DIR")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: natsserver.RANDOM_PORT, JetStream: true,
		StoreDir: *dir, NoLog: true, NoSigs: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsd:", err)
		return 1
	}
	srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		fmt.Fprintln(os.Stderr, "natsd: not ready in 30 s")
		return 1
	}
	fmt.Println(srv.ClientURL())
	<-ctx.Done()
	srv.Shutdown()
	srv.WaitForShutdown()
	return 0
}
