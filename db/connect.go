package db

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Database is how the server reaches PostgreSQL: Pool for every query and
// transaction, and Session for what needs a session of its own (the
// feed's LISTEN, River's notifications and leadership notices).
//
// Direct (DATABASE_URL is PostgreSQL itself, or a session-mode pooler),
// Session is Pool, and statements are prepared and cached per connection.
// Behind a transaction-pooling proxy such as PgBouncer, consecutive
// statements of one client connection may run on different server
// sessions, so nothing prepared outlives its statement: Pool runs in pgx's
// describe-and-cache mode (each statement is parsed unnamed in the round
// trip that executes it; only its parameter and result types are cached).
// Session is then DATABASE_DIRECT_URL's pool, or nil without one: River
// polls for jobs and the feed polls the journal.
type Database struct {
	Pool    *pgxpool.Pool
	Session *pgxpool.Pool
	// Pooled reports that Pool goes through a transaction pooler.
	Pooled bool

	ownSession bool // Session is a pool of its own, closed by Close
}

// sessionConns bounds DATABASE_DIRECT_URL's pool: the feed's listener,
// River's listener, migrations and the odd probe.
const sessionConns = 4

// probeTimeout is how long Open waits for its own notification before it
// concludes that DATABASE_URL is a transaction pooler.
const probeTimeout = 2 * time.Second

// Open connects to url (DATABASE_URL) and, when directURL
// (DATABASE_DIRECT_URL) is set, to it as the session connection; a set
// directURL means url is a transaction pooler, and directURL must not be
// one (checked as below; the error names DATABASE_DIRECT_URL). Without one, Open asks the
// database whether url keeps sessions: it LISTENs on one connection and
// NOTIFYs from another; a notification that does not arrive within 2 s
// means a transaction pooler. Through a pooler the query mode is always
// pgx's cache_describe, whatever default_query_exec_mode url names: the
// statement cache breaks there (prepared statements outlive their server
// session), and exec or simple_protocol would leave pgx guessing the types
// of numeric, JSON and array parameters. configure, if any, changes the
// main pool's config (TraceStatements); the session pool keeps its own. It
// does not migrate.
func Open(ctx context.Context, url, directURL string, configure ...func(*pgxpool.Config)) (*Database, error) {
	pooled := directURL != ""
	if !pooled {
		var err error
		if pooled, err = transactionPooled(ctx, url); err != nil {
			return nil, err
		}
	}
	if pooled {
		configure = append(configure, func(c *pgxpool.Config) {
			c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
		})
	}
	pool, err := Connect(ctx, url, configure...)
	if err != nil {
		return nil, err
	}
	d := &Database{Pool: pool, Pooled: pooled}
	switch {
	case !pooled:
		d.Session = pool
	case directURL != "":
		// The session connection must keep its sessions: a pooler there too
		// would LISTEN where no notification ever arrives, and the feed
		// would wait in silence.
		if directPooled, err := transactionPooled(ctx, directURL); err != nil || directPooled {
			pool.Close()
			if err == nil {
				err = errors.New("it is a transaction pooler too (a LISTEN there heard nothing): point it at PostgreSQL itself or a session-mode pooler")
			}
			return nil, fmt.Errorf("DATABASE_DIRECT_URL: %w", err)
		}
		d.Session, err = Connect(ctx, directURL, func(c *pgxpool.Config) { c.MaxConns = sessionConns })
		if err != nil {
			pool.Close()
			return nil, fmt.Errorf("DATABASE_DIRECT_URL: %w", err)
		}
		d.ownSession = true
	}
	return d, nil
}

// Direct wraps a pool that reaches PostgreSQL directly.
func Direct(pool *pgxpool.Pool) *Database { return &Database{Pool: pool, Session: pool} }

// Mode names how the server reaches PostgreSQL, as /readyz reports it:
// "direct", "transaction pooler, sessions on DATABASE_DIRECT_URL" or
// "transaction pooler, polling".
func (d *Database) Mode() string {
	switch {
	case !d.Pooled:
		return "direct"
	case d.Session != nil:
		return "transaction pooler, sessions on DATABASE_DIRECT_URL"
	default:
		return "transaction pooler, polling"
	}
}

// Close closes the pools Open opened.
func (d *Database) Close() {
	if d.ownSession {
		d.Session.Close()
	}
	d.Pool.Close()
}

// transactionPooled reports whether url is a transaction pooler: a LISTEN
// on one connection does not hear a NOTIFY from another, because the
// listening server session is handed to other clients between statements
// and its notifications reach nobody. Both connections use the simple
// protocol, which works through any pooler.
func transactionPooled(ctx context.Context, url string) (bool, error) {
	// pgxpool's parser: it takes the pool_* settings a DATABASE_URL may
	// carry off the connection string, where pgx's own would send them to
	// the server as run-time parameters (a FATAL there).
	poolCfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return false, fmt.Errorf("parse database url: %w", err)
	}
	cfg := poolCfg.ConnConfig
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	listener, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, fmt.Errorf("connect to the database: %w", err)
	}
	defer listener.Close(context.WithoutCancel(ctx))
	notifier, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, fmt.Errorf("connect to the database: %w", err)
	}
	defer notifier.Close(context.WithoutCancel(ctx))

	var b [8]byte
	_, _ = rand.Read(b[:])
	channel := "erp_session_probe_" + hex.EncodeToString(b[:])
	if _, err := listener.Exec(ctx, "LISTEN "+channel); err != nil {
		return false, fmt.Errorf("probe the connection (LISTEN): %w", err)
	}
	if _, err := notifier.Exec(ctx, "NOTIFY "+channel); err != nil {
		return false, fmt.Errorf("probe the connection (NOTIFY): %w", err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	_, err = listener.WaitForNotification(waitCtx)
	switch {
	case err == nil:
		_, _ = listener.Exec(ctx, "UNLISTEN "+channel)
		return false, nil
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return true, nil
	default:
		return false, fmt.Errorf("probe the connection (wait for NOTIFY): %w", err)
	}
}
