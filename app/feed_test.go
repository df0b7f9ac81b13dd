package app_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"erp/app/apptest"
	"erp/app/config"
	"erp/db"
	"erp/db/pgtest"
	"erp/jobs"
	"erp/resolvers"
)

var salesOrdersCreated = map[string]any{"types": []string{"doc.created"}, "entity": "sales_orders"}

// createOrder is createSalesOrder for goroutines: it reports instead of
// failing the test.
func createOrder(s *apptest.Server, customer string) error {
	body, err := json.Marshal(map[string]any{"query": apptest.CreateSalesOrder, "variables": map[string]any{"customer": customer}})
	if err != nil {
		return err
	}
	req, err := http.NewRequest(http.MethodPost, s.URL+"/graphql", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+s.Token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = res.Body.Close() }()
	var out apptest.Response
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		return fmt.Errorf("decode response (HTTP %d): %w", res.StatusCode, err)
	}
	if len(out.Errors) > 0 {
		return fmt.Errorf("createSalesOrder: %s", out.Errors[0].Message)
	}
	return nil
}

// Four writers create 200 orders; the client's socket dies after the 50th
// event, while the writers go on; the client resumes with its last cursor.
// Together the two sockets carry each of the 200 events once, in feed
// order.
func TestFeedResumeAfterKilledSocketUnderConcurrentWriters(t *testing.T) {
	t.Parallel()
	const writers, perWriter, killAfter = 4, 50, 50
	for _, proto := range []string{apptest.ProtoTransportWS, apptest.ProtoLegacyWS} {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			s := apptest.New(t)
			apptest.SeedItem(t, s)
			c := apptest.DialWS(t, s, proto)
			c.Init(s.Token)
			c.Subscribe("live", apptest.FeedSubscription, map[string]any{"filter": salesOrdersCreated})
			apptest.WaitFor(t, 5*time.Second, "the subscription", func() bool { return s.App.Feed().Subscribers() == 1 })

			// Each writer makes 15 orders, then waits until the socket is
			// dead, so that the other 140 commit during the resume.
			killed := make(chan struct{})
			errs := make(chan error, writers)
			var wg sync.WaitGroup
			for w := range writers {
				wg.Go(func() {
					for i := range perWriter {
						if i == 15 {
							<-killed
						}
						if err := createOrder(s, fmt.Sprintf("W%d-%d", w, i)); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			var got []apptest.FeedEvent
			for range killAfter {
				got = append(got, c.NextEvent("live"))
			}
			require.NoError(t, c.Conn.Close()) // no close frame: the socket just dies
			close(killed)

			r := apptest.DialWS(t, s, proto)
			r.Init(s.Token)
			r.Subscribe("resumed", apptest.FeedSubscription, map[string]any{"filter": salesOrdersCreated, "after": got[len(got)-1].Cursor})
			for len(got) < writers*perWriter {
				got = append(got, r.NextEvent("resumed"))
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			r.RequireNoMoreEvents()

			ids := make([]string, len(got))
			for i, ev := range got {
				ids[i] = ev.ID
				if i > 0 {
					require.Greater(t, apptest.FeedSeq(t, ev.Cursor), apptest.FeedSeq(t, got[i-1].Cursor), "event %d (%s) out of cursor order", i, ev.ID)
				}
			}
			require.Equal(t, apptest.JournalIDs(t, s.Pool, "doc.created"), ids, "exactly the 200 events, none twice, in feed order")
		})
	}
}

// instanceURL is url with application_name set, so that the instance's
// sessions can be told apart in pg_stat_activity.
func instanceURL(t *testing.T, u, name string) string {
	t.Helper()
	if !strings.Contains(u, "://") { // keyword/value form
		return u + " application_name=" + name
	}
	parsed, err := url.Parse(u)
	require.NoError(t, err)
	q := parsed.Query()
	q.Set("application_name", name)
	parsed.RawQuery = q.Encode()
	return parsed.String()
}

// Instance A works the dispatch jobs; instance B only serves the API, on
// its own pool and LISTEN connection. A client of B receives what A
// processed, also across a loss of B's LISTEN connection.
func TestFeedAcrossInstances(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDB(t)
	poolA, err := db.Connect(t.Context(), instanceURL(t, dbURL, "erp-a"))
	require.NoError(t, err)
	t.Cleanup(poolA.Close)
	poolB, err := db.Connect(t.Context(), instanceURL(t, dbURL, "erp-b"))
	require.NoError(t, err)
	t.Cleanup(poolB.Close)
	a := apptest.NewOn(t, poolA)
	b := apptest.NewOn(t, poolB, func(c *config.Config) { c.APIOnly = true })
	apptest.SeedItem(t, b)

	c := apptest.DialWS(t, b, apptest.ProtoTransportWS)
	c.Init(b.Token)
	c.Subscribe("1", apptest.FeedSubscription, map[string]any{"filter": salesOrdersCreated})
	apptest.WaitFor(t, 5*time.Second, "the subscription on B", func() bool { return b.App.Feed().Subscribers() == 1 })

	// Written through B, which only enqueues: A's River dispatches.
	require.NoError(t, createOrder(b, "через B"))
	first := c.NextEvent("1")
	var attempts int
	require.NoError(t, poolA.QueryRow(t.Context(), `SELECT count(*) FROM river_job WHERE kind = 'dispatch_event' AND attempt > 0`).Scan(&attempts))
	require.Equal(t, 1, attempts, "A worked the job")

	// B loses its LISTEN connection; what A processes meanwhile reaches B's
	// client after the reconnect, in order.
	var pid int
	require.NoError(t, poolA.QueryRow(t.Context(), `
		SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'erp-b' AND query LIKE 'LISTEN %'`).Scan(&pid))
	_, err = poolA.Exec(t.Context(), `SELECT pg_terminate_backend($1)`, pid)
	require.NoError(t, err)
	for i := range 5 {
		require.NoError(t, createOrder(a, fmt.Sprint("через A ", i)))
	}
	got := []string{first.ID}
	for range 5 {
		got = append(got, c.NextEvent("1").ID)
	}
	require.Equal(t, apptest.JournalIDs(t, poolA, "doc.created"), got)
	c.RequireNoMoreEvents()
}

// newUser makes a second user with an API token.
// newUser creates a sales clerk through the API and returns its id and token.
func newUser(t *testing.T, s *apptest.Server, login string) (id int64, token string) {
	t.Helper()
	token = apptest.RoleToken(t, s, login, "SALES")
	me := apptest.GQL[struct {
		Me struct{ ID string } `json:"me"`
	}](t, apptest.Client(s.URL, token), `{ me { id } }`, nil)
	id, err := strconv.ParseInt(me.Me.ID, 10, 64)
	require.NoError(t, err)
	return id, token
}

func TestFeedFilters(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	clerkID, clerkToken := newUser(t, s, "clerk")
	clerk := s.As(clerkToken)

	// An order from before the subscriptions, processed, so that its
	// event is not live.
	so := apptest.GQL[struct {
		CreateSalesOrder struct{ ID string } `json:"createSalesOrder"`
	}](t, s, apptest.CreateSalesOrder, map[string]any{"customer": "Первый"})
	apptest.WaitFor(t, 10*time.Second, "the first event processed", func() bool {
		var n int
		require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM events WHERE processed_at IS NULL`).Scan(&n))
		return n == 0
	})
	// The ids the next two orders will get in this fresh database.
	first, err := strconv.ParseInt(so.CreateSalesOrder.ID, 10, 64)
	require.NoError(t, err)
	clerkOrder := strconv.FormatInt(first+2, 10)

	c := apptest.DialWS(t, s, apptest.ProtoTransportWS)
	c.Init(s.Token)
	subs := map[string]map[string]any{
		"types":    {"types": []string{"order.received"}},
		"entity":   {"entity": "plan_prod_orders"},
		"entityId": {"entity": "sales_orders", "entityId": clerkOrder},
		"actorId":  {"actorId": strconv.FormatInt(clerkID, 10)},
	}
	for id, f := range subs {
		c.Subscribe(id, apptest.FeedSubscription, map[string]any{"filter": f})
	}
	apptest.WaitFor(t, 5*time.Second, "4 subscriptions", func() bool { return s.App.Feed().Subscribers() == len(subs) })

	// Each subscription matches one of these events.
	apptest.GQL[map[string]any](t, s, `mutation { receiveOrder(input: {source: SHOP, externalId: "shop-1", customer: "Web", lines: [{sku: "A1", quantity: "1"}]}) { duplicate } }`, nil)
	apptest.GQL[map[string]any](t, s, `mutation($so: ID) { createProductionOrder(input: {sku: "A1", quantity: "1", salesOrderId: $so}) { id } }`, map[string]any{"so": so.CreateSalesOrder.ID})
	got := apptest.GQL[struct {
		CreateSalesOrder struct{ ID string } `json:"createSalesOrder"`
	}](t, clerk, apptest.CreateSalesOrder, map[string]any{"customer": "От кладовщика"})
	require.Equal(t, clerkOrder, got.CreateSalesOrder.ID)
	want := map[string][]string{
		"types":    {"order.received sales_orders #" + strconv.FormatInt(first+1, 10)},
		"entity":   {"doc.created plan_prod_orders #1"},
		"entityId": {"doc.created sales_orders #" + clerkOrder},
		"actorId":  {"doc.created sales_orders #" + clerkOrder},
	}
	received := map[string][]string{}
	for range 4 {
		m, err := c.Read(10 * time.Second)
		require.NoError(t, err)
		require.Equal(t, "next", m.Type, "payload %s", m.Payload)
		var p struct {
			Data struct {
				EventProcessed struct {
					Type, Object string
					Actor        *struct{ DisplayName string }
				} `json:"eventProcessed"`
			} `json:"data"`
		}
		require.NoError(t, json.Unmarshal(m.Payload, &p))
		ev := p.Data.EventProcessed
		received[m.ID] = append(received[m.ID], ev.Type+" "+ev.Object)
		if m.ID == "actorId" {
			require.Equal(t, "clerk", ev.Actor.DisplayName)
		}
	}
	c.RequireNoMoreEvents()
	for id, w := range want {
		require.Equal(t, w, received[id], "subscription %s", id)
	}
}

// heapBytes is the heap occupied by live objects after a full GC.
func heapBytes() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// insertEvents journals n doc.created events through the outbox (events
// and their dispatch jobs in one transaction per batch), as mutations do
// but without the documents, so that River and the feed see real traffic.
func insertEvents(ctx context.Context, s *apptest.Server, n, batch int) error {
	return insertPaddedEvents(ctx, s, n, batch, 0)
}

// insertPaddedEvents is insertEvents, or with pad > 0 doc.status_changed
// events whose reason holds pad characters (two bytes each): a payload
// still valid against the catalog's schema.
func insertPaddedEvents(ctx context.Context, s *apptest.Server, n, batch, pad int) error {
	outbox := jobs.NewOutbox(s.Pool, s.App.River())
	for from := 1; from <= n; from += batch {
		to := min(from+batch-1, n)
		_, err := jobs.Write(ctx, outbox, func(tx pgx.Tx) (struct{}, []db.Event, error) {
			rows, err := tx.Query(ctx, `
				INSERT INTO events (type, entity, entity_id, payload)
				SELECT CASE WHEN $3 > 0 THEN 'doc.status_changed' ELSE 'doc.created' END, 'sales_orders', g,
				       jsonb_build_object('id', g, 'no', 'ЗК-2026-' || lpad(g::text, 6, '0'), 'entity', 'sales_order')
				       || CASE WHEN $3 > 0 THEN jsonb_build_object('from', 'new', 'to', 'cancelled', 'reason', repeat('ж', $3)) ELSE '{}' END
				FROM generate_series($1::bigint, $2::bigint) g
				RETURNING id`, from, to, pad)
			if err != nil {
				return struct{}{}, nil, err
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			events := make([]db.Event, len(ids))
			for i, id := range ids {
				events[i].ID = id
			}
			return struct{}{}, events, err
		})
		if err != nil {
			return fmt.Errorf("insert events %d…%d: %w", from, to, err)
		}
	}
	return nil
}

// readFeed reads eventProcessed results from c until it has want of them
// or the socket closes, and returns their feed sequences, the last cursor
// and the close code (0 when it got want). For goroutines: it reports
// instead of failing the test.
func readFeed(c *apptest.WS, want int) (seqs []int64, last string, code int, err error) {
	for len(seqs) < want {
		_ = c.Conn.SetReadDeadline(time.Now().Add(60 * time.Second))
		var m apptest.Message
		if err := c.Conn.ReadJSON(&m); err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				return seqs, last, ce.Code, nil
			}
			return seqs, last, 0, err
		}
		if m.Type != "next" && m.Type != "data" {
			continue
		}
		var p struct {
			Data struct {
				EventProcessed struct{ Cursor string } `json:"eventProcessed"`
			} `json:"data"`
		}
		if err := json.Unmarshal(m.Payload, &p); err != nil {
			return seqs, last, 0, err
		}
		cur, err := db.ParseCursor("cursor", p.Data.EventProcessed.Cursor)
		if err != nil || cur.FeedSeq == nil {
			return seqs, last, 0, fmt.Errorf("bad cursor %q: %w", p.Data.EventProcessed.Cursor, err)
		}
		seqs = append(seqs, *cur.FeedSeq)
		last = p.Data.EventProcessed.Cursor
	}
	return seqs, last, 0, nil
}

// Not parallel: it measures the heap. A client stops reading while 10,000
// events flow; past its feed buffer the feed drops its subscription and,
// when it reads again, it catches up from the journal: it gets every event
// once, in feed order, on the same socket, and is live again. The fast
// client gets every event all along.
func TestFeedSlowConsumerCatchesUpFastOneServed(t *testing.T) {
	const events = 10_000
	// Keepalive longer than the test: the slow client must be dropped for
	// falling behind, not for missing pongs. The default buffer (1,024)
	// fills within the 10 s write timeout of the write the full socket
	// blocks (past that timeout the socket is dropped without its close
	// frame): the batched dispatch drains the 10,000 events in seconds.
	// It also lets the fast client ride out the feed's bursts: a catch-up
	// publishes every event processed since the last one at once, and a
	// buffer of 256 dropped even the fast client under -race.
	s := apptest.New(t, func(c *config.Config) { c.KeepAlive, c.FeedBuffer = 5*time.Minute, 1024 })
	// The start's own events (the admin, the built-in subscribers) are
	// processed before the clients subscribe: the feed is then exactly the
	// test's events, on a busy machine too.
	apptest.WaitAllProcessed(t, s)
	fast := apptest.DialWS(t, s, apptest.ProtoTransportWS)
	fast.Init(s.Token)
	fast.Subscribe("f", apptest.FeedSubscription, nil)
	slow := apptest.DialWS(t, s, apptest.ProtoTransportWS)
	slow.Init(s.Token)
	slow.Subscribe("s", apptest.FeedSubscription, nil)
	apptest.WaitFor(t, 5*time.Second, "both subscriptions", func() bool { return s.App.Feed().Subscribers() == 2 })
	heapBefore := heapBytes()

	type result struct {
		seqs []int64
		last string
		code int
		err  error
	}
	fastDone, slowDone := make(chan result, 1), make(chan result, 1)
	go func() {
		var r result
		r.seqs, r.last, r.code, r.err = readFeed(fast, events)
		fastDone <- r
	}()
	// The heap's peak while the slow client's buffer fills, sampled.
	var heapPeak atomic.Uint64
	stopSampling := make(chan struct{})
	go func() {
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(50 * time.Millisecond):
				if h := heapBytes(); h > heapPeak.Load() {
					heapPeak.Store(h)
				}
			}
		}
	}()
	// The slow client reads nothing until the feed dropped its
	// subscription (the feed counts one subscriber left), then reads.
	var droppedAt atomic.Int64
	go func() {
		for s.App.Feed().Subscribers() > 1 {
			time.Sleep(10 * time.Millisecond)
		}
		droppedAt.Store(s.App.Feed().LastSeq())
		var r result
		r.seqs, r.last, r.code, r.err = readFeed(slow, events)
		slowDone <- r
	}()

	start := time.Now()
	require.NoError(t, insertEvents(t.Context(), s, events, 500))
	var fr, sr result
	select {
	case fr = <-fastDone:
	case <-time.After(3 * time.Minute):
		t.Fatal("the fast client did not get every event")
	}
	took := time.Since(start)
	close(stopSampling)
	require.NoError(t, fr.err)
	rows, err := s.Pool.Query(t.Context(), `SELECT feed_seq FROM events ORDER BY feed_seq`)
	require.NoError(t, err)
	journal, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, journal, fr.seqs, "the fast client gets every event once, in feed order")

	select {
	case sr = <-slowDone:
	case <-time.After(time.Minute):
		t.Fatal("the slow client did not catch up")
	}
	require.NoError(t, sr.err)
	require.Zero(t, sr.code, "the slow client is not closed")
	require.Equal(t, journal, sr.seqs, "the slow client catches up: every event once, in feed order")
	slow.RequireNoMoreEvents()
	apptest.WaitFor(t, 5*time.Second, "the slow client live again", func() bool { return s.App.Feed().Subscribers() == 2 })
	heapAfter := heapBytes()
	t.Logf("%d events dispatched and delivered to the fast client in %s (%.0f/s); the slow client fell behind at feed sequence %d and caught up",
		events, took.Round(time.Millisecond), float64(events)/took.Seconds(), droppedAt.Load())
	t.Logf("live heap: %d KiB before, %d KiB peak, %d KiB after", heapBefore>>10, heapPeak.Load()>>10, heapAfter>>10)
	require.Less(t, int64(heapPeak.Load())-int64(heapBefore), int64(32<<20), "one slow client costs its bounded buffer, not the whole flow")
	require.Less(t, int64(heapAfter)-int64(heapBefore), int64(8<<20), "and nothing once it caught up")
}

// dialSmallWindow opens a websocket on proto whose client side has a
// receive buffer of rcvbuf bytes, so that the buffers between server and
// client hold far less than a long catch-up.
func dialSmallWindow(t *testing.T, s *apptest.Server, proto string, rcvbuf int) *apptest.WS {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{proto}, HandshakeTimeout: 5 * time.Second,
		NetDial: func(network, addr string) (net.Conn, error) {
			conn, err := net.Dial(network, addr)
			if err == nil {
				err = conn.(*net.TCPConn).SetReadBuffer(rcvbuf)
			}
			return conn, err
		}}
	conn, res, err := d.Dial(apptest.WSURL(s), nil)
	require.NoError(t, err)
	_ = res.Body.Close()
	t.Cleanup(func() { _ = conn.Close() })
	return apptest.NewWS(t, conn, proto)
}

// journalAfter is the feed sequences of the journal's processed events
// past seq, in feed order.
func journalAfter(t *testing.T, s *apptest.Server, seq int64) []int64 {
	t.Helper()
	rows, err := s.Pool.Query(t.Context(), `SELECT feed_seq FROM events WHERE feed_seq > $1 ORDER BY feed_seq`, seq)
	require.NoError(t, err)
	journal, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return journal
}

// A client that stops reading in the middle of a long catch-up is
// disconnected within FEED_WRITE_TIMEOUT plus one ping interval, on both
// subprotocols, and resumes with its last cursor: every event once, in
// feed order.
func TestFeedReaderThatStopsClosedWithinWriteTimeout(t *testing.T) {
	t.Parallel()
	const writeTimeout, interval = time.Second, time.Second
	s := apptest.New(t, func(c *config.Config) { c.FeedWriteTimeout, c.KeepAlive = writeTimeout, interval })
	const events = 2000 // 2.6 MB: far more than the socket's buffers
	start := journalLongCatchUp(t, s, events)
	journal := journalAfter(t, s, *start.FeedSeq)
	for _, proto := range []string{apptest.ProtoTransportWS, apptest.ProtoLegacyWS} {
		t.Run(proto, func(t *testing.T) {
			c := dialSmallWindow(t, s, proto, 16<<10)
			c.Init(s.Token)
			c.Subscribe("s", apptest.FeedSubscription, map[string]any{"after": start.Cursor()})
			got, last, code, err := readFeed(c, 100)
			require.NoError(t, err)
			require.Zero(t, code)
			stopped := time.Now()
			apptest.WaitFor(t, 10*time.Second, "the socket closed", func() bool { return s.App.Websockets().Open() == 0 })
			took := time.Since(stopped)
			t.Logf("closed %s after the client stopped reading", took.Round(time.Millisecond))
			// Scheduling and the buffers' filling get a quarter second.
			require.Less(t, took, writeTimeout+interval+250*time.Millisecond)

			again := apptest.DialWS(t, s, proto)
			again.Init(s.Token)
			again.Subscribe("s2", apptest.FeedSubscription, map[string]any{"after": last})
			rest, _, code, err := readFeed(again, len(journal)-len(got))
			require.NoError(t, err)
			require.Zero(t, code)
			require.Equal(t, journal, append(got, rest...), "every event once, in feed order, over two connections")
			require.NoError(t, again.Conn.Close())
			apptest.WaitFor(t, 5*time.Second, "the second socket closed", func() bool { return s.App.Websockets().Open() == 0 })
		})
	}
	var dropped []string
	for _, rec := range s.Logs(t) {
		if rec["msg"] == "websocket dropped" {
			dropped = append(dropped, fmt.Sprint(rec["reason"]))
		}
	}
	t.Logf("dropped: %q", dropped)
	require.Len(t, dropped, 2, "the server says why it dropped each socket")
}

// A client that reads at 5 KB/s through a catch-up far longer than one
// connection carries at that pace (its pongs wait behind what it has yet
// to read, its server's writes behind its window) is disconnected, resumes
// from its last cursor each time, and ends with every event once, in feed
// order, on both subprotocols.
func TestFeedReaderAt5KBsResumesLossless(t *testing.T) {
	t.Parallel()
	// Small buffers on both sides (the kernel still delivers what the
	// server's send buffer holds when it drops the socket).
	s := apptest.New(t, func(c *config.Config) {
		c.FeedWriteTimeout, c.KeepAlive, c.SendBuffer = time.Second, time.Second, 4<<10
	})
	require.NoError(t, insertEvents(t.Context(), s, 1, 1))
	apptest.WaitAllProcessed(t, s)
	var start db.Event
	require.NoError(t, s.Pool.QueryRow(t.Context(),
		`SELECT id, feed_seq FROM events WHERE feed_seq IS NOT NULL ORDER BY feed_seq DESC LIMIT 1`).Scan(&start.ID, &start.FeedSeq))
	const events = 150 // about 60 KB on the feed: twelve seconds at 5 KB/s
	require.NoError(t, insertEvents(t.Context(), s, events, events))
	apptest.WaitAllProcessed(t, s)
	journal := journalAfter(t, s, *start.FeedSeq)
	require.Len(t, journal, events)
	for _, proto := range []string{apptest.ProtoTransportWS, apptest.ProtoLegacyWS} {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			var seqs []int64
			cursor, connections := start.Cursor(), 0
			for len(seqs) < events {
				require.Less(t, connections, 100, "progress: %d events", len(seqs))
				connections++
				c := dialSmallWindow(t, s, proto, 4<<10)
				c.Init(s.Token)
				c.Subscribe("s", apptest.FeedSubscription, map[string]any{"after": cursor})
				for len(seqs) < events {
					got, last, n, err := readFeedMessage(c)
					if err != nil {
						break // dropped: resume from the last cursor read
					}
					if last != "" {
						seqs, cursor = append(seqs, got), last
					}
					time.Sleep(time.Duration(n) * time.Second / 5000) // 5 KB/s
				}
				_ = c.Conn.Close()
			}
			t.Logf("%d events at 5 KB/s over %d connections", len(seqs), connections)
			require.Equal(t, journal, seqs, "every event once, in feed order")
			require.Greater(t, connections, 1, "the catch-up outlasted a connection")
		})
	}
}

// readFeedMessage reads one message from c: for an eventProcessed result
// its feed sequence and cursor (last "" for any other message), and its
// size in bytes either way.
func readFeedMessage(c *apptest.WS) (seq int64, last string, size int, err error) {
	_ = c.Conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, b, err := c.Conn.ReadMessage()
	if err != nil {
		return 0, "", 0, err
	}
	var m struct {
		Type    string
		Payload struct {
			Data struct {
				EventProcessed struct{ Cursor string } `json:"eventProcessed"`
			} `json:"data"`
		}
	}
	if err := json.Unmarshal(b, &m); err != nil || (m.Type != "next" && m.Type != "data") {
		return 0, "", len(b), err
	}
	cur, err := db.ParseCursor("cursor", m.Payload.Data.EventProcessed.Cursor)
	if err != nil || cur.FeedSeq == nil {
		return 0, "", len(b), fmt.Errorf("bad cursor %q: %w", m.Payload.Data.EventProcessed.Cursor, err)
	}
	return *cur.FeedSeq, m.Payload.Data.EventProcessed.Cursor, len(b), nil
}

// journalLongCatchUp journals one event, then n more of 1 KB each (about
// 1.3 KB a message on the feed), all processed, and returns the first:
// resuming after it is a catch-up of n events from the journal.
func journalLongCatchUp(t *testing.T, s *apptest.Server, n int) db.Event {
	t.Helper()
	require.NoError(t, insertEvents(t.Context(), s, 1, 1))
	apptest.WaitAllProcessed(t, s)
	var start db.Event
	require.NoError(t, s.Pool.QueryRow(t.Context(),
		`SELECT id, feed_seq FROM events WHERE feed_seq IS NOT NULL ORDER BY feed_seq DESC LIMIT 1`).Scan(&start.ID, &start.FeedSeq))
	require.NoError(t, insertPaddedEvents(t.Context(), s, n, n, 500))
	apptest.WaitAllProcessed(t, s)
	return start
}

// A client that stops reading in the middle of a catch-up is taken for
// gone after two ping intervals without a frame from it: its pongs stop.
// The write timeout is far longer here, so only the keepalive can close it.
func TestFeedReaderThatStopsDroppedByKeepalive(t *testing.T) {
	t.Parallel()
	const interval = 500 * time.Millisecond
	s := apptest.New(t, func(c *config.Config) { c.KeepAlive, c.FeedWriteTimeout = interval, time.Minute })
	start := journalLongCatchUp(t, s, 2000)
	c := apptest.DialWS(t, s, apptest.ProtoTransportWS)
	c.Init(s.Token)
	c.Subscribe("s", apptest.FeedSubscription, map[string]any{"after": start.Cursor()})
	got, _, code, err := readFeed(c, 100)
	require.NoError(t, err)
	require.Zero(t, code)
	require.Len(t, got, 100)
	stopped := time.Now()
	apptest.WaitFor(t, 10*time.Second, "the socket closed", func() bool { return s.App.Websockets().Open() == 0 })
	took := time.Since(stopped)
	t.Logf("closed %s after the client stopped reading (ping interval %s)", took.Round(time.Millisecond), interval)
	// Two intervals, one more while the client's kernel still took data,
	// and scheduling; the write timeout (a minute) would be far later.
	require.Less(t, took, 6*interval)
	// The server says why it dropped the socket.
	var dropped []string
	for _, rec := range s.Logs(t) {
		if rec["msg"] == "websocket dropped" {
			dropped = append(dropped, fmt.Sprint(rec["reason"]))
		}
	}
	require.Equal(t, []string{"nothing came from the peer for two ping intervals"}, dropped)
}

// A client that fell behind by more than FeedMaxLag events is closed with
// CloseSlowConsumer when it reads on, instead of catching up through an
// unbounded stretch of the journal.
func TestFeedConsumerTooFarBehindClosed(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, func(c *config.Config) {
		c.KeepAlive, c.FeedBuffer, c.FeedMaxLag = 5*time.Minute, 64, 500
	})
	apptest.WaitAllProcessed(t, s)
	behind := apptest.DialWS(t, s, apptest.ProtoTransportWS)
	behind.Init(s.Token)
	behind.Subscribe("b", apptest.FeedSubscription, nil)
	apptest.WaitFor(t, 5*time.Second, "the subscription", func() bool { return s.App.Feed().Subscribers() == 1 })
	const events = 3000
	require.NoError(t, insertEvents(t.Context(), s, events, 500))
	apptest.WaitAllProcessed(t, s)
	apptest.WaitFor(t, 10*time.Second, "the feed publishing every event", func() bool { return s.App.Feed().LastSeq() >= events })
	seqs, _, code, err := readFeed(behind, events)
	require.NoError(t, err)
	require.Equal(t, resolvers.CloseSlowConsumer, code, "after %d events", len(seqs))
	require.Less(t, len(seqs), events)
	// The warning names the socket's request and user, as its log line does.
	var warned []map[string]any
	for _, rec := range s.Logs(t) {
		if rec["msg"] == "live subscriber fell too far behind, closing its socket" {
			warned = append(warned, rec)
		}
	}
	require.Len(t, warned, 1)
	require.NotEmpty(t, warned[0]["request_id"])
	require.Equal(t, "admin", warned[0]["user"])
	require.GreaterOrEqual(t, warned[0]["last_feed_seq_sent"], float64(len(seqs)), "the server handed on at least what the client read")
}

// A cursor the journal cannot place is refused rather than streaming
// nothing: a garbled one, one of an unprocessed event, one of an event
// that does not exist (another database, a restored backup).
func TestFeedRefusesForeignCursor(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	c := apptest.DialWS(t, s, apptest.ProtoTransportWS)
	c.Init(s.Token)
	for i, after := range []string{
		"garbage",
		base64.RawURLEncoding.EncodeToString([]byte("e1:7:-")),
		base64.RawURLEncoding.EncodeToString([]byte("e1:999999:5")),
	} {
		requireFeedRefused(t, c, fmt.Sprint("c", i), map[string]any{"after": after}, "after")
	}
}

// A filter on unprocessed events would match nothing the feed carries:
// it is refused rather than waiting forever.
func TestFeedRefusesUnprocessedFilter(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	c := apptest.DialWS(t, s, apptest.ProtoTransportWS)
	c.Init(s.Token)
	requireFeedRefused(t, c, "u", map[string]any{"filter": map[string]any{"processed": false}}, "filter.processed")
	// processed: true is what the feed carries anyway.
	c.Subscribe("p", apptest.FeedSubscription, map[string]any{"filter": map[string]any{"processed": true}})
	apptest.WaitFor(t, 5*time.Second, "the subscription", func() bool { return s.App.Feed().Subscribers() == 1 })
}

// requireFeedRefused subscribes id to the feed with vars and requires the
// refusal gqlgen sends for a resolver's error: a result with one
// BAD_USER_INPUT error on field, then complete.
func requireFeedRefused(t *testing.T, c *apptest.WS, id string, vars map[string]any, field string) {
	t.Helper()
	c.Subscribe(id, apptest.FeedSubscription, vars)
	m, err := c.Read(5 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "next", m.Type, "%v: %s", vars, m.Payload)
	require.Equal(t, id, m.ID)
	var res apptest.Response
	require.NoError(t, json.Unmarshal(m.Payload, &res))
	require.Len(t, res.Errors, 1)
	require.Equal(t, "BAD_USER_INPUT", res.Errors[0].Extensions["code"], "%v: %s", vars, res.Errors[0].Message)
	require.Equal(t, field, res.Errors[0].Extensions["field"])
	m, err = c.Read(5 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "complete", m.Type)
}

// processedCount is the number of processed events in s's journal.
func processedCount(t *testing.T, s *apptest.Server) int {
	t.Helper()
	var n int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM events WHERE feed_seq IS NOT NULL`).Scan(&n))
	return n
}

// A client resuming far back reads its back-fill slower than live events
// arrive, so its live buffer overflows before the back-fill is done: it is
// catching up, not slow, and gets everything without being closed. The
// buffer is small but not smaller than a few dispatch batches: one commit
// publishes up to jobs.DefaultDispatchBatch events at once, and a live
// client a few events behind must not be dropped for that burst. The
// back-fill (old × 5 ms) outlasts the production of the live events by
// seconds, so that on a busy machine too they are in the journal before
// the hand-over, not still arriving, more than a buffer of them, after it.
func TestFeedLongBackfillOutlivesLiveBuffer(t *testing.T) {
	t.Parallel()
	const buffer, old, live = 8 * jobs.DefaultDispatchBatch, 600, 300
	s := apptest.New(t, func(c *config.Config) { c.FeedBuffer = buffer })
	require.NoError(t, insertEvents(t.Context(), s, old, 50))
	apptest.WaitFor(t, 30*time.Second, "the old events processed", func() bool { return processedCount(t, s) == old })
	firstEvents, err := db.EventsProcessedAfter(t.Context(), s.Pool, db.EventFilter{}, 0, 1)
	require.NoError(t, err)

	c := apptest.DialWS(t, s, apptest.ProtoLegacyWS)
	c.Init(s.Token)
	c.Subscribe("1", apptest.FeedSubscription, map[string]any{"after": firstEvents[0].Cursor()})
	produced := make(chan error, 1)
	go func() { produced <- insertEvents(context.WithoutCancel(t.Context()), s, live, 10) }()
	var seqs []int64
	for len(seqs) < old-1+live {
		if len(seqs) < old {
			time.Sleep(5 * time.Millisecond) // slower than the live events come
		}
		seqs = append(seqs, apptest.FeedSeq(t, c.NextEvent("1").Cursor))
	}
	require.NoError(t, <-produced)
	c.RequireNoMoreEvents()
	rows, err := s.Pool.Query(t.Context(), `SELECT feed_seq FROM events WHERE feed_seq > $1 ORDER BY feed_seq`, *firstEvents[0].FeedSeq)
	require.NoError(t, err)
	journal, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, journal, seqs)
}

// Subscribers with the same operation share each event's executed data
// (SharedFeedPayloads); each still gets its own request id, and one with
// another selection gets its own shape, on either subprotocol.
func TestFeedSharedPayloadsPerOperation(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	const narrow = `subscription { eventProcessed { id type } }`
	type sock struct {
		c     *apptest.WS
		query string
	}
	var socks []sock
	for _, tt := range []struct{ proto, query string }{
		{apptest.ProtoTransportWS, apptest.FeedSubscription},
		{apptest.ProtoTransportWS, apptest.FeedSubscription},
		{apptest.ProtoLegacyWS, apptest.FeedSubscription},
		{apptest.ProtoTransportWS, narrow},
	} {
		c := apptest.DialWS(t, s, tt.proto)
		c.Init(s.Token)
		c.Subscribe("1", tt.query, nil)
		socks = append(socks, sock{c, tt.query})
	}
	apptest.WaitFor(t, 5*time.Second, "every subscription", func() bool { return s.App.Feed().Subscribers() == len(socks) })
	const events = 5
	require.NoError(t, insertEvents(t.Context(), s, events, events))

	type next struct {
		Data       json.RawMessage `json:"data"`
		Extensions struct {
			RequestID string `json:"requestId"`
		} `json:"extensions"`
	}
	got := make([][]next, len(socks))
	for i, so := range socks {
		for range events {
			m, err := so.c.Read(10 * time.Second)
			require.NoError(t, err)
			require.Contains(t, []string{"next", "data"}, m.Type, "payload: %s", m.Payload)
			var n next
			require.NoError(t, json.Unmarshal(m.Payload, &n))
			require.NotEmpty(t, n.Extensions.RequestID)
			got[i] = append(got[i], n)
		}
	}
	for e := range events {
		require.JSONEq(t, string(got[0][e].Data), string(got[1][e].Data), "same operation, same data")
		require.JSONEq(t, string(got[0][e].Data), string(got[2][e].Data), "graphql-ws too")
		require.NotEqual(t, got[0][e].Extensions.RequestID, got[1][e].Extensions.RequestID, "request ids stay per socket")
		var wide, small struct {
			EventProcessed map[string]any `json:"eventProcessed"`
		}
		require.NoError(t, json.Unmarshal(got[0][e].Data, &wide))
		require.NoError(t, json.Unmarshal(got[3][e].Data, &small))
		require.Len(t, small.EventProcessed, 2, "the other selection gets its own shape: %v", small.EventProcessed)
		require.Equal(t, wide.EventProcessed["id"], small.EventProcessed["id"])
		require.Contains(t, wide.EventProcessed, "cursor")
	}
}

func TestLiveFeedDeliversProcessedEvents(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	for _, proto := range []string{apptest.ProtoTransportWS, apptest.ProtoLegacyWS} {
		t.Run(proto, func(t *testing.T) {
			c := apptest.DialWS(t, s, proto)
			c.Init(s.Token)
			// The previous subtest's socket is closed; its subscription ends.
			apptest.WaitFor(t, 5*time.Second, "no live subscription", func() bool { return s.App.Feed().Subscribers() == 0 })
			c.Subscribe("1", apptest.FeedSubscription, map[string]any{"filter": map[string]any{"types": []string{"doc.created"}, "entity": "sales_orders"}})
			apptest.WaitFor(t, 5*time.Second, "the subscription to register", func() bool { return s.App.Feed().Subscribers() == 1 })
			so := apptest.GQL[struct {
				CreateSalesOrder struct{ ID, Number string } `json:"createSalesOrder"`
			}](t, s, apptest.CreateSalesOrder, map[string]any{"customer": "Иванов " + proto})
			ev := c.NextEvent("1")
			require.Equal(t, "doc.created", ev.Type)
			require.Equal(t, "sales_orders #"+so.CreateSalesOrder.ID, ev.Object)
			require.JSONEq(t, fmt.Sprintf(`{"id": %s, "no": %q, "entity": "sales_order"}`, so.CreateSalesOrder.ID, so.CreateSalesOrder.Number), string(ev.Payload))
			require.NotNil(t, ev.ProcessedAt)
			require.False(t, ev.ProcessedAt.Before(ev.CreatedAt))
			require.Equal(t, "Администратор", ev.Actor.DisplayName)
			require.NoError(t, c.Conn.Close())
		})
	}
}

func TestLiveFeedResumesFromCursor(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	type page struct {
		Events struct {
			Edges []struct{ Node apptest.FeedEvent } `json:"edges"`
		} `json:"events"`
	}
	for i := range 3 {
		apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": fmt.Sprint("К", i)})
	}
	var first page
	apptest.WaitFor(t, 10*time.Second, "3 processed events", func() bool {
		first = apptest.GQL[page](t, s, `{ events(filter: {processed: true}) { edges { node { id cursor processedAt } } } }`, nil)
		return len(first.Events.Edges) == 3
	})
	// Resume after the first processed event: the two processed after it
	// come first, then live ones. Processing order is the feed's, which
	// concurrent dispatch workers need not keep in id order.
	byFeed := []apptest.FeedEvent{first.Events.Edges[0].Node, first.Events.Edges[1].Node, first.Events.Edges[2].Node}
	slices.SortFunc(byFeed, func(a, b apptest.FeedEvent) int {
		return cmp.Compare(apptest.FeedSeq(t, a.Cursor), apptest.FeedSeq(t, b.Cursor))
	})
	c := apptest.DialWS(t, s, apptest.ProtoTransportWS)
	c.Init(s.Token)
	c.Subscribe("r", apptest.FeedSubscription, map[string]any{"after": byFeed[0].Cursor})
	e1, e2 := c.NextEvent("r"), c.NextEvent("r")
	require.Equal(t, byFeed[1].ID, e1.ID)
	require.Equal(t, byFeed[2].ID, e2.ID)
	// "start" is before the journal's first processed event (a socket of
	// its own: its live events need not come in order with r's).
	c2 := apptest.DialWS(t, s, apptest.ProtoTransportWS)
	c2.Init(s.Token)
	c2.Subscribe("s", apptest.FeedSubscription, map[string]any{"after": "start"})
	for _, want := range byFeed {
		require.Equal(t, want.ID, c2.NextEvent("s").ID)
	}
	apptest.WaitFor(t, 5*time.Second, "the subscriptions to go live", func() bool { return s.App.Feed().Subscribers() == 2 })
	apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": "живой"})
	e3 := c.NextEvent("r")
	require.Equal(t, "doc.created", e3.Type)
	require.NotEqual(t, e2.ID, e3.ID)
}

// Two sockets of one role with the same operation get byte-identical data
// for every event, which is executed once for both (and once more for a
// socket of another role: roles are never shared across); the frames still
// carry each socket's own request id.
func TestFeedSameOperationSameFrames(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	viewer := apptest.RoleToken(t, s, "onlooker", "VIEWER")
	var socks []*apptest.WS
	for _, tt := range []struct{ proto, token string }{
		{apptest.ProtoTransportWS, s.Token},
		{apptest.ProtoLegacyWS, s.Token},
		{apptest.ProtoTransportWS, viewer},
	} {
		c := apptest.DialWS(t, s, tt.proto)
		c.Init(tt.token)
		// Only the inserted events: making the viewer journals its own.
		c.Subscribe("1", apptest.FeedSubscription, map[string]any{"filter": salesOrdersCreated})
		socks = append(socks, c)
	}
	apptest.WaitFor(t, 5*time.Second, "every subscription", func() bool { return s.App.Feed().Subscribers() == len(socks) })
	executed0, shared0 := s.App.SharedFeedStats()
	const events = 6
	require.NoError(t, insertEvents(t.Context(), s, events, 2))

	type frame struct {
		Payload struct {
			Data       json.RawMessage `json:"data"`
			Extensions struct {
				RequestID string `json:"requestId"`
			} `json:"extensions"`
		} `json:"payload"`
	}
	got := make([][]frame, len(socks))
	for i, c := range socks {
		require.NoError(t, c.Conn.SetReadDeadline(time.Now().Add(10*time.Second)))
		for len(got[i]) < events {
			_, b, err := c.Conn.ReadMessage()
			require.NoError(t, err)
			var m struct{ Type string }
			require.NoError(t, json.Unmarshal(b, &m))
			if m.Type == "ka" || m.Type == "ping" {
				continue
			}
			require.Contains(t, []string{"next", "data"}, m.Type, "frame: %s", b)
			var f frame
			require.NoError(t, json.Unmarshal(b, &f))
			got[i] = append(got[i], f)
		}
	}
	for e := range events {
		require.Equal(t, string(got[0][e].Payload.Data), string(got[1][e].Payload.Data), "event %d: same role and operation, same bytes", e)
		require.NotEqual(t, got[0][e].Payload.Extensions.RequestID, got[1][e].Payload.Extensions.RequestID, "request ids stay per socket")
		require.JSONEq(t, string(got[0][e].Payload.Data), string(got[2][e].Payload.Data), "event %d: the viewer sees the same event", e)
	}
	executed, shared := s.App.SharedFeedStats()
	t.Logf("executed %d, shared %d", executed-executed0, shared-shared0)
	require.Equal(t, int64(2*events), executed-executed0, "once per event for the admins' operation, once for the viewer's")
	require.Equal(t, int64(events), shared-shared0, "the second admin socket takes the first one's data")
}

// A client resuming from its cursor (after, as every reconnecting browser
// tab sends) runs the same operation as one that did not: where its stream
// starts does not change how an event looks, and the two share each
// event's execution and bytes.
func TestFeedSharesFramesAcrossCursors(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	first := apptest.DialWS(t, s, apptest.ProtoTransportWS)
	first.Init(s.Token)
	first.Subscribe("1", apptest.FeedSubscription, map[string]any{"filter": salesOrdersCreated})
	apptest.WaitFor(t, 5*time.Second, "the subscription", func() bool { return s.App.Feed().Subscribers() == 1 })
	require.NoError(t, insertEvents(t.Context(), s, 1, 1))
	cursor := first.NextEvent("1").Cursor
	require.NotEmpty(t, cursor)

	resumed := apptest.DialWS(t, s, apptest.ProtoTransportWS)
	resumed.Init(s.Token)
	resumed.Subscribe("1", apptest.FeedSubscription, map[string]any{"filter": salesOrdersCreated, "after": cursor})
	apptest.WaitFor(t, 5*time.Second, "both subscriptions", func() bool { return s.App.Feed().Subscribers() == 2 })
	executed0, shared0 := s.App.SharedFeedStats()
	const events = 4
	require.NoError(t, insertEvents(t.Context(), s, events, 2))
	for range events {
		a, b := first.NextEvent("1"), resumed.NextEvent("1")
		require.Equal(t, a, b)
	}
	executed, shared := s.App.SharedFeedStats()
	require.Equal(t, int64(events), executed-executed0, "one execution per event for both cursors")
	require.Equal(t, int64(events), shared-shared0, "the resumed socket takes the first one's data")
}
