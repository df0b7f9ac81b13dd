package db

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
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
	PrefixShipment          = "ОТ"
)

// Prefixes lists every document prefix.
var Prefixes = []string{PrefixSalesOrder, PrefixProductionOrder, PrefixPurchaseOrder, PrefixReceipt, PrefixIssueToProduction, PrefixShipment}

// pendingNumber is the placeholder a document of prefix's series is
// inserted with: "pending ЗК <uuid>", unique, and replaced at commit by the
// next number of the series, formatted "ЗК-2026-000422" (the year by the
// database clock, session time zone), by the document table's *_number
// trigger (migration 00015). Taken at commit, the series row is locked for
// the commit's WAL flush only; numbers follow commit order, and a
// rollback takes none, so each series is gapless.
func pendingNumber(prefix string) string { return pendingPrefix + prefix + " " + uuid.NewString() }

// pendingPrefix starts every placeholder number (the *_number triggers
// fire only for such rows).
const pendingPrefix = "pending "

// isPending reports a number that is still a placeholder: the document
// was written by the transaction reading it, which has not committed.
func isPending(number string) bool { return strings.HasPrefix(number, pendingPrefix) }

// NumberNow numbers, in tx and now rather than at commit, every document
// tx has inserted and every one it inserts from here on (SET CONSTRAINTS
// ALL IMMEDIATE), so that their numbers can be read before commit; each
// series taken stays locked until tx ends. An exhausted series is
// ErrConflict.
func NumberNow(ctx context.Context, tx pgx.Tx) error {
	return CommitErr(queries.NumberNow(ctx, tx))
}

// seriesLimitCheck is the CHECK that caps a series at 999999; the *_number
// triggers raise an exhausted series under its name, the series in DETAIL.
const seriesLimitCheck = "number_series_last_value_check"

// CommitErr translates the error of a commit (or of NumberNow) of a
// transaction that inserted numbered documents: an exhausted series is
// ErrConflict naming it; any other error comes back as it is.
func CommitErr(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.ConstraintName != seriesLimitCheck {
		return err
	}
	return fmt.Errorf("%w: the %s number series of this year is exhausted (999999)", ErrConflict, pgErr.Detail)
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
	n, err := queries.NumberSeriesSetStart(ctx, tx, prefix, int32(year), int64(start-1))
	if err != nil {
		return fmt.Errorf("set series %s-%d start: %w", prefix, year, translate(err))
	}
	if n == 0 {
		return fmt.Errorf("%w: series %s-%d has already issued numbers at or past %d", ErrConflict, prefix, year, start)
	}
	return nil
}
