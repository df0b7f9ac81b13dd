package db

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Database is how the server reaches PostgreSQL: two pools through
// DATABASE_URL, Pool for the API (requests, auth, the live feed's reads,
// metrics) and Work for background work (River and the dispatcher its
// workers call), so that a request never waits for a connection behind the
// workers; and Session for what needs a session of its own (the feed's
// LISTEN, River's notifications and leadership notices).
//
// Direct (DATABASE_URL is PostgreSQL itself, or a session-mode pooler),
// Session is Pool, and statements are prepared and cached per connection.
// Behind a transaction-pooling proxy such as PgBouncer, consecutive
// statements of one client connection may run on different server
// sessions, so nothing prepared outlives its statement: both pools run in
// pgx's describe-and-cache mode (each statement is parsed unnamed in the
// round trip that executes it; only its parameter and result types are
// cached). Session is then DATABASE_DIRECT_URL's pool, or nil without one:
// River polls for jobs and the feed polls the journal.
type Database struct {
	Pool    *pgxpool.Pool
	Work    *pgxpool.Pool
	Session *pgxpool.Pool
	// Pooled reports that Pool and Work go through a transaction pooler.
	Pooled bool
	// Sizes are Pool's and Work's maximum sizes, in connections; MaxConns
	// is the pool_max_conns of DATABASE_URL they were fitted into
	// (PoolSizes.Within), 0 when the URL sets none.
	Sizes    PoolSizes
	MaxConns int32

	ownSession bool // Session is a pool of its own, closed by Close
}

// PoolSizes are the sizes, in connections, of a Database's two pools.
type PoolSizes struct {
	API  int32 // Database.Pool
	Work int32 // Database.Work
}

// Within fits want into total connections (DATABASE_URL's
// pool_max_conns): the API first keeps its size, or half of total
// (rounded up) when that is less; the work pool takes what is left, up to
// its size; anything left after both goes to the API. So a total of at
// least API+Work gives the work pool its size and the API the rest, and a
// smaller one still leaves the API half. A total below 2 leaves one of
// them nothing: an error.
func (want PoolSizes) Within(total int32) (PoolSizes, error) {
	if total < 2 {
		return PoolSizes{}, fmt.Errorf("pool_max_conns=%d leaves no connection for one of the two pools (API and background work): want at least 2", total)
	}
	api := min(want.API, (total+1)/2)
	work := min(want.Work, total-api)
	return PoolSizes{API: total - work, Work: work}, nil
}

// String is how the start log and /readyz name the sizes: "api 8, work 24".
func (s PoolSizes) String() string { return fmt.Sprintf("api %d, work %d", s.API, s.Work) }

// sessionConns bounds DATABASE_DIRECT_URL's pool: the feed's listener,
// River's listener, migrations and the odd probe.
const sessionConns = 4

// probeTimeout is how long Open waits for its own notification before it
// concludes that DATABASE_URL is a transaction pooler.
const probeTimeout = 2 * time.Second

// Open connects to url (DATABASE_URL), the API's and the work pool sized by
// want, or by want fitted into url's pool_max_conns when it sets one
// (PoolSizes.Within; the error names DATABASE_URL when it is below 2).
// When directURL (DATABASE_DIRECT_URL) is set, Open connects to it as the
// session connection; a set directURL means url is a transaction pooler,
// and directURL must not be one (checked as below; the error names
// DATABASE_DIRECT_URL). Without one, Open asks the database whether url
// keeps sessions: it LISTENs on one connection and NOTIFYs from another; a
// notification that does not arrive within 2 s means a transaction
// pooler. Through a pooler the query mode is always pgx's cache_describe,
// whatever default_query_exec_mode url names: the statement cache breaks
// there (prepared statements outlive their server session), and exec or
// simple_protocol would leave pgx guessing the types of numeric, JSON and
// array parameters. configure, if any, changes both pools' config
// (TraceStatements); the session pool keeps its own. It does not migrate.
func Open(ctx context.Context, url, directURL string, want PoolSizes, configure ...func(*pgxpool.Config)) (*Database, error) {
	pooled := directURL != ""
	if !pooled {
		var err error
		if pooled, err = transactionPooled(ctx, url); err != nil {
			return nil, err
		}
	}
	if pooled {
		configure = append(slices.Clip(configure), func(c *pgxpool.Config) {
			c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
		})
	}
	cfg, err := parseConfig(url, configure...)
	if err != nil {
		return nil, err
	}
	d, err := openPools(ctx, cfg, want)
	if err != nil {
		return nil, err
	}
	d.Pooled = pooled
	switch {
	case !pooled:
		d.Session = d.Pool
	case directURL != "":
		// The session connection must keep its sessions: a pooler there too
		// would LISTEN where no notification ever arrives, and the feed
		// would wait in silence.
		if directPooled, err := transactionPooled(ctx, directURL); err != nil || directPooled {
			d.Close()
			if err == nil {
				err = errors.New("it is a transaction pooler too (a LISTEN there heard nothing): point it at PostgreSQL itself or a session-mode pooler")
			}
			return nil, fmt.Errorf("DATABASE_DIRECT_URL: %w", err)
		}
		d.Session, err = Connect(ctx, directURL, func(c *pgxpool.Config) { c.MaxConns = sessionConns })
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("DATABASE_DIRECT_URL: %w", err)
		}
		d.ownSession = true
	}
	return d, nil
}

// OpenLike opens a Database on PostgreSQL reached directly, as Open would,
// with pool's configuration (its URL, pool_max_conns included, its tracer
// and hooks) for both pools, sized as Open sizes them: for tests that built
// pool themselves. pool itself is left alone; Close closes the two pools
// OpenLike opened.
func OpenLike(ctx context.Context, pool *pgxpool.Pool, want PoolSizes) (*Database, error) {
	d, err := openPools(ctx, pool.Config(), want)
	if err != nil {
		return nil, err
	}
	d.Session = d.Pool
	return d, nil
}

// openPools opens the API's and the work pool from copies of cfg, sized
// by want within the pool_max_conns of cfg's URL, if it sets one.
func openPools(ctx context.Context, cfg *pgxpool.Config, want PoolSizes) (*Database, error) {
	d := &Database{Sizes: want}
	// pgxpool fills MaxConns in either way: only the URL tells whether
	// it was asked for. Parsed once already, so no error here.
	if conn, err := pgx.ParseConfig(cfg.ConnString()); err == nil {
		if _, set := conn.RuntimeParams["pool_max_conns"]; set {
			d.MaxConns = cfg.MaxConns
			if d.Sizes, err = want.Within(cfg.MaxConns); err != nil {
				return nil, fmt.Errorf("DATABASE_URL: %w", err)
			}
		}
	}
	open := func(size int32) (*pgxpool.Pool, error) {
		c := cfg.Copy()
		c.MaxConns = size
		// pool_min_conns and pool_min_idle_conns apply to each pool, within
		// its size.
		c.MinConns, c.MinIdleConns = min(c.MinConns, size), min(c.MinIdleConns, size)
		p, err := pgxpool.NewWithConfig(ctx, c)
		if err != nil {
			return nil, fmt.Errorf("open pool: %w", err)
		}
		return p, nil
	}
	var err error
	if d.Pool, err = open(d.Sizes.API); err != nil {
		return nil, err
	}
	if d.Work, err = open(d.Sizes.Work); err != nil {
		d.Pool.Close()
		return nil, err
	}
	return d, nil
}

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

// PoolSizing names the pools' sizes as /readyz gives them: "api 8, work
// 24", followed by " of pool_max_conns 40" when DATABASE_URL set one.
func (d *Database) PoolSizing() string {
	if d.MaxConns > 0 {
		return fmt.Sprintf("%s of pool_max_conns %d", d.Sizes, d.MaxConns)
	}
	return d.Sizes.String()
}

// LogAttrs are the mode and the pools' sizes as the start log gives them:
// mode, api_conns, work_conns, and pool_max_conns when DATABASE_URL set one.
func (d *Database) LogAttrs() []slog.Attr {
	attrs := []slog.Attr{slog.String("mode", d.Mode()),
		slog.Int("api_conns", int(d.Sizes.API)), slog.Int("work_conns", int(d.Sizes.Work))}
	if d.MaxConns > 0 {
		attrs = append(attrs, slog.Int("pool_max_conns", int(d.MaxConns)))
	}
	return attrs
}

// Close closes the pools Open or OpenLike opened.
func (d *Database) Close() {
	if d.ownSession {
		d.Session.Close()
	}
	d.Work.Close()
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
