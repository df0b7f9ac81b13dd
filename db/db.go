// Package db owns the PostgreSQL side of the ERP backbone: migrations, the
// document tables, number series, the event journal and its LISTEN/NOTIFY
// feed. It imports no other package of this module.
package db

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strconv"
	"strings"

	pgxdecimal "github.com/jackc/pgx-shopspring-decimal"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Connect opens the pool for url (a libpq URL or key=value string) and
// registers the decimal codec on every connection; configure, if any, may
// change the parsed config before the pool opens (a tracer, sizes). It does
// not ping.
func Connect(ctx context.Context, url string, configure ...func(*pgxpool.Config)) (*pgxpool.Pool, error) {
	cfg, err := parseConfig(url, configure...)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	return pool, nil
}

// parseConfig is Connect's config: url parsed, the decimal codec
// registered on every connection, then configure applied.
func parseConfig(url string, configure ...func(*pgxpool.Config)) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	cfg.AfterConnect = func(_ context.Context, conn *pgx.Conn) error {
		pgxdecimal.Register(conn.TypeMap())
		conn.TypeMap().RegisterType(&pgtype.Type{Name: "numeric", OID: pgtype.NumericOID, Codec: numericText{}})
		return nil
	}
	for _, f := range configure {
		f(cfg)
	}
	return cfg, nil
}

// numericText reads and writes numeric values in PostgreSQL's text
// format: a binary zero carries its scale in a header pgx does not read,
// so 0.000 of a numeric(18,3) column would come back as "0" beside
// "237.100"; the text form is "0.000".
type numericText struct{ pgxdecimal.NumericCodec }

func (numericText) PreferredFormat() int16 { return pgtype.TextFormatCode }

// Migrate brings the database to head: River's own tables through
// rivermigrate, then this module's embedded migrations (db/migrations/*.sql)
// through goose. Both are idempotent, so every start runs them.
func Migrate(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error {
	return migrate(ctx, pool, logger, true)
}

// Migrate is the package's Migrate on d: on the session connection when
// there is one; through the transaction pooler otherwise, where a
// session-level advisory lock would be taken on one server session and
// released on another, so that instances serialise on goose's lock table
// instead.
func (d *Database) Migrate(ctx context.Context, logger *slog.Logger) error {
	if d.Session != nil {
		return migrate(ctx, d.Session, logger, true)
	}
	return migrate(ctx, d.Pool, logger, false)
}

func migrate(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger, sessionLock bool) error {
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: logger})
	if err != nil {
		return fmt.Errorf("river migrator: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate river: %w", err)
	}

	sqlDB := stdlib.OpenDBFromPool(pool)
	defer sqlDB.Close()
	dir, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return fmt.Errorf("open embedded migrations: %w", err)
	}
	// The lock lets several instances start against one database at once:
	// the second waits for the first's migrations instead of racing them.
	var lockOpt goose.ProviderOption
	if sessionLock {
		locker, err := lock.NewPostgresSessionLocker()
		if err != nil {
			return fmt.Errorf("migration locker: %w", err)
		}
		lockOpt = goose.WithSessionLocker(locker)
	} else {
		locker, err := lock.NewPostgresTableLocker()
		if err != nil {
			return fmt.Errorf("migration locker: %w", err)
		}
		lockOpt = goose.WithLocker(locker)
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, sqlDB, dir, lockOpt)
	if err != nil {
		return fmt.Errorf("goose provider: %w", err)
	}
	results, err := provider.Up(ctx)
	if err != nil {
		var partial *goose.PartialError
		if errors.As(err, &partial) {
			return fmt.Errorf("migrate %s: %w", partial.Failed.Source.Path, partial.Err)
		}
		return fmt.Errorf("migrate: %w", err)
	}
	for _, r := range results {
		logger.InfoContext(ctx, "migration applied", slog.String("file", r.Source.Path), slog.Duration("took", r.Duration))
	}
	return nil
}

// HeadVersion is the version of the newest embedded migration: the
// number its file name starts with (00004_roles.sql → 4).
func HeadVersion() (int64, error) {
	entries, err := fs.ReadDir(migrations, "migrations")
	if err != nil {
		return 0, fmt.Errorf("read embedded migrations: %w", err)
	}
	var head int64
	for _, e := range entries {
		prefix, _, ok := strings.Cut(e.Name(), "_")
		if !ok {
			continue
		}
		v, err := strconv.ParseInt(prefix, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("migration %s: version: %w", e.Name(), err)
		}
		head = max(head, v)
	}
	return head, nil
}

// ErrNotMigrated is returned by CheckMigrated when the database lags behind
// the embedded migrations.
var ErrNotMigrated = errors.New("database schema is behind the embedded migrations")

// CheckMigrated compares the newest migration applied (goose's table) with
// HeadVersion in one query; it returns ErrNotMigrated when behind.
func CheckMigrated(ctx context.Context, q Querier) error {
	head, err := HeadVersion()
	if err != nil {
		return err
	}
	applied, err := queries.MigrationGetVersion(ctx, q)
	if err != nil {
		return fmt.Errorf("read applied migration version: %w", translate(err))
	}
	if applied < head {
		return fmt.Errorf("%w: applied %d, head %d", ErrNotMigrated, applied, head)
	}
	return nil
}
