package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"erp/app/config"
	"erp/db"
	"erp/db/localpg"
	"erp/jobs"
)

// AdminTokenFile is the file in DATA_DIR that holds the admin's token when
// ADMIN_TOKEN is empty: written by the first Serve, read by the demo.
const AdminTokenFile = "admin-token"

// Serve is the serve subcommand: it opens the database (see Migrate),
// gives the admin its token, starts the application, serves cfg.Addr (and
// the profiling listener when cfg.PprofAddr is set) until ctx ends, and
// shuts down in order: sockets and requests, then River and the feed, then
// the pools and the private PostgreSQL. stdout receives a generated admin
// token, once.
func Serve(ctx context.Context, cfg config.Config, logger *slog.Logger, stdout io.Writer) error {
	tp, stopTracing, err := StartTracing(ctx, logger)
	if err != nil {
		return err
	}
	var traced []func(*pgxpool.Config)
	if tp != nil {
		cfg.TracerProvider = tp
		traced = append(traced, db.TraceStatements(tp))
	}
	defer func() {
		// Normally done in the shutdown below; this covers a failed start.
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = stopTracing(stopCtx)
	}()
	return withDatabase(ctx, cfg, logger, traced, func(ctx context.Context, d *db.Database) error {
		if err := ensureAdminToken(ctx, d.Pool, cfg, logger, stdout); err != nil {
			return err
		}
		a, err := New(d, cfg, logger)
		if err != nil {
			return err
		}
		if err := a.Start(ctx); err != nil {
			return err
		}
		ln, err := net.Listen("tcp", cfg.Addr)
		if err != nil {
			a.Stop(ctx)
			return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
		}
		if cfg.PprofAddr != "" {
			stopPprof, err := startPprof(cfg.PprofAddr, logger)
			if err != nil {
				_ = ln.Close()
				a.Stop(ctx)
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
		err = a.Serve(ctx, ln, func(ctx context.Context) {
			a.Stop(ctx)
			// After River: the spans of the jobs it let finish are flushed.
			if err := stopTracing(ctx); err != nil {
				logger.Warn("tracing shutdown", slog.String("error", err.Error()))
			}
		})
		logger.Info("stopped serving; closing the pools")
		return err
	})
}

// Migrate is the migrate subcommand: it opens the configured database
// (starting the private PostgreSQL in DATA_DIR/pg when DATABASE_URL is
// empty), migrates it to the embedded migrations' head, and closes it.
func Migrate(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	return withDatabase(ctx, cfg, logger, nil, func(context.Context, *db.Database) error { return nil })
}

// CreateUser is the user subcommand: it creates the user cfg.User names
// (unless the login exists) and issues a token, printed once to stdout,
// without a running server. The journal events it writes are dispatched
// when a server runs.
func CreateUser(ctx context.Context, cfg config.Config, logger *slog.Logger, stdout io.Writer) error {
	return withDatabase(ctx, cfg, logger, nil, func(ctx context.Context, d *db.Database) error {
		return createUser(ctx, d.Pool, cfg.User, logger, stdout)
	})
}

// withDatabase opens the configured database (starting the private
// PostgreSQL when DATABASE_URL is empty; through a transaction pooler when
// DATABASE_URL is one, see db.Open; its pools sized by PoolSizes within
// DATABASE_URL's pool_max_conns; configure applies to both),
// migrates it, runs fn, and closes everything in reverse order.
func withDatabase(ctx context.Context, cfg config.Config, logger *slog.Logger, configure []func(*pgxpool.Config), fn func(context.Context, *db.Database) error) (err error) {
	url := cfg.DatabaseURL
	if url == "" {
		cluster, err := localpg.Start(ctx, localpg.Config{Dir: filepath.Join(cfg.DataDir, "pg"), DBName: "erp", Logger: logger})
		if err != nil {
			return err
		}
		defer func() {
			// Stop PostgreSQL last, even when ctx is already cancelled.
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cmp.Or(cfg.ShutdownTimeout, defaultShutdownTimeout))
			defer cancel()
			if stopErr := cluster.Stop(stopCtx); stopErr != nil {
				err = errors.Join(err, stopErr)
			}
		}()
		url = cluster.URL()
		logger.Info("private PostgreSQL started", slog.String("dir", filepath.Join(cfg.DataDir, "pg")))
	}
	d, err := db.Open(ctx, url, cfg.DatabaseDirectURL, PoolSizes(cfg), configure...)
	if err != nil {
		return err
	}
	defer d.Close()
	logger.LogAttrs(ctx, slog.LevelInfo, "database connected", d.LogAttrs()...)
	if err := d.Migrate(ctx, logger); err != nil {
		return err
	}
	return fn(ctx, d)
}

// ensureAdminToken gives the admin user its token: ADMIN_TOKEN if set, else
// the one in DATA_DIR/admin-token, else a new one, printed once and written
// there (mode 0600).
func ensureAdminToken(ctx context.Context, pool *pgxpool.Pool, cfg config.Config, logger *slog.Logger, stdout io.Writer) error {
	token := cfg.AdminToken
	path := filepath.Join(cfg.DataDir, AdminTokenFile)
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

// createUser creates the user u names (unless it exists) and issues its
// token, printed once.
func createUser(ctx context.Context, pool *pgxpool.Pool, cfg config.User, logger *slog.Logger, stdout io.Writer) error {
	dispatcher := jobs.NewDispatcher(pool, jobs.DispatcherConfig{Logger: logger})
	client, err := jobs.NewRiverClient(pool, dispatcher, jobs.RiverConfig{DispatchInterval: time.Minute, MaxWorkers: 1, Logger: logger})
	if err != nil {
		return err
	}
	outbox := jobs.NewOutbox(pool, client)
	name := cmp.Or(cfg.Name, cfg.Login)
	var expires *time.Time
	if cfg.TokenTTL > 0 {
		t := time.Now().Add(cfg.TokenTTL)
		expires = &t
	}
	token, err := jobs.Write(ctx, outbox, func(tx pgx.Tx) (string, []db.Event, error) {
		var events []db.Event
		if _, err := db.UserByLogin(ctx, tx, cfg.Login); errors.Is(err, db.ErrNotFound) {
			_, created, err := db.CreateUser(ctx, tx, nil, db.UserInput{Login: cfg.Login, DisplayName: name, Role: cfg.Role})
			if err != nil {
				return "", nil, err
			}
			events = append(events, created...)
		} else if err != nil {
			return "", nil, err
		}
		token, _, issued, err := db.IssueToken(ctx, tx, nil, cfg.Login, cfg.TokenName, expires)
		return token, append(events, issued...), err
	})
	if err != nil {
		return fmt.Errorf("create user %s: %w", cfg.Login, err)
	}
	fmt.Fprintf(stdout, "Token for %s (shown once):\n\n    %s\n\n", cfg.Login, token)
	return nil
}

// NewLogger is the process's logger: JSON or text by cfg.LogFormat (empty:
// text on a terminal, JSON otherwise) at cfg.LogLevel.
func NewLogger(cfg config.Config, w io.Writer) *slog.Logger {
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

// NotifyShutdown returns a context cancelled by the first SIGTERM or
// SIGINT; a second one exits the process at once with code 1.
func NotifyShutdown(parent context.Context, logger *slog.Logger) (context.Context, func()) {
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
