// Package app is the ERP event backbone wired together: the API's pool and
// the work pool (PoolSizes), the dispatcher and River, the live feed, the
// websocket adapter and the HTTP routes, with their lifecycle and shutdown
// order. The erp binary's subcommands (Serve, Migrate, CreateUser) are here
// too, so that server.go only parses the configuration and calls them;
// package apptest runs the same App in tests.
package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/trace"
	"riverqueue.com/riverui"

	"erp/app/config"
	"erp/app/httpapi"
	"erp/db"
	"erp/graph/sse"
	"erp/graph/wsgorilla"
	"erp/jobs"
	"erp/metrics"
	"erp/resolvers"
	"erp/web"
)

const (
	// riverUIPath is where River's web UI is mounted, for admins signed in
	// at riverUIPath/login.
	riverUIPath = "/riverui"
	// readyTimeout bounds /readyz's one database query.
	readyTimeout = 2 * time.Second
	// dispatchWorkers is River's MaxWorkers of the default queue: the
	// jobs (dispatch, replay batches, sweep, prune) that run at once in
	// this process, each holding at most one connection of the work pool
	// at a time (and waiting for one when the pool is busy).
	dispatchWorkers = 20
	// riverConns are the work pool's connections River itself holds at
	// once besides its workers': the fetch loop of each queue (default and
	// deliveries), the completer, and the leader's election and
	// maintenance services. The deliveries queue's workers (webhook
	// attempts) hold a connection only for a take or a record, and share
	// the pool with the dispatch workers.
	riverConns = 5
	// apiBackgroundConns are the API pool's connections held besides the
	// requests': the live feed's journal reads, the token watch, and a
	// /metrics scrape's two queries (River's job counts, subscriber lag).
	apiBackgroundConns = 4
	// wsKeepAlive is the websocket keepalive period unless
	// config.KeepAlive says otherwise: "ka" messages for graphql-ws, ping
	// messages for graphql-transport-ws, and websocket ping frames for
	// both (all sent by wsgorilla); a peer from which nothing arrived for
	// two periods is dropped. An SSE stream gets a ": ping" comment after
	// each period without an event (transport.SSE), so that proxies do
	// not take it for idle.
	wsKeepAlive = 10 * time.Second
	// wsInitTimeout is how long a socket may wait to send connection_init
	// (then close 4408) unless config.InitTimeout says otherwise.
	wsInitTimeout = 10 * time.Second
	// wsReadLimit caps one incoming websocket message, in bytes (then close
	// 1009); a subscription request is far smaller.
	wsReadLimit = 64 << 10
	// wsMaxOperations caps the operations running at once on one websocket
	// (then an error for the operation, TOO_MANY_OPERATIONS); the web page
	// runs one or two.
	wsMaxOperations = 100
	// sseMaxStreams caps the SSE streams one token holds open at once
	// (then 429, TOO_MANY_OPERATIONS): as many as one websocket's
	// operations, each stream being one operation.
	sseMaxStreams = wsMaxOperations
	// wsWriteBuffer is the write buffer, in bytes, taken from a pool shared
	// by all sockets for the time of one write (a feed event fits).
	wsWriteBuffer = 4 << 10
	// wsSendBuffer caps each websocket's kernel send buffer, in bytes, so
	// that a client that stopped reading pins at most that much (twice, as
	// Linux counts) beside its feed buffer; at 100 ms round trip it still
	// carries ~2.5 MB/s, thousands of events a second.
	wsSendBuffer = 256 << 10
	// Request limits, on every transport: body bytes (HTTP), query tokens,
	// complexity (fields selected, list pages weighed by their size),
	// nesting depth and fields selected (aliases and fragments expanded).
	maxRequestBody = 2 << 20
	maxQueryTokens = 5000
	maxComplexity  = 20000
	maxDepth       = 12
	maxFields      = 500
	// maxIntrospectionFields caps the fields selected under __schema and
	// __type, counted as maxFields counts (graphql-js's full schema query
	// selects 230).
	maxIntrospectionFields = 500
	// maxResponseFields and maxResponseBytes bound each response as it is
	// built: fields resolved plus objects in lists, and bytes of data.
	maxResponseFields = 100_000
	maxResponseBytes  = 16 << 20
	// defaultShutdownTimeout applies when the configuration leaves
	// ShutdownTimeout zero.
	defaultShutdownTimeout = 15 * time.Second
)

// App is the wired product on a db.Database: dispatcher and River on its
// work pool, the API, the feed and metrics on its API pool, the websocket
// adapter and the HTTP handler. New builds it, Start runs its
// background parts, Serve serves HTTP until its context ends, Stop ends
// the background parts.
type App struct {
	pool       *pgxpool.Pool
	database   *db.Database
	res        *resolvers.Resolver
	auth       *httpapi.Auth
	dispatcher *jobs.Dispatcher
	river      *river.Client[pgx.Tx]
	// nats is the connection of NATS subscribers' publishes; nil: no
	// NATS_URL.
	nats *jobs.NatsPublisher
	feed *db.Feed
	ws   *wsgorilla.Implementation
	// streams are the GraphQL over SSE streams, cut at shutdown.
	streams *sse.Streams
	// sharedFeed executes each live event once per distinct subscription
	// operation and role.
	sharedFeed      *resolvers.SharedFeedPayloads
	handler         http.Handler
	logger          *slog.Logger
	apiOnly         bool
	shutdownTimeout time.Duration
	// keepAlive is the websocket keepalive period, and the SSE streams'
	// ping comments' (wsKeepAlive).
	keepAlive time.Duration
	metrics   *metrics.Metrics
	// metricsAddr is METRICS_ADDR: when set, Start serves metricsHandler
	// there (bound to metricsBound, stopped by stopMetrics) and the API's
	// mux has no /metrics.
	metricsAddr    string
	metricsHandler http.Handler
	metricsBound   net.Addr
	stopMetrics    func(context.Context)
	// riverUI is River's web UI, served at /riverui to signed-in admins;
	// stopRiverUI ends its background services.
	riverUI     *riverui.Handler
	stopRiverUI context.CancelFunc

	stopFeed context.CancelFunc
	feedDone chan struct{}
	// riverStarted and migrated are what /readyz checks besides the
	// database; migrated is cached once it first passes.
	riverStarted atomic.Bool
	migrated     atomic.Bool
	// tracer makes the GraphQL operations' spans; nil: tracing off.
	tracer trace.Tracer
	// proxies are TRUSTED_PROXIES, whose X-Forwarded-* headers are believed.
	proxies httpapi.Proxies
}

// PoolSizes is what cfg's instance asks of DATABASE_URL, before its
// pool_max_conns (db.PoolSizes.Within): each pool pgxpool's own default,
// max(4, GOMAXPROCS), for its transactions, plus the connections held
// besides them — River's own (5) in the work pool (1 in all on an
// API-only instance, which works no jobs), the feed's, the token watch's
// and a metrics scrape's (4) in the API pool. The work pool is not sized
// by its workers: a dispatch runs at most maxLeaders transactions at once
// and a webhook attempt holds a connection only for its take and record,
// and more connections than the database has cores to run them only
// lengthen the tail (figure B at 500 events/s: p99 28–221 ms with 25,
// 16–37 ms with 4 to 10; BENCHMARKS.md). docs/operations.md, Connections, says the
// same.
func PoolSizes(cfg config.Config) db.PoolSizes {
	perCPU := int32(max(4, runtime.GOMAXPROCS(0)))
	work := perCPU + riverConns
	if cfg.APIOnly {
		work = 1
	}
	return db.PoolSizes{API: perCPU + apiBackgroundConns, Work: work}
}

// New wires the application on d (already migrated; its pools sized by
// PoolSizes) from cfg: of it, New reads DispatchInterval, AllowedOrigins,
// Introspection, Playground, TimeZone, WebhookAllowPrivate, PublicURL, NatsURL (and
// NATS_CREDS, NATS_NKEY_SEED, NATS_CA),
// ShutdownTimeout, Retention and the tuning fields (KeepAlive, InitTimeout,
// APIOnly, FeedBuffer, RetryBase; zero takes the default), and TracerProvider (nil: no
// spans; the pools' statements are traced only if d's pools were opened
// with db.TraceStatements). It starts nothing; the error names a bad
// setting (ALLOWED_ORIGINS, TIME_ZONE) or what failed to build.
func New(d *db.Database, cfg config.Config, logger *slog.Logger) (_ *App, err error) {
	pool := d.Pool // the API's
	checkOrigin, err := wsgorilla.AllowOrigins(cfg.AllowedOrigins)
	if err != nil {
		return nil, fmt.Errorf("ALLOWED_ORIGINS: %w", err)
	}
	page := web.Config{NoPlayground: !cfg.Playground}
	if page.TimeZone, err = config.LoadTimeZone(cfg.TimeZone); err != nil {
		return nil, err
	}
	registry := prometheus.NewRegistry()
	m := metrics.New(registry)
	m.RegisterDatabase(map[string]*pgxpool.Pool{"api": pool, "work": d.Work}, func(ctx context.Context) ([]metrics.JobCount, error) {
		counts, err := db.RiverJobCounts(ctx, pool)
		out := make([]metrics.JobCount, len(counts))
		for i, c := range counts {
			out[i] = metrics.JobCount(c)
		}
		return out, err
	})
	m.RegisterSubscriberLag(func(ctx context.Context) ([]metrics.SubscriberLag, error) {
		pending, err := db.SubscribersPending(ctx, pool)
		out := make([]metrics.SubscriberLag, len(pending))
		for i, p := range pending {
			out[i] = metrics.SubscriberLag(p)
		}
		return out, err
	})
	webhooks := jobs.NewWebhookSender(jobs.WithAllowPrivate(cfg.WebhookAllowPrivate),
		jobs.WithWebhookTracing(cfg.TracerProvider))
	instance := instanceID()
	disableAfter := cfg.WebhookDisableAfter
	if disableAfter == 0 {
		disableAfter = -1 // never
	}
	var natsPub *jobs.NatsPublisher
	if cfg.NatsURL != "" {
		natsPub, err = jobs.ConnectNats(jobs.NatsConfig{URL: cfg.NatsURL, Creds: cfg.NatsCreds, NKey: cfg.NatsNKey, CA: cfg.NatsCA}, logger)
		if err != nil {
			return nil, fmt.Errorf("connect NATS: %w", err)
		}
		defer func() {
			if err != nil {
				natsPub.Close()
			}
		}()
	}
	newDispatcher := func(pool *pgxpool.Pool) *jobs.Dispatcher {
		return jobs.NewDispatcher(pool, jobs.DispatcherConfig{Logger: logger, Metrics: m, Webhooks: webhooks, Nats: natsPub,
			ReplayBatch: cfg.ReplayBatch, TracerProvider: cfg.TracerProvider, Instance: instance, DisableAfter: disableAfter,
			Retry: jobs.RetryPolicy{Base: cfg.RetryBase, Max: jobs.DefaultRetryPolicy.Max}, PublicURL: cfg.PublicURL},
			jobs.OrderAcceptance{}, jobs.ProductionPlanning{}, jobs.MaterialIssue{})
	}
	riverCfg := jobs.RiverConfig{
		ID:               instance,
		DispatchInterval: cfg.DispatchInterval,
		MaxWorkers:       dispatchWorkers,
		Retention:        cfg.Retention,
		Session:          d.Session,
		PollOnly:         d.Session == nil,
		Logger:           logger,
		TracerProvider:   cfg.TracerProvider,
	}
	// Background work on the work pool: River's client (its workers, fetch
	// and maintenance) and the dispatcher its workers call.
	dispatcher := newDispatcher(d.Work)
	riverClient, err := jobs.NewRiverClient(d.Work, dispatcher, riverCfg)
	if err != nil {
		return nil, err
	}
	// The API's side of the same, on the API pool, so that no request waits
	// for a connection behind the workers: a dispatcher for the admin
	// mutations (pause, redeliver, replay), which works no jobs, and an
	// insert-only River client (never started) that enqueues for it and the
	// outbox (InsertTx, in the request's transaction) and that River UI
	// reads through.
	apiDispatcher := newDispatcher(pool)
	apiRiver, err := jobs.NewRiverClient(pool, apiDispatcher, riverCfg)
	if err != nil {
		return nil, err
	}
	feed := db.NewFeedOn(d, logger)
	m.RegisterGauge("feed_subscriptions", "Live event-feed subscriptions open in this process.",
		func() float64 { return float64(feed.Subscribers()) })
	outbox := jobs.NewOutbox(pool, apiRiver)
	outbox.Metrics = m
	proxies, err := httpapi.ParseProxies(cfg.TrustedProxies)
	if err != nil {
		return nil, fmt.Errorf("trusted proxies: %w", err)
	}
	auth := &httpapi.Auth{Pool: pool, Logger: logger, Limit: &httpapi.AuthLimit{Proxies: proxies, Logger: logger}, MaxStreams: sseMaxStreams}
	res := &resolvers.Resolver{
		Tokens:     auth,
		Pool:       pool,
		Outbox:     outbox,
		Dispatcher: apiDispatcher,
		Feed:       feed,
		Logger:     logger,
		FeedBuffer: cfg.FeedBuffer,
		FeedMaxLag: cfg.FeedMaxLag,
	}
	ws := &wsgorilla.Implementation{
		CheckOrigin: checkOrigin,
		// ReadBufferSize stays 0 (256 bytes of its own per socket): the
		// handshake's net/http goroutine returns at connection_ack and
		// net/http's buffers for the connection go with it.
		WriteBufferSize:   wsWriteBuffer,
		PingInterval:      cmp.Or(cfg.KeepAlive, wsKeepAlive),
		ProtocolKeepAlive: true,
		InitTimeout:       cmp.Or(cfg.InitTimeout, wsInitTimeout),
		WriteTimeout:      cfg.FeedWriteTimeout,
		SendBuffer:        cmp.Or(cfg.SendBuffer, wsSendBuffer),
		OnMessage:         m.WebsocketMessage,
		Logger:            logger,
	}
	riverUI, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(apiRiver, nil),
		Logger:    logger,
		Prefix:    riverUIPath,
	})
	if err != nil {
		return nil, fmt.Errorf("river ui: %w", err)
	}
	a := &App{
		nats:            natsPub,
		riverUI:         riverUI,
		pool:            pool,
		database:        d,
		res:             res,
		auth:            auth,
		proxies:         proxies,
		dispatcher:      dispatcher,
		river:           riverClient,
		feed:            feed,
		ws:              ws,
		streams:         &sse.Streams{WriteTimeout: cfg.FeedWriteTimeout, SendBuffer: cmp.Or(cfg.SendBuffer, wsSendBuffer), Logger: logger},
		keepAlive:       cmp.Or(cfg.KeepAlive, wsKeepAlive),
		sharedFeed:      resolvers.NewSharedFeedPayloads(),
		logger:          logger,
		apiOnly:         cfg.APIOnly,
		shutdownTimeout: cmp.Or(cfg.ShutdownTimeout, defaultShutdownTimeout),
		metrics:         m,
		metricsAddr:     cfg.MetricsAddr,
	}
	if cfg.TracerProvider != nil {
		a.tracer = cfg.TracerProvider.Tracer("erp/app/httpapi")
	}
	// /metrics serves registry, which metrics records into.
	scrape := httpapi.RequireToken(cfg.MetricsToken, promhttp.HandlerFor(registry, promhttp.HandlerOpts{Registry: registry}))
	if a.metricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", scrape)
		a.metricsHandler = httpapi.RequestLog(logger, mux)
		scrape = nil
	}
	a.handler = httpapi.RequestLog(logger, a.routes(cfg, page, scrape))
	return a, nil
}

// Handler is every route of the application, request log included.
func (a *App) Handler() http.Handler { return a.handler }

// Feed is the application's live feed (LISTEN/NOTIFY and its
// subscriptions).
func (a *App) Feed() *db.Feed { return a.feed }

// Websockets is the websocket adapter: Open counts the sockets.
func (a *App) Websockets() *wsgorilla.Implementation { return a.ws }

// River is the application's River client, for enqueueing with
// jobs.NewOutbox.
func (a *App) River() *river.Client[pgx.Tx] { return a.river }

// instanceID names this process in River's tables ("which instance leads
// the sweep?"): host, pid and start time.
func instanceID() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	host = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, host)
	return fmt.Sprintf("%s_pid%d_%d", host, os.Getpid(), time.Now().Unix())
}

// ready reports whether this instance can serve: River started (unless
// API-only), the database answering, and its schema at the embedded
// migrations' head. That is one query: the migrations check until it first
// passes (then cached), an empty ping after.
func (a *App) ready(ctx context.Context) error {
	if !a.apiOnly && !a.riverStarted.Load() {
		return errors.New("river not started")
	}
	if a.migrated.Load() {
		if err := a.pool.Ping(ctx); err != nil {
			return errors.New("database unreachable")
		}
		return nil
	}
	if err := db.CheckMigrated(ctx, a.pool); err != nil {
		if errors.Is(err, db.ErrNotMigrated) {
			return err
		}
		return errors.New("database unreachable")
	}
	a.migrated.Store(true)
	return nil
}

// MetricsAddr is the address the metrics listener is bound to (METRICS_ADDR
// with its port resolved), once Start ran; empty when /metrics is served
// on the API's port.
func (a *App) MetricsAddr() string {
	if a.metricsBound == nil {
		return ""
	}
	return a.metricsBound.String()
}

// Start serves /metrics on METRICS_ADDR when set (first, so that a port in
// use fails the start before anything runs), and runs River (dispatch
// workers and, on the leader, the sweep; not on an API-only instance),
// River UI's services, the live feed and the watch that closes websockets
// of revoked or expired tokens.
func (a *App) Start(ctx context.Context) (err error) {
	if a.metricsAddr != "" {
		if a.metricsBound, a.stopMetrics, err = startListener("METRICS_ADDR", a.metricsAddr, a.metricsHandler, a.logger); err != nil {
			return err
		}
		defer func() {
			if err != nil {
				a.stopMetrics(ctx)
				a.stopMetrics = nil
			}
		}()
	}
	if err := a.dispatcher.Register(ctx); err != nil {
		return err
	}
	if !a.apiOnly {
		// Not ctx itself: River hard-stops (cancels running jobs) when its
		// start context ends, and the signal ends ctx; stop lets jobs
		// finish within the shutdown budget first.
		if err := a.river.Start(context.WithoutCancel(ctx)); err != nil {
			return fmt.Errorf("start river: %w", err)
		}
		a.riverStarted.Store(true)
	}
	uiCtx, stopUI := context.WithCancel(context.WithoutCancel(ctx))
	if err := a.riverUI.Start(uiCtx); err != nil {
		stopUI()
		return fmt.Errorf("start river ui: %w", err)
	}
	a.stopRiverUI = stopUI
	feedCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a.stopFeed, a.feedDone = cancel, make(chan struct{})
	go func() {
		defer close(a.feedDone)
		var wg sync.WaitGroup
		wg.Go(func() { a.auth.WatchTokens(feedCtx) })
		_ = a.feed.Run(feedCtx)
		wg.Wait()
	}()
	return nil
}

// Stop lets running jobs finish until ctx ends, then cancels them, and
// stops the feed.
func (a *App) Stop(ctx context.Context) {
	a.riverStarted.Store(false)
	if !a.apiOnly {
		if err := a.river.Stop(ctx); err != nil {
			a.logger.Warn("river did not stop in time, cancelling jobs", slog.String("error", err.Error()))
			hardCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = a.river.StopAndCancel(hardCtx)
		}
	}
	if a.stopFeed != nil {
		a.stopFeed()
		<-a.feedDone
	}
	if a.stopRiverUI != nil {
		a.stopRiverUI() // ends River UI's background services
	}
	if a.nats != nil {
		a.nats.Close() // after River: no publish is in flight
	}
	if a.stopMetrics != nil {
		a.stopMetrics(ctx)
	}
}

// Serve serves the handler on ln until ctx ends, then shuts down within
// the app's shutdown timeout: every websocket is closed with 1001 (going
// away) and its operations cancelled, every SSE stream is cut after a
// "server shutting down" error, in-flight HTTP requests are drained,
// and then, when after is not nil, after runs with what is left of the
// timeout (Serve, the subcommand, passes Stop; tests keep River and the
// feed running until their cleanup).
func (a *App) Serve(ctx context.Context, ln net.Listener, after func(context.Context)) error {
	// Requests (websockets included) live in baseCtx, cancelled at
	// shutdown so that nothing outlives it.
	baseCtx, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	// No ReadTimeout or WriteTimeout: either would cut every websocket
	// and SSE stream at that age. Each write of theirs has its own
	// deadline (FeedWriteTimeout) instead.
	srv := &http.Server{
		Handler:           a.handler,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
		ConnContext:       sse.ConnContext,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()

	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		a.logger.Info("shutting down", slog.Int("websockets", a.ws.Open()), slog.Int("sse_streams", a.streams.Open()))
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.shutdownTimeout)
	defer cancel()
	// SSE streams and websockets first: http.Server.Shutdown would wait
	// for streams until its deadline (they never go idle) and does not
	// see hijacked connections.
	a.streams.Shutdown(resolvers.CodedError("server shutting down: resume with eventProcessed(after: <last cursor>)", resolvers.CodeInternal))
	if wsErr := a.ws.Shutdown(shutdownCtx); wsErr != nil {
		a.logger.Warn("websocket shutdown", slog.String("error", wsErr.Error()))
	}
	// Then drain in-flight HTTP requests with their contexts alive, so a
	// mutation that already started commits and is answered; only what is
	// still running at the deadline is cancelled.
	if shutErr := srv.Shutdown(shutdownCtx); shutErr != nil {
		a.logger.Warn("http shutdown", slog.String("error", shutErr.Error()))
	}
	cancelBase()
	if after != nil {
		after(shutdownCtx)
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
