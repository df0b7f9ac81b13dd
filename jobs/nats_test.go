package jobs_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"erp/db"
	"erp/jobs"
	"erp/jobs/natstest"
)

// natsBundle is the dispatch side with a NATS server and one NATS
// subscriber of every event on stream JOURNAL, subjects erp.journal.>.
type natsBundle struct {
	*testBundle
	srv *natstest.Server
	js  jetstream.JetStream
	sub db.Subscriber
}

func setupNats(t *testing.T, retry jobs.RetryPolicy, in db.NatsSubscriberInput) *natsBundle {
	t.Helper()
	srv := natstest.New(t)
	pub, err := jobs.ConnectNats(jobs.NatsConfig{URL: srv.URL}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(pub.Close)
	b := setupWith(t, jobs.DispatcherConfig{Nats: pub, Retry: retry}, time.Hour)
	name, stream, prefix := "journal", "JOURNAL", "erp.journal"
	in.Name, in.Stream, in.SubjectPrefix = &name, &stream, &prefix
	sub, err := b.dispatcher.CreateNatsSubscriber(b.ctx, in)
	require.NoError(t, err)
	return &natsBundle{testBundle: b, srv: srv, js: srv.JetStream(t), sub: sub}
}

// journal writes n events, doc.status_changed of sales orders 1…docs in
// turn (event i is about document i % docs + 1), and enqueues their
// dispatch.
func (b *natsBundle) journal(t *testing.T, n, docs int) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(b.ctx, `INSERT INTO events (type, entity, entity_id, payload)
			SELECT 'doc.status_changed', 'sales_orders', g % $2 + 1, jsonb_build_object('n', g)
			FROM generate_series(0, $1 - 1) g ORDER BY g RETURNING id`, n, docs)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return err
		}
		events := make([]db.Event, len(ids))
		for i, id := range ids {
			events[i] = db.Event{ID: id}
		}
		return jobs.EnqueueDispatch(b.ctx, b.river, tx, events)
	}))
}

// streamed is every message of stream JOURNAL, in stream order.
func (b *natsBundle) streamed(t *testing.T) []jetstream.Msg {
	t.Helper()
	s, err := b.js.Stream(b.ctx, "JOURNAL")
	require.NoError(t, err)
	info, err := s.Info(b.ctx)
	require.NoError(t, err)
	n := int(info.State.Msgs)
	if n == 0 {
		return nil
	}
	c, err := s.OrderedConsumer(b.ctx, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	batch, err := c.Fetch(n, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	var out []jetstream.Msg
	for m := range batch.Messages() {
		out = append(out, m)
	}
	require.NoError(t, batch.Error())
	require.Len(t, out, n)
	return out
}

// requireOnceInOrder checks that msgs hold every one of want events once
// (by Nats-Msg-Id and by event id) and each document's in event order.
func requireOnceInOrder(t *testing.T, msgs []jetstream.Msg, want int) {
	t.Helper()
	ids := map[string]bool{}
	last := map[string]int64{}
	for _, m := range msgs {
		h := m.Headers()
		id := h.Get(jetstream.MsgIDHeader)
		require.False(t, ids[id], "message %s stored twice", id)
		ids[id] = true
		ev, err := strconv.ParseInt(h.Get(jobs.NatsHeaderEventID), 10, 64)
		require.NoError(t, err)
		// erp.journal.sales_orders.<id>.doc.status_changed: one document's.
		doc := m.Subject()
		require.Greater(t, ev, last[doc], "document %s out of order", doc)
		last[doc] = ev
		require.Equal(t, "doc.status_changed", h.Get(jobs.NatsHeaderEventType))
	}
	require.Len(t, ids, want)
}

func (b *natsBundle) lag(t *testing.T) db.SubscriberLag {
	t.Helper()
	lags, err := db.SubscriberLagsByIDs(b.ctx, b.pool, []int64{b.sub.ID})
	require.NoError(t, err)
	require.Len(t, lags, 1)
	return lags[0]
}

func (b *natsBundle) waitDelivered(t *testing.T, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for b.count(t, `SELECT count(*) FROM deliveries WHERE subscriber_id = $1 AND status = 'delivered'`, b.sub.ID) < n {
		require.Zero(t, b.count(t, `SELECT count(*) FROM deliveries WHERE subscriber_id = $1 AND status = 'dead'`, b.sub.ID), "a dead letter")
		if time.Now().After(deadline) {
			rows, err := b.pool.Query(b.ctx, `SELECT status, attempts, coalesce(last_error, ''), extract(epoch FROM next_attempt_at - now())::float8
				FROM deliveries WHERE subscriber_id = $1 AND status <> 'delivered' ORDER BY event_id LIMIT 5`, b.sub.ID)
			require.NoError(t, err)
			open, err := pgx.CollectRows(rows, pgx.RowToAddrOf[struct {
				Status   string
				Attempts int32
				Error    string
				DueIn    float64
			}])
			require.NoError(t, err)
			for _, o := range open {
				t.Logf("open: %+v", *o)
			}
			t.Fatalf("not all %d delivered within %s", n, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestNatsThousandEventsAcrossFiftyDocumentsOnceAndInOrder(t *testing.T) {
	t.Parallel()
	maxInFlight := int32(16)
	b := setupNats(t, testRetry, db.NatsSubscriberInput{MaxInFlight: &maxInFlight})
	b.startRiver(t)
	b.journal(t, 1000, 50)
	b.waitDelivered(t, 1000, 5*time.Minute) // a bound for a loaded CI machine, not a figure
	requireOnceInOrder(t, b.streamed(t), 1000)
}

func TestNatsServerDownFiveSecondsLosesNothingStoresNothingTwice(t *testing.T) {
	t.Parallel()
	attempts := int32(100)
	b := setupNats(t, jobs.RetryPolicy{Base: 20 * time.Millisecond, Max: 500 * time.Millisecond},
		db.NatsSubscriberInput{MaxAttempts: &attempts})
	b.startRiver(t)
	b.journal(t, 100, 10)
	b.waitDelivered(t, 1, 30*time.Second) // mid-stream

	b.srv.Stop()
	b.journal(t, 100, 10)
	time.Sleep(5 * time.Second) // the outage the issue asks for
	during := b.lag(t)
	require.Positive(t, during.Pending, "the subscriber's lag rises while NATS is down")
	require.Positive(t, during.Failing, "publishes fail while NATS is down")

	b.srv.Start()
	b.waitDelivered(t, 200, time.Minute)
	require.Zero(t, b.lag(t).Pending, "and falls back to zero")
	requireOnceInOrder(t, b.streamed(t), 200)
}

func TestNatsDuplicateWindowShorterThanTheRetryScheduleIsRefused(t *testing.T) {
	t.Parallel()
	srv := natstest.New(t)
	js := srv.JetStream(t)
	_, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "SHORT", Subjects: []string{"short.>"}, Duplicates: 2 * time.Minute})
	require.NoError(t, err)
	pub, err := jobs.ConnectNats(jobs.NatsConfig{URL: srv.URL}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(pub.Close)
	b := setupWith(t, jobs.DispatcherConfig{Nats: pub, Retry: jobs.DefaultRetryPolicy}, time.Hour)
	name, stream := "short", "SHORT"
	in := db.NatsSubscriberInput{Name: &name, Stream: &stream}

	prefix := "short"
	in.SubjectPrefix = &prefix
	_, err = b.dispatcher.CreateNatsSubscriber(b.ctx, in)
	var inputErr *db.InputError
	require.ErrorAs(t, err, &inputErr)
	require.Equal(t, "stream", inputErr.Field)
	horizon := jobs.DefaultRetryPolicy.Horizon(10, 10*time.Second).Round(time.Second)
	require.Contains(t, inputErr.Msg, "2m0s", "JetStream's default window")
	require.Contains(t, inputErr.Msg, horizon.String(), "names both durations")

	other := "elsewhere.journal"
	in.SubjectPrefix = &other
	_, err = b.dispatcher.CreateNatsSubscriber(b.ctx, in)
	require.ErrorAs(t, err, &inputErr)
	require.Equal(t, "subjectPrefix", inputErr.Field, "the stream does not take the prefix")
	require.Zero(t, b.count(t, `SELECT count(*) FROM subscribers WHERE kind = 'nats'`), "nothing written")

	// One attempt of 1 s fits 2 minutes.
	one, timeout := int32(1), int32(1000)
	in.SubjectPrefix, in.MaxAttempts, in.TimeoutMs = &prefix, &one, &timeout
	sub, err := b.dispatcher.CreateNatsSubscriber(b.ctx, in)
	require.NoError(t, err)
	// …and an update that outgrows it is refused too.
	many := int32(10)
	_, err = b.dispatcher.UpdateNatsSubscriber(b.ctx, b.pool, sub.ID, db.NatsSubscriberInput{MaxAttempts: &many})
	require.ErrorAs(t, err, &inputErr)
	require.Equal(t, "stream", inputErr.Field)
}

func TestNatsStreamCreatedWithAWindowCoveringTheRetrySchedule(t *testing.T) {
	t.Parallel()
	b := setupNats(t, jobs.DefaultRetryPolicy, db.NatsSubscriberInput{})
	s, err := b.js.Stream(b.ctx, "JOURNAL")
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	require.Equal(t, []string{"erp.journal.>"}, cfg.Subjects)
	// 2+4+…+512 s of waits, and 10 leases of 10 s + 5 s and a sweep's minute.
	require.Equal(t, 1022*time.Second+10*(75*time.Second), cfg.Duplicates)
}

func TestNatsWithoutAServerIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Hour)
	name, stream, prefix := "no-nats", "JOURNAL", "erp"
	_, err := b.dispatcher.CreateNatsSubscriber(b.ctx, db.NatsSubscriberInput{Name: &name, Stream: &stream, SubjectPrefix: &prefix})
	var inputErr *db.InputError
	require.ErrorAs(t, err, &inputErr)
	require.Contains(t, inputErr.Msg, "NATS_URL")
	for _, bad := range []string{"erp.*", "erp.>", "erp journal", "erp..x", ".erp", "", "_INBOX", "_INBOX.erp", "$JS.erp", "$SYS"} {
		err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			_, err := db.CreateNatsSubscriber(b.ctx, tx, db.NatsSubscriberInput{Name: &name, Stream: &stream, SubjectPrefix: &bad})
			return err
		})
		require.ErrorAs(t, err, &inputErr, bad)
		require.Equal(t, "subjectPrefix", inputErr.Field, bad)
	}
}

func TestNatsRefusedCreateLeavesNatsUntouched(t *testing.T) {
	t.Parallel()
	b := setupNats(t, jobs.DefaultRetryPolicy, db.NatsSubscriberInput{})
	name, stream, prefix := "journal", "ERPB", "bx"
	_, err := b.dispatcher.CreateNatsSubscriber(b.ctx, db.NatsSubscriberInput{Name: &name, Stream: &stream, SubjectPrefix: &prefix})
	require.ErrorIs(t, err, db.ErrConflict, "the name is taken")
	_, err = b.js.Stream(b.ctx, "ERPB")
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound, "a refusal creates no stream")
}

func TestNatsOverlappingSubjectPrefixesAreRefused(t *testing.T) {
	t.Parallel()
	b := setupNats(t, jobs.DefaultRetryPolicy, db.NatsSubscriberInput{}) // "journal": JOURNAL, erp.journal
	name, types := "journal2", []string{"user.created"}
	for _, tt := range []struct{ stream, prefix string }{
		{"JOURNAL", "erp.journal"},              // equal: each event stored twice
		{"JOURNAL", "erp.journal.sales_orders"}, // covered by journal's
		{"OTHER", "erp"},                        // covers journal's
	} {
		_, err := b.dispatcher.CreateNatsSubscriber(b.ctx,
			db.NatsSubscriberInput{Name: &name, Stream: &tt.stream, SubjectPrefix: &tt.prefix, EventTypes: types})
		var inputErr *db.InputError
		require.ErrorAs(t, err, &inputErr, tt.prefix)
		require.Equal(t, "subjectPrefix", inputErr.Field, tt.prefix)
		require.Contains(t, inputErr.Msg, `"journal"`, "names the other subscriber")
	}
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM subscribers WHERE kind = 'nats'`), "nothing written")
	stream, prefix := "J2", "erp.journal2" // a sibling, not covered
	_, err := b.dispatcher.CreateNatsSubscriber(b.ctx, db.NatsSubscriberInput{Name: &name, Stream: &stream, SubjectPrefix: &prefix})
	require.NoError(t, err)
}

// syncBuffer is a log destination NATS callbacks write to while the test
// reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestNatsAttemptWhileDisconnectedSaysSo(t *testing.T) {
	t.Parallel()
	attempts := int32(100)
	b := setupNats(t, jobs.RetryPolicy{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond}, db.NatsSubscriberInput{MaxAttempts: &attempts})
	b.srv.Stop()
	b.startRiver(t)
	b.journal(t, 1, 1)
	var lastErr string
	require.Eventually(t, func() bool {
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT coalesce(max(last_error), '') FROM deliveries WHERE subscriber_id = $1`,
			b.sub.ID).Scan(&lastErr))
		return lastErr != ""
	}, 30*time.Second, 50*time.Millisecond)
	require.Contains(t, lastErr, "NATS is not reachable: ")
}

func TestNatsStartedWhileNatsIsDownLogsWhyAndConnectsLater(t *testing.T) {
	t.Parallel()
	srv := natstest.New(t)
	srv.Stop()
	var logs syncBuffer
	pub, err := jobs.ConnectNats(jobs.NatsConfig{URL: srv.URL}, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err, "NATS down is no reason not to start")
	t.Cleanup(pub.Close)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "connection refused") }, 30*time.Second, 50*time.Millisecond,
		"the reason is logged")
	srv.Start()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "NATS connected") }, 30*time.Second, 50*time.Millisecond)
}

func TestNatsRejectedNKeyKeepsReconnectingUntilAdmitted(t *testing.T) {
	t.Parallel()
	user, err := nkeys.CreateUser()
	require.NoError(t, err)
	seed, err := user.Seed()
	require.NoError(t, err)
	pubKey, err := user.PublicKey()
	require.NoError(t, err)
	seedFile := filepath.Join(t.TempDir(), "erp.nk")
	require.NoError(t, os.WriteFile(seedFile, seed, 0o600))
	other, err := nkeys.CreateUser()
	require.NoError(t, err)
	otherKey, err := other.PublicKey()
	require.NoError(t, err)

	srv := natstest.New(t)
	srv.Stop()
	srv.SetNKeys(otherKey) // ours unknown
	srv.Start()
	var logs syncBuffer
	pub, err := jobs.ConnectNats(jobs.NatsConfig{URL: srv.URL, NKey: seedFile}, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	t.Cleanup(pub.Close)
	require.Eventually(t, func() bool { return strings.Contains(strings.ToLower(logs.String()), "authorization violation") },
		30*time.Second, 50*time.Millisecond, "the refusal is logged")
	// nats.go gives up at the second refusal in a row, a reconnect wait (2 s) later.
	time.Sleep(3 * time.Second)

	srv.Stop()
	srv.SetNKeys(otherKey, pubKey) // the key added
	srv.Start()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "NATS connected") }, 30*time.Second, 50*time.Millisecond,
		"connected once admitted: %s", &logs)
}

func TestNatsDeletedStreamIsNotRecreatedByAnUpdate(t *testing.T) {
	t.Parallel()
	b := setupNats(t, jobs.DefaultRetryPolicy, db.NatsSubscriberInput{})
	require.NoError(t, b.js.DeleteStream(b.ctx, "JOURNAL"))
	more := int32(12) // a longer schedule: the stream is looked at
	_, err := b.dispatcher.UpdateNatsSubscriber(b.ctx, b.pool, b.sub.ID, db.NatsSubscriberInput{MaxAttempts: &more})
	var inputErr *db.InputError
	require.ErrorAs(t, err, &inputErr)
	require.Equal(t, "stream", inputErr.Field)
	_, err = b.js.Stream(b.ctx, "JOURNAL")
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound, "not made again behind the operator's back")
}

// createAtOnce creates a NATS subscriber of each input, in goroutines
// released together, and returns the subscriber or error of each.
func createAtOnce(b *testBundle, ins []db.NatsSubscriberInput) ([]db.Subscriber, []error) {
	subs, errs := make([]db.Subscriber, len(ins)), make([]error, len(ins))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, in := range ins {
		wg.Go(func() {
			<-start
			subs[i], errs[i] = b.dispatcher.CreateNatsSubscriber(b.ctx, in)
		})
	}
	close(start)
	wg.Wait()
	return subs, errs
}

// createCancellable starts a create of NATS subscriber name, on a stream
// and prefix, and returns its outcome and the cancel of its request.
func createCancellable(b *testBundle, name, stream, prefix string) (<-chan error, context.CancelFunc) {
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() {
		_, err := b.dispatcher.CreateNatsSubscriber(ctx, db.NatsSubscriberInput{Name: &name, Stream: &stream, SubjectPrefix: &prefix})
		done <- err
	}()
	return done, cancel
}

// onlyOneCreated checks that exactly one of the creates succeeded and
// returns it.
func onlyOneCreated(t *testing.T, subs []db.Subscriber, errs []error) db.Subscriber {
	t.Helper()
	var won []string
	var sub db.Subscriber
	for i, err := range errs {
		if err == nil {
			won, sub = append(won, subs[i].Name), subs[i]
		}
	}
	require.Len(t, won, 1, "created")
	return sub
}

func TestNatsConcurrentOverlappingCreatesStoreOne(t *testing.T) {
	t.Parallel()
	srv := natstest.New(t)
	_, err := srv.JetStream(t).CreateStream(t.Context(), jetstream.StreamConfig{Name: "RACE", Subjects: []string{"race.>"}, Duplicates: time.Hour})
	require.NoError(t, err)
	pub, err := jobs.ConnectNats(jobs.NatsConfig{URL: srv.URL}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(pub.Close)
	b := setupWith(t, jobs.DispatcherConfig{Nats: pub, Retry: jobs.DefaultRetryPolicy}, time.Hour)
	// Each prefix equals, covers or is covered by every other one.
	prefixes := []string{"race", "race.a", "race.a.b", "race.a.b.c"}
	ins := make([]db.NatsSubscriberInput, 8)
	for i := range ins {
		name, stream, prefix := "race"+strconv.Itoa(i), "RACE", prefixes[i%len(prefixes)]
		ins[i] = db.NatsSubscriberInput{Name: &name, Stream: &stream, SubjectPrefix: &prefix}
	}

	subs, errs := createAtOnce(b, ins)
	won := onlyOneCreated(t, subs, errs)
	for i, err := range errs {
		if err == nil {
			continue
		}
		var inputErr *db.InputError
		require.ErrorAs(t, err, &inputErr, *ins[i].SubjectPrefix)
		require.Equal(t, "subjectPrefix", inputErr.Field, *ins[i].SubjectPrefix)
		require.Contains(t, inputErr.Msg, strconv.Quote(won.Name), "names the subscriber stored")
	}
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM subscribers WHERE kind = 'nats'`), "one subscriber stores the events")
}

func TestNatsConcurrentCreatesOfOneNewStreamKeepIt(t *testing.T) {
	t.Parallel()
	b := setupNats(t, jobs.DefaultRetryPolicy, db.NatsSubscriberInput{}) // "journal": JOURNAL, erp.journal
	ins := make([]db.NatsSubscriberInput, 8)
	for i := range ins {
		// All ask NATS for the same new stream, and may each be told they made it.
		name, stream, prefix := "fresh"+strconv.Itoa(i), "FRESH", "fresh"
		ins[i] = db.NatsSubscriberInput{Name: &name, Stream: &stream, SubjectPrefix: &prefix}
	}

	subs, errs := createAtOnce(b.testBundle, ins)
	onlyOneCreated(t, subs, errs)
	_, err := b.js.Stream(b.ctx, "FRESH")
	require.NoError(t, err, "a refused create leaves the stream the stored one publishes to")
}

func TestNatsConcurrentCreatesOfOneNameLeaveOneNewStream(t *testing.T) {
	t.Parallel()
	b := setupNats(t, jobs.DefaultRetryPolicy, db.NatsSubscriberInput{}) // "journal": JOURNAL, erp.journal
	ins := make([]db.NatsSubscriberInput, 8)
	for i := range ins {
		name, stream, prefix := "dup", "DUP"+strconv.Itoa(i), "dup"+strconv.Itoa(i)
		ins[i] = db.NatsSubscriberInput{Name: &name, Stream: &stream, SubjectPrefix: &prefix}
	}

	subs, errs := createAtOnce(b.testBundle, ins)
	won := onlyOneCreated(t, subs, errs)
	for _, err := range errs {
		if err != nil {
			require.ErrorIs(t, err, db.ErrConflict, "the name is taken")
		}
	}
	var streams []string
	for name := range b.js.StreamNames(b.ctx).Name() {
		streams = append(streams, name)
	}
	require.ElementsMatch(t, []string{"JOURNAL", *won.Stream}, streams, "a refused create removes the stream it made")
}

func TestNatsCreateCancelledAfterMakingItsStreamRemovesIt(t *testing.T) {
	t.Parallel()
	b := setupNats(t, jobs.DefaultRetryPolicy, db.NatsSubscriberInput{}) // "journal": JOURNAL, erp.journal
	// Another creation holds the lock the insert waits for, so the
	// request is cancelled after NATS made the stream and before the
	// insert; the cleanup then waits for that creation too, as it waits
	// for one committing.
	lock, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback(b.ctx) }()
	_, err = lock.Exec(b.ctx, `SELECT pg_advisory_xact_lock(hashtext('subscribers.nats_create'))`)
	require.NoError(t, err)

	stream := "GONE"
	done, cancel := createCancellable(b.testBundle, "gone", stream, "gone")
	defer cancel()
	waitingSince := func(since time.Time) func() bool {
		return func() bool {
			return b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query_start > $1`, since) == 1
		}
	}
	require.Eventually(t, waitingSince(time.Time{}), 10*time.Second, 5*time.Millisecond, "the create waits to insert, NATS having answered that it made the stream")
	_, err = b.js.Stream(b.ctx, stream)
	require.NoError(t, err)
	var cancelled time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT clock_timestamp()`).Scan(&cancelled))
	cancel()
	require.Eventually(t, waitingSince(cancelled), 10*time.Second, 5*time.Millisecond, "the cleanup waits for the other creation")
	require.NoError(t, lock.Rollback(b.ctx))
	require.ErrorIs(t, <-done, context.Canceled)

	_, err = b.js.Stream(b.ctx, stream)
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound, "the cancelled create removed the stream it made")
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM subscribers WHERE name = 'gone'`))
}

// setupSlowNats is the dispatch side publishing through a proxy that
// holds every stream creation for delay, with no NATS subscriber yet.
func setupSlowNats(t *testing.T, delay time.Duration) (*testBundle, jetstream.JetStream, *jobs.NatsPublisher, *natstest.Proxy) {
	t.Helper()
	srv := natstest.New(t)
	slow := srv.Delaying(t, "$JS.API.STREAM.CREATE.", delay)
	pub, err := jobs.ConnectNats(jobs.NatsConfig{URL: slow.URL}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(pub.Close)
	return setupWith(t, jobs.DispatcherConfig{Nats: pub}, time.Hour), srv.JetStream(t), pub, slow
}

func TestNatsCreateCancelledWhileNatsMakesItsStreamLeavesNone(t *testing.T) {
	t.Parallel()
	b, js, _, slow := setupSlowNats(t, time.Second)
	stream := "SLOW"
	done, cancel := createCancellable(b, "slow", stream, "slow")
	defer cancel()
	require.Eventually(t, func() bool { return slow.Held() == 1 }, 10*time.Second, 5*time.Millisecond, "the creation is on its way to NATS")
	cancel() // the client gives up
	require.ErrorIs(t, <-done, context.Canceled)

	// A second create on the same connection reaches NATS after the first
	// one's creation, which NATS has then carried out.
	name2, stream2, prefix2 := "after", "AFTER", "after"
	_, err := b.dispatcher.CreateNatsSubscriber(b.ctx, db.NatsSubscriberInput{Name: &name2, Stream: &stream2, SubjectPrefix: &prefix2})
	require.NoError(t, err)
	_, err = js.Stream(b.ctx, stream)
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound, "the stream NATS made after the request ended is removed")
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM subscribers WHERE name = 'slow'`))
}

func TestNatsCreateNatsDoesNotAnswerInTimeSaysWhatMayBeLeft(t *testing.T) {
	t.Parallel()
	b, js, pub, _ := setupSlowNats(t, 2*time.Second)
	jobs.SetNatsTimeout(pub, 500*time.Millisecond)
	name, stream, prefix := "slow", "SLOW", "slow"
	in := db.NatsSubscriberInput{Name: &name, Stream: &stream, SubjectPrefix: &prefix}
	_, err := b.dispatcher.CreateNatsSubscriber(b.ctx, in)
	var unreachable *jobs.NatsUnreachableError
	require.ErrorAs(t, err, &unreachable)
	require.Contains(t, unreachable.Reason, "did not answer the creation of stream SLOW within 500ms")
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM subscribers WHERE kind = 'nats'`))

	// NATS makes it late; the same create again uses it, as the error says.
	require.Eventually(t, func() bool {
		_, err := js.Stream(b.ctx, stream)
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "NATS made the stream after all")
	sub, err := b.dispatcher.CreateNatsSubscriber(b.ctx, in)
	require.NoError(t, err)
	require.Equal(t, stream, *sub.Stream)
}

func TestNatsStreamRefusedForSubjectsAnotherStreamTakesNamesIt(t *testing.T) {
	t.Parallel()
	b := setupNats(t, jobs.DefaultRetryPolicy, db.NatsSubscriberInput{}) // "journal": JOURNAL, erp.journal
	_, err := b.js.CreateStream(b.ctx, jetstream.StreamConfig{Name: "ORPHAN", Subjects: []string{"orphan.>"}})
	require.NoError(t, err)
	name, stream, prefix := "mine", "MINE", "orphan"
	_, err = b.dispatcher.CreateNatsSubscriber(b.ctx, db.NatsSubscriberInput{Name: &name, Stream: &stream, SubjectPrefix: &prefix})
	var inputErr *db.InputError
	require.ErrorAs(t, err, &inputErr)
	require.Equal(t, "stream", inputErr.Field)
	require.Contains(t, inputErr.Msg, "stream ORPHAN takes them")
}
