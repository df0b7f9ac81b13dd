package db

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Document number prefixes, one gapless series per prefix and year.
const (
	PrefixSalesOrder        = "ЗК"
	PrefixProductionOrder   = "ПЗ"
	PrefixPurchaseOrder     = "ЗП"
	PrefixReceipt           = "ПР"
	PrefixIssueToProduction = "ВЦ"
)

// Prefixes lists every document prefix.
var Prefixes = []string{PrefixSalesOrder, PrefixProductionOrder, PrefixPurchaseOrder, PrefixReceipt, PrefixIssueToProduction}

// nextNumber takes the next number of prefix's series for the current year
// (database clock, session time zone) and formats it "ЗК-2026-000422". The
// series row stays locked until tx ends, so numbers are handed out in commit
// order and a rollback frees the number: the series is gapless. The price is
// that documents of one prefix are created one at a time.
func nextNumber(ctx context.Context, tx pgx.Tx, prefix string) (string, error) {
	var year int32
	var value int64
	err := tx.QueryRow(ctx, `
		INSERT INTO number_series (prefix, year, last_value)
		VALUES ($1, extract(year FROM now())::int, 1)
		ON CONFLICT (prefix, year) DO UPDATE SET last_value = number_series.last_value + 1
		RETURNING year, last_value`, prefix).Scan(&year, &value)
	if err != nil {
		return "", insertNumberedErr(prefix, "next number "+prefix, err)
	}
	return fmt.Sprintf("%s-%d-%06d", prefix, year, value), nil
}

// seriesLimitCheck is the CHECK that caps a series at 999999.
const seriesLimitCheck = "number_series_last_value_check"

// insertNumberedErr wraps the error of a statement that takes a number of
// prefix's series: an exhausted series is ErrConflict, anything else is
// wrapped with action.
func insertNumberedErr(prefix, action string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.CheckViolation && pgErr.ConstraintName == seriesLimitCheck {
		return fmt.Errorf("%w: the %s number series of this year is exhausted (999999)", ErrConflict, prefix)
	}
	return fmt.Errorf("%s: %w", action, err)
}

// SetNumberSeriesStart makes the next number of prefix's series in year be
// start (1…999999). It refuses with ErrConflict to move a series back over
// numbers already issued, which would repeat them.
func SetNumberSeriesStart(ctx context.Context, tx pgx.Tx, prefix string, year, start int) error {
	if !slices.Contains(Prefixes, prefix) {
		return inputErr("prefix", "unknown document prefix %q; one of %s", prefix, strings.Join(Prefixes, ", "))
	}
	if start < 1 || start > 999999 {
		return inputErr("start", "must be between 1 and 999999")
	}
	if year < 2000 || year > 9999 {
		return inputErr("year", "must be between 2000 and 9999")
	}
	tag, err := tx.Exec(ctx, `
		INSERT INTO number_series (prefix, year, last_value) VALUES ($1, $2, $3)
		ON CONFLICT (prefix, year) DO UPDATE SET last_value = EXCLUDED.last_value
		WHERE number_series.last_value <= EXCLUDED.last_value`, prefix, year, start-1)
	if err != nil {
		return fmt.Errorf("set series %s-%d start: %w", prefix, year, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: series %s-%d has already issued numbers at or past %d", ErrConflict, prefix, year, start)
	}
	return nil
}
