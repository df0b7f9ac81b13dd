// Command erp is the ERP event backbone: a GraphQL API whose mutations write
// documents, their journal events and their River dispatch jobs in one
// transaction, dispatch the events to subscribers, and push processed events
// live to websocket subscribers.
//
// Subcommands: serve (the default), migrate, demo. Configuration comes from
// the environment, mirrored by flags; see usage.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	_ "time/tzdata"
	"unicode" // TIME_ZONE resolves on machines without a zoneinfo database

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/riverqueue/river"
	"github.com/rs/cors"
	"github.com/vektah/gqlparser/v2/ast"
	"riverqueue.com/riverui"

	"erp/db"
	"erp/db/localpg"
	"erp/demo"
	"erp/graph"
	"erp/graph/model"
	"erp/graph/wsgorilla"
	"erp/jobs"
	"erp/metrics"
	"erp/resolvers"
	"erp/web"
)

const (
	adminTokenFile = "admin-token"
	// shutdownTimeout is SHUTDOWN_TIMEOUT's default: how long a shutdown
	// waits for sockets, requests and running jobs.
	shutdownTimeout = 15 * time.Second
	// riverUIPath is where River's web UI is mounted, for admins signed in
	// at riverUIPath/login.
	riverUIPath = "/riverui"
	// readyTimeout bounds /readyz's one database query.
	readyTimeout    = 2 * time.Second
	dispatchWorkers = 20
	// wsKeepAlive is the websocket keepalive period: "ka" messages for
	// graphql-ws, ping messages for graphql-transport-ws, and websocket ping
	// frames for both (all sent by wsgorilla); a peer from which nothing
	// arrived for two periods is dropped.
	wsKeepAlive = 10 * time.Second
	// wsInitTimeout is how long a socket may wait to send connection_init
	// (then close 4408).
	wsInitTimeout = 10 * time.Second
	// wsReadLimit caps one incoming websocket message, in bytes (then close
	// 1009); a subscription request is far smaller.
	wsReadLimit = 64 << 10
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
	AllowedOrigins   []string
	// Introspection and Playground are on for local runs; production
	// switches them off.
	Introspection, Playground bool
	DemoURL                   string
	DemoToken                 string
	// The user subcommand's flags.
	UserLogin, UserName, UserRole, TokenName string
	TokenTTL                                 time.Duration
	// TimeZone is the IANA zone the events page shows times in.
	TimeZone *time.Location
	// ShutdownTimeout bounds the graceful shutdown (SHUTDOWN_TIMEOUT).
	ShutdownTimeout time.Duration
	// Retention is how long delivered delivery records and River's finished
	// jobs are kept (RETENTION); the journal is kept forever.
	Retention time.Duration
	// LogFormat is "json" or "text" (LOG_FORMAT); empty: text when stderr
	// is a terminal, else json.
	LogFormat string
	// LogLevel is the least level logged (LOG_LEVEL).
	LogLevel slog.Level
	// PprofAddr is the loopback address of the profiling listener
	// (PPROF_ADDR); empty: none.
	PprofAddr string
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
	logger := newLogger(cfg, stderr)
	ctx, stop := notifyShutdown(context.Background(), logger)
	defer stop()

	switch cmd {
	case "serve":
		err = serve(ctx, cfg, logger, stderr)
	case "migrate":
		err = withDatabase(ctx, cfg, logger, func(context.Context, *pgxpool.Pool) error { return nil })
	case "user":
		err = withDatabase(ctx, cfg, logger, func(ctx context.Context, pool *pgxpool.Pool) error {
			return createUserOffline(ctx, pool, cfg, logger, os.Stdout)
		})
	case "demo":
		err = demo.Run(ctx, demo.Config{URL: cfg.DemoURL, Token: cfg.DemoToken, DataDir: cfg.DataDir}, logger)
	default:
		fmt.Fprintf(stderr, "erp: unknown subcommand %q (serve, migrate, demo, user)\n", cmd)
		return 2
	}
	if err != nil {
		logger.Error(cmd+" failed", slog.String("error", err.Error()))
		return 1
	}
	return 0
}

// newLogger is the process's logger: JSON or text by cfg.LogFormat (empty:
// text on a terminal, JSON otherwise) at cfg.LogLevel.
func newLogger(cfg config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.LogLevel}
	format := cfg.LogFormat
	if format == "" {
		format = "json"
		if f, ok := w.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				format = "text"
			}
		}
	}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// notifyShutdown returns a context cancelled by the first SIGTERM or
// SIGINT; a second one exits the process at once with code 1.
func notifyShutdown(parent context.Context, logger *slog.Logger) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	sigc := make(chan os.Signal, 2)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-sigc:
			logger.Info("signal received, shutting down", slog.String("signal", sig.String()))
			cancel()
		case <-done:
			return
		}
		select {
		case sig := <-sigc:
			logger.Error("second signal, exiting without finishing the shutdown", slog.String("signal", sig.String()))
			os.Exit(1)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigc)
		close(done)
		cancel()
	}
}

// parseConfig reads the settings of subcommand cmd from args and the
// environment and validates every one; the error names each bad setting,
// one line each.
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
	var interval, origins, timeZone, shutdown, retention, logFormat, logLevel, introspection, playground string
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: erp %s [flags]\n\nEvery flag mirrors the environment variable named in its text; a flag wins over the variable.\nDefaults shown are what applies now (the variable's value when set).\n\n", cmd)
		fs.PrintDefaults()
	}
	// Secrets (DATABASE_URL may hold a password, the tokens) are read from
	// the environment after parsing, so that -help never prints them as
	// defaults.
	fs.StringVar(&cfg.DatabaseURL, "database-url", "", "PostgreSQL URL (DATABASE_URL); empty starts a private PostgreSQL in DATA_DIR/pg")
	fs.StringVar(&cfg.DataDir, "data-dir", envOr("DATA_DIR", ".data"), "directory for the private PostgreSQL and admin-token (DATA_DIR)")
	fs.StringVar(&cfg.Addr, "addr", envOr("ADDR", ":8080"), "listen address (ADDR)")
	fs.StringVar(&interval, "dispatch-interval", envOr("DISPATCH_INTERVAL", "1m"), "period of the sweep of unprocessed events (DISPATCH_INTERVAL)")
	fs.StringVar(&cfg.AdminToken, "admin-token", "", "token of the admin user (ADMIN_TOKEN); empty generates one into DATA_DIR/admin-token on first start")
	fs.StringVar(&origins, "allowed-origins", getenv("ALLOWED_ORIGINS"), "comma-separated browser origins (https://host[:port], or *) allowed to call /graphql (CORS) and open websockets besides the server's own (ALLOWED_ORIGINS); clients without Origin are always allowed")
	fs.StringVar(&introspection, "introspection", envOr("INTROSPECTION", "true"), "answer GraphQL introspection queries (INTROSPECTION=true|false)")
	fs.StringVar(&playground, "playground", envOr("PLAYGROUND", "true"), "serve the GraphiQL playground at /playground (PLAYGROUND=true|false)")
	fs.StringVar(&cfg.DemoURL, "demo-url", envOr("DEMO_URL", "http://localhost:8080/graphql"), "GraphQL endpoint the demo drives (DEMO_URL)")
	fs.StringVar(&cfg.DemoToken, "demo-token", "", "token the demo uses (DEMO_TOKEN); empty reads DATA_DIR/admin-token")
	if cmd == "user" {
		fs.StringVar(&cfg.UserLogin, "login", "", "user: login of the user to create (or reuse)")
		fs.StringVar(&cfg.UserName, "name", "", "user: display name (default: the login)")
		fs.StringVar(&cfg.UserRole, "role", db.RoleViewer, "user: role, one of "+strings.Join(db.Roles, ", "))
		fs.StringVar(&cfg.TokenName, "token-name", "cli", "user: a label for the token")
		fs.DurationVar(&cfg.TokenTTL, "token-ttl", 0, "user: token lifetime, e.g. 720h; 0 never expires")
	}
	fs.StringVar(&timeZone, "time-zone", envOr("TIME_ZONE", defaultTimeZone), "IANA time zone the events page shows times in (TIME_ZONE)")
	fs.StringVar(&shutdown, "shutdown-timeout", envOr("SHUTDOWN_TIMEOUT", shutdownTimeout.String()), "how long a shutdown waits for websockets, requests and running jobs (SHUTDOWN_TIMEOUT)")
	fs.StringVar(&retention, "retention", envOr("RETENTION", "168h"), "how long delivered delivery records and River's finished jobs are kept, at least 1h (RETENTION); the journal is kept forever")
	fs.StringVar(&logFormat, "log-format", getenv("LOG_FORMAT"), "log format, json or text (LOG_FORMAT); empty: text when stderr is a terminal, else json")
	fs.StringVar(&logLevel, "log-level", envOr("LOG_LEVEL", "info"), "least level logged: debug, info, warn or error (LOG_LEVEL)")
	fs.StringVar(&cfg.PprofAddr, "pprof-addr", getenv("PPROF_ADDR"), "loopback host:port serving net/http/pprof at /debug/pprof/ (PPROF_ADDR), e.g. 127.0.0.1:6060; empty: off")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, v := range map[string]*string{"database-url": &cfg.DatabaseURL, "admin-token": &cfg.AdminToken, "demo-token": &cfg.DemoToken} {
		if !set[name] {
			*v = getenv(strings.ToUpper(strings.ReplaceAll(name, "-", "_")))
		}
	}
	if cmd == "user" && cfg.UserLogin == "" {
		return config{}, errors.New("user: -login is required")
	}
	var errs []error
	bad := func(setting, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{setting}, args...)...))
	}
	if cfg.DatabaseURL != "" {
		if _, err := pgxpool.ParseConfig(cfg.DatabaseURL); err != nil {
			// The parse error may quote the URL, password included.
			bad("DATABASE_URL", "want a PostgreSQL URL like postgres://user:password@host:5432/erp or key=value pairs")
		}
	}
	if strings.TrimSpace(cfg.DataDir) == "" {
		bad("DATA_DIR", "want a directory, got an empty value")
	}
	if _, port, err := net.SplitHostPort(cfg.Addr); err != nil || !validPort(port) {
		bad("ADDR", "want host:port or :port like :8080, got %q", cfg.Addr)
	}
	d, err := time.ParseDuration(interval)
	if err != nil || d < time.Second {
		bad("DISPATCH_INTERVAL", "want a duration of at least 1s like 1m or 30s, got %q", interval)
	}
	cfg.DispatchInterval = d
	if strings.ContainsFunc(cfg.AdminToken, unicode.IsSpace) {
		bad("ADMIN_TOKEN", "want a token without spaces")
	}
	for _, o := range strings.Split(origins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			cfg.AllowedOrigins = append(cfg.AllowedOrigins, o)
		}
	}
	if _, err := wsgorilla.AllowOrigins(cfg.AllowedOrigins); err != nil {
		bad("ALLOWED_ORIGINS", "%v", err)
	}
	if u, err := url.Parse(cfg.DemoURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("DEMO_URL", "want an http(s) URL like http://localhost:8080/graphql, got %q", cfg.DemoURL)
	}
	if strings.ContainsFunc(cfg.DemoToken, unicode.IsSpace) {
		bad("DEMO_TOKEN", "want a token without spaces")
	}
	if cfg.TimeZone, err = loadTimeZone(timeZone); err != nil {
		errs = append(errs, err)
	}
	if cfg.ShutdownTimeout, err = time.ParseDuration(shutdown); err != nil || cfg.ShutdownTimeout < time.Second {
		bad("SHUTDOWN_TIMEOUT", "want a duration of at least 1s like 15s or 1m, got %q", shutdown)
	}
	if cfg.Retention, err = time.ParseDuration(retention); err != nil || cfg.Retention < time.Hour {
		bad("RETENTION", "want a duration of at least 1h like 168h (7 days), got %q", retention)
	}
	switch logFormat {
	case "", "json", "text":
		cfg.LogFormat = logFormat
	default:
		bad("LOG_FORMAT", "want json or text, got %q", logFormat)
	}
	if err := cfg.LogLevel.UnmarshalText([]byte(logLevel)); err != nil {
		bad("LOG_LEVEL", "want debug, info, warn or error, got %q", logLevel)
	}
	if cfg.Introspection, err = strconv.ParseBool(introspection); err != nil {
		bad("INTROSPECTION", "want true or false, got %q", introspection)
	}
	if cfg.Playground, err = strconv.ParseBool(playground); err != nil {
		bad("PLAYGROUND", "want true or false, got %q", playground)
	}
	if cmd == "user" {
		// Checked here, before a local PostgreSQL is started for nothing.
		if !slices.Contains(db.Roles, cfg.UserRole) {
			bad("-role", "want one of %s, got %q", strings.Join(db.Roles, ", "), cfg.UserRole)
		}
		if cfg.TokenTTL < 0 {
			bad("-token-ttl", "want a lifetime like 720h, or 0 for a token that never expires, got %s", cfg.TokenTTL)
		}
	}
	if cfg.PprofAddr != "" && !loopbackAddr(cfg.PprofAddr) {
		bad("PPROF_ADDR", "want a loopback host:port like 127.0.0.1:6060 or localhost:6060 (profiles must not reach the network), got %q", cfg.PprofAddr)
	}
	if len(errs) > 0 {
		return config{}, errors.Join(errs...)
	}
	return cfg, nil
}

// validPort reports a TCP port number, 0 (any free port) included.
func validPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 0 && n <= 65535
}

// loopbackAddr reports a host:port whose host is localhost or a loopback
// IP: an empty host would listen on every interface.
func loopbackAddr(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || !validPort(port) {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
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
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cmp.Or(cfg.ShutdownTimeout, shutdownTimeout))
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
		a, err := newApp(pool, appOptions{
			DispatchInterval: cfg.DispatchInterval,
			AllowedOrigins:   cfg.AllowedOrigins,
			TimeZone:         cfg.TimeZone,
			ShutdownTimeout:  cfg.ShutdownTimeout,
			Retention:        cfg.Retention,
			NoIntrospection:  !cfg.Introspection,
			NoPlayground:     !cfg.Playground,
		}, logger)
		if err != nil {
			return err
		}
		if err := a.start(ctx); err != nil {
			return err
		}
		ln, err := net.Listen("tcp", cfg.Addr)
		if err != nil {
			a.stop(ctx)
			return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
		}
		if cfg.PprofAddr != "" {
			stopPprof, err := startPprof(cfg.PprofAddr, logger)
			if err != nil {
				ln.Close()
				a.stop(ctx)
				return err
			}
			defer func() {
				stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
				defer cancel()
				stopPprof(stopCtx)
			}()
		}
		logger.Info("serving", slog.String("addr", ln.Addr().String()),
			slog.String("graphql", "/graphql"), slog.String("playground", "/playground"))
		err = a.serveHTTP(ctx, ln, a.stop)
		logger.Info("stopped serving; closing the pool")
		return err
	})
}

// serveHTTP serves the handler on ln until ctx ends, then shuts down within
// the app's shutdown timeout: every websocket is closed with 1001 (going
// away) and its operations cancelled, in-flight HTTP requests are drained,
// and then, when after is not nil, after runs with what is left of the
// timeout (serve stops River and the feed there; tests keep them).
func (a *app) serveHTTP(ctx context.Context, ln net.Listener, after func(context.Context)) error {
	// Requests (websockets included) live in baseCtx, cancelled at
	// shutdown so that nothing outlives it.
	baseCtx, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	srv := &http.Server{
		Handler:           a.handler,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()

	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		a.logger.Info("shutting down", slog.Int("websockets", a.ws.Open()))
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.shutdownTimeout)
	defer cancel()
	// Websockets first: http.Server.Shutdown does not see hijacked
	// connections.
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

// createUserOffline is the user subcommand: it creates the user (unless it
// exists) and issues a token, printed once, without a running server. The
// journal events it writes are dispatched when a server runs.
func createUserOffline(ctx context.Context, pool *pgxpool.Pool, cfg config, logger *slog.Logger, stdout io.Writer) error {
	dispatcher := jobs.NewDispatcher(pool, jobs.DispatcherConfig{Logger: logger})
	client, err := jobs.NewRiverClient(pool, dispatcher, jobs.RiverConfig{DispatchInterval: time.Minute, MaxWorkers: 1, Logger: logger})
	if err != nil {
		return err
	}
	outbox := jobs.NewOutbox(pool, client)
	name := cmp.Or(cfg.UserName, cfg.UserLogin)
	var expires *time.Time
	if cfg.TokenTTL > 0 {
		t := time.Now().Add(cfg.TokenTTL)
		expires = &t
	}
	token, err := jobs.Write(ctx, outbox, func(tx pgx.Tx) (string, []db.Event, error) {
		var events []db.Event
		if _, err := db.UserByLogin(ctx, tx, cfg.UserLogin); errors.Is(err, db.ErrNotFound) {
			_, created, err := db.CreateUser(ctx, tx, nil, db.UserInput{Login: cfg.UserLogin, DisplayName: name, Role: cfg.UserRole})
			if err != nil {
				return "", nil, err
			}
			events = append(events, created...)
		} else if err != nil {
			return "", nil, err
		}
		token, _, issued, err := db.IssueToken(ctx, tx, nil, cfg.UserLogin, cfg.TokenName, expires)
		return token, append(events, issued...), err
	})
	if err != nil {
		return fmt.Errorf("create user %s: %w", cfg.UserLogin, err)
	}
	fmt.Fprintf(stdout, "Token for %s (shown once):\n\n    %s\n\n", cfg.UserLogin, token)
	return nil
}

// app is the wired product on one pool: dispatcher, River, feed, the
// websocket adapter and the HTTP handler.
type app struct {
	pool            *pgxpool.Pool
	res             *resolvers.Resolver
	dispatcher      *jobs.Dispatcher
	river           *river.Client[pgx.Tx]
	feed            *db.Feed
	ws              *wsgorilla.Implementation
	handler         http.Handler
	logger          *slog.Logger
	apiOnly         bool
	shutdownTimeout time.Duration
	// metrics records into registry, which /metrics serves.
	metrics  *metrics.Metrics
	registry *prometheus.Registry
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
}

// appOptions configure newApp; zero fields take the defaults.
type appOptions struct {
	// DispatchInterval is the period of the sweep (DISPATCH_INTERVAL).
	DispatchInterval time.Duration
	// AllowedOrigins are browser origins allowed to open websockets besides
	// the server's own (ALLOWED_ORIGINS), as wsgorilla.AllowOrigins takes
	// them.
	AllowedOrigins []string
	// KeepAlive is the websocket keepalive period (default wsKeepAlive).
	KeepAlive time.Duration
	// InitTimeout is the time a socket has to send connection_init
	// (default wsInitTimeout).
	InitTimeout time.Duration
	// ShutdownTimeout bounds serveHTTP's shutdown (default shutdownTimeout).
	ShutdownTimeout time.Duration
	// APIOnly makes an instance that serves the API and the live feed but
	// works no River jobs: it only enqueues them for the other instances.
	APIOnly bool
	// FeedBuffer is how far, in events, a live subscriber may fall behind
	// before its socket is closed (default resolvers.DefaultFeedBuffer).
	FeedBuffer int
	// TimeZone is where the events page shows times (default
	// Europe/Moscow).
	TimeZone *time.Location
	// NoIntrospection refuses introspection queries; NoPlayground leaves
	// /playground out (production).
	NoIntrospection, NoPlayground bool
	// Retention is RETENTION (default jobs.DefaultRetention).
	Retention time.Duration
}

func newApp(pool *pgxpool.Pool, opts appOptions, logger *slog.Logger) (*app, error) {
	opts.KeepAlive = cmp.Or(opts.KeepAlive, wsKeepAlive)
	opts.InitTimeout = cmp.Or(opts.InitTimeout, wsInitTimeout)
	opts.ShutdownTimeout = cmp.Or(opts.ShutdownTimeout, shutdownTimeout)
	checkOrigin, err := wsgorilla.AllowOrigins(opts.AllowedOrigins)
	if err != nil {
		return nil, err
	}
	page := web.Config{TimeZone: opts.TimeZone, NoPlayground: opts.NoPlayground}
	if page.TimeZone == nil {
		if page.TimeZone, err = loadTimeZone(defaultTimeZone); err != nil {
			return nil, err
		}
	}
	registry := prometheus.NewRegistry()
	m := metrics.New(registry)
	m.RegisterDatabase(pool)
	dispatcher := jobs.NewDispatcher(pool, jobs.DispatcherConfig{Logger: logger, Metrics: m},
		jobs.OrderAcceptance{}, jobs.ProductionPlanning{}, jobs.MaterialIssue{})
	riverClient, err := jobs.NewRiverClient(pool, dispatcher, jobs.RiverConfig{
		ID:               instanceID(),
		DispatchInterval: opts.DispatchInterval,
		MaxWorkers:       dispatchWorkers,
		Retention:        opts.Retention,
		Logger:           logger,
	})
	if err != nil {
		return nil, err
	}
	feed := db.NewFeed(pool, logger)
	m.RegisterGauge("feed_subscriptions", "Live event-feed subscriptions open in this process.",
		func() float64 { return float64(feed.Subscribers()) })
	outbox := jobs.NewOutbox(pool, riverClient)
	outbox.Metrics = m
	res := &resolvers.Resolver{
		Pool:       pool,
		Outbox:     outbox,
		Dispatcher: dispatcher,
		Feed:       feed,
		Logger:     logger,
		FeedBuffer: opts.FeedBuffer,
	}
	ws := &wsgorilla.Implementation{
		CheckOrigin: checkOrigin,
		// ReadBufferSize stays 0 (256 bytes of its own per socket): the
		// handshake's net/http goroutine returns at connection_ack and
		// net/http's buffers for the connection go with it.
		WriteBufferSize:   wsWriteBuffer,
		PingInterval:      opts.KeepAlive,
		ProtocolKeepAlive: true,
		InitTimeout:       opts.InitTimeout,
		SendBuffer:        wsSendBuffer,
		OnMessage:         m.WebsocketMessage,
	}
	riverUI, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(riverClient, nil),
		Logger:    logger,
		Prefix:    riverUIPath,
	})
	if err != nil {
		return nil, fmt.Errorf("river ui: %w", err)
	}
	a := &app{
		riverUI:         riverUI,
		pool:            pool,
		res:             res,
		dispatcher:      dispatcher,
		river:           riverClient,
		feed:            feed,
		ws:              ws,
		logger:          logger,
		apiOnly:         opts.APIOnly,
		shutdownTimeout: opts.ShutdownTimeout,
		metrics:         m,
		registry:        registry,
	}
	a.handler = resolvers.RequestLog(logger, a.newHandler(res, opts, page))
	return a, nil
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

// newHandler routes the endpoints. Websockets run on ws, which checks the
// Origin before the upgrade and owns the socket rules (init timeout 4408,
// duplicate id 4409, dead peers, 1001 at shutdown); gqlgen's transport
// adds the keepalive of each subprotocol.
//
// Operations: /healthz (the process is up), /readyz (see ready), /metrics
// (Prometheus, this app's own registry).
func (a *app) newHandler(res *resolvers.Resolver, opts appOptions, page web.Config) http.Handler {
	ws := a.ws
	cfg := graph.Config{
		Resolvers:  res,
		Directives: graph.DirectiveRoot{Allow: res.Allow},
	}
	// A page costs its size times what each row selects, so that many
	// aliases of events(first: 500) add up against maxComplexity.
	perPage := func(child int, first *int) int {
		n := 50
		if first != nil {
			n = max(*first, 1)
		}
		return 1 + child*n
	}
	cfg.Complexity.Query.Events = func(child int, _ *db.EventFilter, first *int, _ *string) int { return perPage(child, first) }
	cfg.Complexity.Query.Deliveries = func(child int, _ *model.DeliveryFilter, first *int, _ *string) int { return perPage(child, first) }
	cfg.Complexity.Query.DeadDeliveries = func(child int, _ *string, first *int, _ *string) int { return perPage(child, first) }
	gql := handler.New(graph.NewExecutableSchema(cfg))
	readLimit := int64(wsReadLimit)
	gql.AddTransport(transport.Websocket{
		Implementation: ws,
		InitFunc:       res.WebsocketInit,
		// InitTimeout stays 0: ws closes a silent socket with 4408 where
		// gqlgen would use 1002. KeepAlivePingInterval and
		// PingPongInterval stay 0: ws sends both subprotocols' keepalive
		// messages with its ping frames (ProtocolKeepAlive), on a timer
		// rather than two goroutines per socket.
		PayloadReadLimit: &readLimit,
	})
	gql.AddTransport(transport.Options{})
	gql.AddTransport(transport.GET{})
	gql.AddTransport(transport.POST{})
	gql.SetQueryCache(lru.New[*ast.QueryDocument](1000))
	gql.SetParserTokenLimit(maxQueryTokens)
	gql.Use(extension.FixedComplexityLimit(maxComplexity))
	gql.Use(resolvers.ShapeLimit{MaxDepth: maxDepth, MaxFields: maxFields})
	gql.Use(resolvers.RolesUpfront{})
	gql.Use(resolvers.Loaders{Pool: res.Pool})
	if !opts.NoIntrospection {
		gql.Use(extension.Introspection{})
	}
	gql.Use(extension.AutomaticPersistedQuery{Cache: lru.New[string](100)})
	gql.Use(resolvers.Observer{Metrics: a.metrics})
	// Inside Observer, so that shared payloads still get their request id.
	gql.Use(resolvers.NewSharedFeedPayloads())
	gql.SetErrorPresenter(resolvers.ErrorPresenter(res.Logger))
	gql.SetRecoverFunc(resolvers.Recover)

	mux := http.NewServeMux()
	var api http.Handler = ws.Handler(resolvers.LimitBody(maxRequestBody, res.Authenticate(gql)))
	if len(opts.AllowedOrigins) > 0 {
		// Browsers on the allowed origins may call the API cross-origin
		// (with a bearer token, never cookies). With no list, no CORS
		// headers at all: browsers then keep to same-origin. (rs/cors reads
		// an empty list as "*", hence the guard.)
		api = cors.New(cors.Options{
			AllowedOrigins: opts.AllowedOrigins,
			AllowedMethods: []string{http.MethodGet, http.MethodPost},
			AllowedHeaders: []string{"Authorization", "Content-Type", "Accept"},
			MaxAge:         600,
		}).Handler(api)
	}
	mux.Handle("/graphql", api)
	web.Register(mux, page) // /events, /playground, /assets/, /config.json
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		if err := a.ready(ctx); err != nil {
			a.logger.WarnContext(ctx, "not ready", slog.String("error", err.Error()))
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	sessions := &resolvers.AdminSessions{Resolver: res, Path: riverUIPath}
	mux.Handle(riverUIPath+"/login", sessions.Login())
	mux.Handle("POST "+riverUIPath+"/logout", sessions.Logout())
	mux.Handle(riverUIPath+"/", sessions.Require(a.riverUI))
	mux.Handle("GET "+riverUIPath, http.RedirectHandler(riverUIPath+"/", http.StatusFound))
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.registry, promhttp.HandlerOpts{Registry: a.registry}))
	mux.Handle("GET /{$}", http.RedirectHandler("/events", http.StatusFound))
	return mux
}

// ready reports whether this instance can serve: River started (unless
// API-only), the database answering, and its schema at the embedded
// migrations' head. That is one query: the migrations check until it first
// passes (then cached), an empty ping after.
func (a *app) ready(ctx context.Context) error {
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

// start runs River (dispatch workers and, on the leader, the sweep; not
// on an API-only instance) and the live feed.
func (a *app) start(ctx context.Context) error {
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
		wg.Go(func() { a.res.WatchTokens(feedCtx) })
		_ = a.feed.Run(feedCtx)
		wg.Wait()
	}()
	return nil
}

// stop lets running jobs finish until ctx ends, then cancels them, and
// stops the feed.
func (a *app) stop(ctx context.Context) {
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
}
