// Command erp is the ERP event backbone: a GraphQL API whose mutations write
// documents, their journal events and their River dispatch jobs in one
// transaction, dispatch the events to subscribers, and push processed events
// live to websocket subscribers.
//
// Subcommands: serve (the default), migrate, demo. Configuration comes from
// the environment, mirrored by flags; see usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	_ "time/tzdata" // TIME_ZONE resolves on machines without a zoneinfo database

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/vektah/gqlparser/v2/ast"

	"erp/db"
	"erp/db/localpg"
	"erp/graph"
	"erp/graph/wsgorilla"
	"erp/jobs"
	"erp/resolvers"
	"erp/web"
)

const (
	adminTokenFile  = "admin-token"
	shutdownTimeout = 15 * time.Second
	dispatchWorkers = 20
	// websocket keepalive: "ka" every interval for graphql-ws, ping/pong for
	// graphql-transport-ws (a peer silent for two intervals is dropped).
	wsKeepAlive   = 10 * time.Second
	wsInitTimeout = 10 * time.Second
	// maxRequestBody caps a GraphQL request body (bytes).
	maxRequestBody = 2 << 20
	// defaultTimeZone is where the seed's users are: the events page shows
	// times there unless TIME_ZONE says otherwise.
	defaultTimeZone = "Europe/Moscow"
)

// config is every setting, from the environment with flags mirroring it.
type config struct {
	DatabaseURL      string
	DataDir          string
	Addr             string
	DispatchInterval time.Duration
	AdminToken       string
	DemoURL          string
	DemoToken        string
	// TimeZone is the IANA zone the events page shows times in.
	TimeZone *time.Location
}

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stderr))
}

// run executes one subcommand and returns the process exit code.
func run(args []string, getenv func(string) string, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	cfg, err := parseConfig(cmd, args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "erp:", err)
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	switch cmd {
	case "serve":
		err = serve(ctx, cfg, logger, stderr)
	case "migrate":
		err = withDatabase(ctx, cfg, logger, func(context.Context, *pgxpool.Pool) error { return nil })
	case "demo":
		err = runDemo(ctx, cfg, logger)
	default:
		fmt.Fprintf(stderr, "erp: unknown subcommand %q (serve, migrate, demo)\n", cmd)
		return 2
	}
	if err != nil {
		logger.Error(cmd+" failed", slog.String("error", err.Error()))
		return 1
	}
	return 0
}

func parseConfig(cmd string, args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	envOr := func(key, def string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return def
	}
	fs := flag.NewFlagSet("erp "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	var interval, timeZone string
	fs.StringVar(&cfg.DatabaseURL, "database-url", getenv("DATABASE_URL"), "PostgreSQL URL (DATABASE_URL); empty starts a private PostgreSQL in DATA_DIR/pg")
	fs.StringVar(&cfg.DataDir, "data-dir", envOr("DATA_DIR", ".data"), "directory for the private PostgreSQL and admin-token (DATA_DIR)")
	fs.StringVar(&cfg.Addr, "addr", envOr("ADDR", ":8080"), "listen address (ADDR)")
	fs.StringVar(&interval, "dispatch-interval", envOr("DISPATCH_INTERVAL", "1m"), "period of the sweep of unprocessed events (DISPATCH_INTERVAL)")
	fs.StringVar(&cfg.AdminToken, "admin-token", getenv("ADMIN_TOKEN"), "token of the admin user (ADMIN_TOKEN); empty generates one into DATA_DIR/admin-token on first start")
	fs.StringVar(&cfg.DemoURL, "demo-url", envOr("DEMO_URL", "http://localhost:8080/graphql"), "GraphQL endpoint the demo drives (DEMO_URL)")
	fs.StringVar(&cfg.DemoToken, "demo-token", getenv("DEMO_TOKEN"), "token the demo uses (DEMO_TOKEN); empty reads DATA_DIR/admin-token")
	fs.StringVar(&timeZone, "time-zone", envOr("TIME_ZONE", defaultTimeZone), "IANA time zone the events page shows times in (TIME_ZONE)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	d, err := time.ParseDuration(interval)
	if err != nil || d < time.Second {
		return config{}, fmt.Errorf("DISPATCH_INTERVAL: want a duration of at least 1s like 1m or 30s, got %q", interval)
	}
	cfg.DispatchInterval = d
	if cfg.TimeZone, err = loadTimeZone(timeZone); err != nil {
		return config{}, err
	}
	return cfg, nil
}

// loadTimeZone resolves an IANA zone name for TIME_ZONE. "Local" is
// refused: the browser formats the times and knows no server-local zone.
func loadTimeZone(name string) (*time.Location, error) {
	loc, err := time.LoadLocation(name)
	if err != nil || name == "" || name == "Local" {
		return nil, fmt.Errorf("TIME_ZONE: want an IANA time zone like Europe/Moscow or UTC, got %q", name)
	}
	return loc, nil
}

// withDatabase opens the configured database (starting the private
// PostgreSQL when DATABASE_URL is empty), migrates it, runs fn, and closes
// everything in reverse order.
func withDatabase(ctx context.Context, cfg config, logger *slog.Logger, fn func(context.Context, *pgxpool.Pool) error) (err error) {
	url := cfg.DatabaseURL
	if url == "" {
		cluster, err := localpg.Start(ctx, localpg.Config{Dir: filepath.Join(cfg.DataDir, "pg"), DBName: "erp", Logger: logger})
		if err != nil {
			return err
		}
		defer func() {
			// Stop PostgreSQL last, even when ctx is already cancelled.
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
			defer cancel()
			if stopErr := cluster.Stop(stopCtx); stopErr != nil {
				err = errors.Join(err, stopErr)
			}
		}()
		url = cluster.URL()
		logger.Info("private PostgreSQL started", slog.String("dir", filepath.Join(cfg.DataDir, "pg")))
	}
	pool, err := db.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := db.Migrate(ctx, pool, logger); err != nil {
		return err
	}
	return fn(ctx, pool)
}

func serve(ctx context.Context, cfg config, logger *slog.Logger, stdout io.Writer) error {
	return withDatabase(ctx, cfg, logger, func(ctx context.Context, pool *pgxpool.Pool) error {
		if err := ensureAdminToken(ctx, pool, cfg, logger, stdout); err != nil {
			return err
		}
		a, err := newApp(pool, cfg.DispatchInterval, logger, withTimeZone(cfg.TimeZone))
		if err != nil {
			return err
		}
		if err := a.start(ctx); err != nil {
			return err
		}
		// Requests (websockets included) live in baseCtx, cancelled at
		// shutdown so that subscriptions end and their sockets close.
		baseCtx, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
		defer cancelBase()
		srv := &http.Server{
			Addr:              cfg.Addr,
			Handler:           a.handler,
			ReadHeaderTimeout: 10 * time.Second,
			BaseContext:       func(net.Listener) context.Context { return baseCtx },
		}
		ln, err := net.Listen("tcp", cfg.Addr)
		if err != nil {
			a.stop(ctx)
			return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
		}
		logger.Info("serving", slog.String("addr", ln.Addr().String()),
			slog.String("graphql", "/graphql"), slog.String("playground", "/playground"))
		errc := make(chan error, 1)
		go func() { errc <- srv.Serve(ln) }()

		select {
		case err = <-errc:
		case <-ctx.Done():
			logger.Info("shutting down")
		}
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		defer cancel()
		cancelBase()
		if shutErr := srv.Shutdown(shutdownCtx); shutErr != nil {
			logger.Warn("http shutdown", slog.String("error", shutErr.Error()))
		}
		a.stop(shutdownCtx)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		return err
	})
}

// ensureAdminToken gives the admin user its token: ADMIN_TOKEN if set, else
// the one in DATA_DIR/admin-token, else a new one, printed once and written
// there (mode 0600).
func ensureAdminToken(ctx context.Context, pool *pgxpool.Pool, cfg config, logger *slog.Logger, stdout io.Writer) error {
	token := cfg.AdminToken
	path := filepath.Join(cfg.DataDir, adminTokenFile)
	generated := false
	if token == "" {
		b, err := os.ReadFile(path)
		switch {
		case err == nil:
			token = strings.TrimSpace(string(b))
		case errors.Is(err, os.ErrNotExist):
			if token, err = db.NewToken(); err != nil {
				return err
			}
			generated = true
		default:
			return fmt.Errorf("read admin token: %w", err)
		}
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := db.EnsureAdmin(ctx, tx, token)
		return err
	}); err != nil {
		return err
	}
	if generated {
		if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", cfg.DataDir, err)
		}
		if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
			return fmt.Errorf("write admin token: %w", err)
		}
		fmt.Fprintf(stdout, "\nAdmin token (shown once, saved to %s):\n\n    %s\n\n", path, token)
		logger.Info("admin token generated", slog.String("file", path))
	}
	return nil
}

// app is the wired product on one pool: dispatcher, River, feed and the
// HTTP handler.
type app struct {
	pool       *pgxpool.Pool
	dispatcher *jobs.Dispatcher
	river      *river.Client[pgx.Tx]
	feed       *db.Feed
	handler    http.Handler
	logger     *slog.Logger

	stopFeed context.CancelFunc
	feedDone chan struct{}
}

// appOption changes a default of newApp.
type appOption func(*web.Config)

// withTimeZone shows the events page's times in loc (default Europe/Moscow).
func withTimeZone(loc *time.Location) appOption {
	return func(c *web.Config) { c.TimeZone = loc }
}

func newApp(pool *pgxpool.Pool, dispatchInterval time.Duration, logger *slog.Logger, opts ...appOption) (*app, error) {
	page := web.Config{}
	for _, o := range opts {
		o(&page)
	}
	if page.TimeZone == nil {
		loc, err := loadTimeZone(defaultTimeZone)
		if err != nil {
			return nil, err
		}
		page.TimeZone = loc
	}
	dispatcher := jobs.NewDispatcher(pool, jobs.DispatcherConfig{Logger: logger}, jobs.OrderAcceptance{})
	riverClient, err := jobs.NewRiverClient(pool, dispatcher, jobs.RiverConfig{
		ID:               instanceID(),
		DispatchInterval: dispatchInterval,
		MaxWorkers:       dispatchWorkers,
		Logger:           logger,
	})
	if err != nil {
		return nil, err
	}
	feed := db.NewFeed(pool, logger)
	res := &resolvers.Resolver{
		Pool:       pool,
		Outbox:     jobs.NewOutbox(pool, riverClient),
		Dispatcher: dispatcher,
		Feed:       feed,
		Logger:     logger,
	}
	return &app{
		pool:       pool,
		dispatcher: dispatcher,
		river:      riverClient,
		feed:       feed,
		handler:    newHandler(res, pool, page),
		logger:     logger,
	}, nil
}

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

func newHandler(res *resolvers.Resolver, pool *pgxpool.Pool, page web.Config) http.Handler {
	gql := handler.New(graph.NewExecutableSchema(graph.Config{Resolvers: res}))
	gql.AddTransport(transport.Websocket{
		Implementation:        wsgorilla.Implementation{},
		InitFunc:              res.WebsocketInit,
		InitTimeout:           wsInitTimeout,
		KeepAlivePingInterval: wsKeepAlive,
		PingPongInterval:      wsKeepAlive,
	})
	gql.AddTransport(transport.Options{})
	gql.AddTransport(transport.GET{})
	gql.AddTransport(transport.POST{})
	gql.SetQueryCache(lru.New[*ast.QueryDocument](1000))
	gql.Use(extension.Introspection{})
	gql.Use(extension.AutomaticPersistedQuery{Cache: lru.New[string](100)})
	gql.SetErrorPresenter(resolvers.ErrorPresenter(res.Logger))
	gql.SetRecoverFunc(resolvers.Recover)

	mux := http.NewServeMux()
	mux.Handle("/graphql", http.MaxBytesHandler(res.Authenticate(gql), maxRequestBody))
	web.Register(mux, page) // /events, /playground, /assets/, /config.json
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := pool.Ping(ctx); err != nil {
			http.Error(w, "database unreachable", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.Handle("GET /{$}", http.RedirectHandler("/events", http.StatusFound))
	return mux
}

// start runs River (dispatch workers and, on the leader, the sweep) and the
// live feed.
func (a *app) start(ctx context.Context) error {
	if err := a.dispatcher.Register(ctx); err != nil {
		return err
	}
	if err := a.river.Start(ctx); err != nil {
		return fmt.Errorf("start river: %w", err)
	}
	feedCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a.stopFeed, a.feedDone = cancel, make(chan struct{})
	go func() {
		defer close(a.feedDone)
		_ = a.feed.Run(feedCtx)
	}()
	return nil
}

// stop lets running jobs finish until ctx ends, then cancels them, and
// stops the feed.
func (a *app) stop(ctx context.Context) {
	if err := a.river.Stop(ctx); err != nil {
		a.logger.Warn("river did not stop in time, cancelling jobs", slog.String("error", err.Error()))
		hardCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = a.river.StopAndCancel(hardCtx)
	}
	if a.stopFeed != nil {
		a.stopFeed()
		<-a.feedDone
	}
}
