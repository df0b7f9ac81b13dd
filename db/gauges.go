package db

import (
	"context"
	"fmt"

	"erp/db/internal/dbsqlc"
)

// JobCountExact is how many jobs of one state RiverJobCounts counts
// exactly; from there on a state's figure is an estimate. Statement
// RiverJobCountByState has it as a literal.
const JobCountExact = 1000

// JobCount is the number of River jobs in one state.
type JobCount struct {
	// State is River's job state: available, cancelled, completed,
	// discarded, pending, retryable, running or scheduled.
	State string
	// Jobs is exact below JobCountExact; at or above it, PostgreSQL's
	// estimate from the table's statistics (as of the last ANALYZE of
	// river_job, which autovacuum runs), never below JobCountExact.
	Jobs int64
}

// RiverJobCounts returns the jobs of every River state, zero included, in
// state order, in one statement that reads at most JobCountExact index
// entries per state and the statistics: its cost does not grow with the
// finished jobs kept for RETENTION, so that a Prometheus scrape may run it.
func RiverJobCounts(ctx context.Context, q Querier) ([]JobCount, error) {
	rows, err := queries.RiverJobCountByState(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("count river jobs by state: %w", translate(err))
	}
	return mapRows(rows, func(r dbsqlc.RiverJobCountByStateRow) JobCount { return JobCount(r) }), nil
}

// PendingCountExact is how many open delivery records of one subscriber
// SubscribersPending counts; a subscriber with more reports this many.
// Statement SubscriberPendingList has it as a literal.
const PendingCountExact = 10000

// SubscriberPending is a subscriber's open delivery records, as the
// Prometheus scrape reports them.
type SubscriberPending struct {
	Subscriber string
	// Pending counts the records not yet delivered nor dead (status
	// pending or failed), up to PendingCountExact: that figure means at
	// least as many.
	Pending int64
	// OldestPendingSeconds is the age of the oldest of them by the
	// database clock, in seconds; 0 with none.
	OldestPendingSeconds float64
}

// SubscribersPending returns every subscriber's open records, by name, in
// one statement that reads at most PendingCountExact + 1 entries of the
// indexes of open records per subscriber (never the delivered history nor
// the dead letters), so that a Prometheus scrape may run it during any
// backlog. SubscriberLags has exact figures and more.
func SubscribersPending(ctx context.Context, q Querier) ([]SubscriberPending, error) {
	rows, err := queries.SubscriberPendingList(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("list pending delivery records by subscriber: %w", translate(err))
	}
	return mapRows(rows, func(r dbsqlc.SubscriberPendingListRow) SubscriberPending { return SubscriberPending(r) }), nil
}
