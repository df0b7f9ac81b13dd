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
// the pools and the private PostgreSQL. A generated admin token is shown
// on stdout, once, when stdout is a terminal (see ensureAdminToken).
func Serve(ctx context.Context, cfg config.Config, logger *slog.Logger, stdout io.Writer) error {
	// Bound first: a taken port fails before a data directory, a database
	// or an admin token is made.
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	defer ln.Close() // a failed start; a.Serve closes it otherwise
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
		if cfg.PprofAddr != "" {
			stopPprof, err := startPprof(cfg.PprofAddr, logger)
			if err != nil {
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
// (unless the login exists; an existing integration account is bound to
// cfg.User's sources) and issues a token, printed once to stdout,
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

// ensureAdminToken gives the admin user its token: ADMIN_TOKEN if set.
// Otherwise only a start that finds the admin without any token (the first
// on an empty database; db.LockAdmin) gives it one: the one in
// DATA_DIR/admin-token if that file exists (a private PostgreSQL made
// again), else a new one written there (mode 0600). A later start, whatever
// its DATA_DIR, makes none. The token never goes to the log: a new one is
// shown on stdout only when stdout is a terminal, else read from the file.
func ensureAdminToken(ctx context.Context, pool *pgxpool.Pool, cfg config.Config, logger *slog.Logger, stdout io.Writer) error {
	if cfg.AdminToken != "" {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := db.EnsureAdmin(ctx, tx, cfg.AdminToken)
			return err
		})
	}
	path := filepath.Join(cfg.DataDir, AdminTokenFile)
	var had, generated bool
	var token string
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		if had, err = db.LockAdmin(ctx, tx); err != nil || had {
			return err
		}
		b, err := os.ReadFile(path)
		switch {
		case err == nil:
			if token = strings.TrimSpace(string(b)); token == "" {
				return fmt.Errorf("admin token file %s is empty: delete it, and the next start makes a new token", path)
			}
		case errors.Is(err, os.ErrNotExist):
			if token, err = db.NewToken(); err != nil {
				return err
			}
			// Written before the commit: a token committed but not saved
			// could never be read again, while a token saved but not
			// committed is taken from the file by the next start.
			if err := writeAdminToken(cfg.DataDir, path, token); err != nil {
				return err
			}
			generated = true
		default:
			return fmt.Errorf("read admin token: %w", err)
		}
		_, err = db.EnsureAdmin(ctx, tx, token)
		return err
	})
	switch {
	case err != nil:
		return err
	case had:
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			logger.Info("admin token not generated: the admin has one already (in DATA_DIR/admin-token of the start that made it); `erp user -login admin` issues another",
				slog.String("file", path))
		}
	case generated:
		if terminal(stdout) {
			fmt.Fprintf(stdout, "\nAdmin token (shown once, saved to %s):\n\n    %s\n\n", path, token)
		}
		logger.Info("admin token generated", slog.String("file", path), slog.Bool("shown", terminal(stdout)))
	}
	return nil
}

// writeAdminToken writes token to path (mode 0600), creating dir.
func writeAdminToken(dir, path, token string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		return fmt.Errorf("write admin token: %w", err)
	}
	return nil
}

// terminal reports whether w is a terminal (a character device).
func terminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// createUser creates the user u names (unless it exists; an existing
// integration account is bound to u's sources instead) and issues its
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
			_, created, err := db.CreateUser(ctx, tx, nil, db.UserInput{Login: cfg.Login, DisplayName: name, Role: cfg.Role, Sources: cfg.SourceList()})
			if err != nil {
				return "", nil, err
			}
			events = append(events, created...)
		} else if err != nil {
			return "", nil, err
		} else if cfg.Role == db.RoleIntegration {
			_, set, err := db.SetUserSources(ctx, tx, nil, cfg.Login, cfg.SourceList())
			if err != nil {
				return "", nil, err
			}
			events = append(events, set...)
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
		if terminal(w) {
			format = "text"
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
