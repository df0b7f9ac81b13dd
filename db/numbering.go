package db

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
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

// nextNumber takes the next number of prefix's series for the current year
// (database clock, session time zone), formatted "ЗК-2026-000422". The
// series row stays locked until tx ends, so numbers are handed out in commit
// order and a rollback frees the number: the series is gapless. The price is
// that documents of one prefix are created one at a time.
func nextNumber(ctx context.Context, tx pgx.Tx, prefix string) (string, error) {
	no, err := queries.NumberSeriesNext(ctx, tx, prefix)
	if err != nil {
		return "", insertNumberedErr(prefix, "next number "+prefix, err)
	}
	return no, nil
}

// seriesLimitCheck is the CHECK that caps a series at 999999.
const seriesLimitCheck = "number_series_last_value_check"

// insertNumberedErr translates the error of a statement that takes a
// number of prefix's series: an exhausted series is ErrConflict, anything
// else is wrapped with action.
func insertNumberedErr(prefix, action string, err error) error {
	err = translate(err)
	if violatedConstraint(err) == seriesLimitCheck {
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
	n, err := queries.NumberSeriesSetStart(ctx, tx, prefix, int32(year), int64(start-1))
	if err != nil {
		return fmt.Errorf("set series %s-%d start: %w", prefix, year, translate(err))
	}
	if n == 0 {
		return fmt.Errorf("%w: series %s-%d has already issued numbers at or past %d", ErrConflict, prefix, year, start)
	}
	return nil
}
