package db

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"erp/db/internal/dbsqlc"
)

// maxAttemptBody caps the response body an attempt log row keeps, in bytes
// (the sender reads no more than that).
const maxAttemptBody = 4096

// Lease is one attempt of an external delivery (live or replayed) taken
// by LeaseDelivery or LeaseReplayDelivery: its attempt log row and its
// number within the delivery. Holder is what RecordLeasedAttempt checks.
type Lease struct {
	Holder    string
	AttemptID int64
	Attempt   int32
}

// LeaseDelivery leases delivery k, locked in tx by LockOpenDelivery, to
// holder for one attempt made by instance: the attempt is counted, the
// delivery is not due again until ttl from now (when a taker that died
// leaves it to the next), and the attempt's start is logged. Commit tx
// before making the request.
func LeaseDelivery(ctx context.Context, tx pgx.Tx, k DeliveryKey, holder, instance string, ttl time.Duration) (Lease, error) {
	row, err := queries.DeliveryLease(ctx, tx, dbsqlc.DeliveryLeaseParams{EventID: &k.EventID, SubscriberID: k.SubscriberID,
		Holder: holder, Instance: instance, TtlS: ttl.Seconds()})
	if err != nil {
		return Lease{}, fmt.Errorf("lease delivery %d/%d: %w", k.EventID, k.SubscriberID, translate(err))
	}
	return Lease{Holder: holder, AttemptID: row.ID, Attempt: row.Attempt}, nil
}

// answerOf is attempt a's answer as stored: an HTTP status and its body
// (at most limit bytes), or, for an answer without a status (a NATS
// acknowledgement), the body alone; nil where there is none.
func answerOf(a Attempt, limit int) (status *int32, body *string) {
	if a.ResponseStatus != 0 {
		status = ptr(int32(a.ResponseStatus))
	}
	if a.ResponseStatus != 0 || a.ResponseBody != "" {
		body = ptr(truncate(a.ResponseBody, limit))
	}
	return status, body
}

// RecordLeasedAttempt stores attempt a of delivery k, made under lease
// l, and ends the lease. ErrNotFound: the lease is no longer l's (it ran
// out and another worker took the delivery, or a redelivery reset it),
// and nothing was changed; the answer is still logged by FinishAttempt.
func RecordLeasedAttempt(ctx context.Context, tx pgx.Tx, k DeliveryKey, l Lease, a Attempt) (Delivery, error) {
	p := dbsqlc.DeliveryRecordLeasedParams{EventID: k.EventID, SubscriberID: k.SubscriberID, Holder: l.Holder,
		Status: a.Status, DurationMs: ptr(int32(a.Duration / time.Millisecond)), RetryInS: a.RetryIn.Seconds()}
	if a.Error != "" {
		p.LastError = ptr(truncate(a.Error, maxLastErrorLen))
	}
	p.ResponseStatus, p.ResponseBody = answerOf(a, len(a.ResponseBody))
	row, err := queries.DeliveryRecordLeased(ctx, tx, p)
	if err != nil {
		return Delivery{}, fmt.Errorf("record attempt %d of delivery %d/%d: %w", l.Attempt, k.EventID, k.SubscriberID, translate(err))
	}
	return deliveryFrom(dbsqlc.DeliveryRow(row)), nil
}

// DropLease gives delivery k back before the answer to its attempt under
// lease l came (the server is stopping): the delivery is due at once; the
// attempt stays counted, as its request went out. Nothing happens when
// the lease is no longer l's.
func DropLease(ctx context.Context, q Querier, k DeliveryKey, l Lease) error {
	if err := queries.DeliveryLeaseDrop(ctx, q, k.EventID, k.SubscriberID, l.Holder); err != nil {
		return fmt.Errorf("drop lease of delivery %d/%d: %w", k.EventID, k.SubscriberID, translate(err))
	}
	return nil
}

// FinishAttempt completes the attempt log row of lease l with a's outcome
// (its status, duration, response and error).
func FinishAttempt(ctx context.Context, q Querier, l Lease, a Attempt) error {
	p := dbsqlc.DeliveryAttemptFinishParams{ID: l.AttemptID, Status: nonEmpty(a.Status), Error: nonEmpty(truncate(a.Error, maxLastErrorLen))}
	if a.Status != "" {
		// An attempt with no outcome (interrupted) has no duration either.
		p.DurationMs = ptr(int32(a.Duration / time.Millisecond))
	}
	p.ResponseStatus, p.ResponseBody = answerOf(a, maxAttemptBody)
	if err := queries.DeliveryAttemptFinish(ctx, q, p); err != nil {
		return fmt.Errorf("log attempt %d: %w", l.AttemptID, translate(err))
	}
	return nil
}

// AttemptLog is one attempt of a delivery as the attempt log keeps it.
// Status is empty, and Duration nil, while the attempt is in flight or
// when its worker never recorded it (Error then says so).
type AttemptLog struct {
	// ExampleOf is the event type whose catalog example the attempt sent
	// (sendExampleEvent); nil for an attempt of a delivery.
	ExampleOf *string
	// MessageID is an example's webhook-id (example_…); nil for an attempt
	// of a delivery, whose webhook-id is its delivery's.
	MessageID      *string
	Attempt        int32
	Instance       string
	StartedAt      time.Time
	Status         string
	DurationMs     *int32
	ResponseStatus *int32
	ResponseBody   *string
	Error          *string
}

// AttemptLogs returns the attempt logs of the live deliveries keys, each
// newest first; a delivery without attempts maps to nothing.
func AttemptLogs(ctx context.Context, q Querier, keys []DeliveryKey) (map[DeliveryKey][]AttemptLog, error) {
	events, subs := make([]int64, len(keys)), make([]int64, len(keys))
	for i, k := range keys {
		events[i], subs[i] = k.EventID, k.SubscriberID
	}
	rows, err := queries.DeliveryAttemptListOf(ctx, q, events, subs)
	if err != nil {
		return nil, fmt.Errorf("attempt logs of %d deliveries: %w", len(keys), translate(err))
	}
	out := make(map[DeliveryKey][]AttemptLog, len(keys))
	for _, r := range rows {
		k := DeliveryKey{EventID: *r.EventID, SubscriberID: r.SubscriberID} // not null: joined on it
		out[k] = append(out[k], AttemptLog{Attempt: r.Attempt, Instance: r.Instance, StartedAt: r.StartedAt,
			Status: deref(r.Status), DurationMs: r.DurationMs, ResponseStatus: r.ResponseStatus,
			ResponseBody: r.ResponseBody, Error: r.Error})
	}
	return out, nil
}

// PruneAttemptLog deletes up to limit attempt log rows started before
// before, and returns how many it deleted.
func PruneAttemptLog(ctx context.Context, q Querier, before time.Time, limit int) (int64, error) {
	n, err := queries.DeliveryAttemptDeleteOld(ctx, q, before, int32(limit))
	if err != nil {
		return 0, fmt.Errorf("prune attempts started before %s: %w", before.Format(time.RFC3339), translate(err))
	}
	return n, nil
}

// LeaseReplayDelivery leases replayed delivery k, locked in tx by
// LockOpenReplayDelivery, as LeaseDelivery a live one.
func LeaseReplayDelivery(ctx context.Context, tx pgx.Tx, k ReplayKey, holder, instance string, ttl time.Duration) (Lease, error) {
	row, err := queries.ReplayDeliveryLease(ctx, tx, dbsqlc.ReplayDeliveryLeaseParams{ReplayID: k.ReplayID, EventID: &k.EventID,
		Holder: holder, Instance: instance, TtlS: ttl.Seconds()})
	if err != nil {
		return Lease{}, fmt.Errorf("lease event %d of replay %d: %w", k.EventID, k.ReplayID, translate(err))
	}
	return Lease{Holder: holder, AttemptID: row.ID, Attempt: row.Attempt}, nil
}

// RecordLeasedReplayAttempt stores attempt a of replayed delivery k made
// under lease l, as RecordLeasedAttempt, and returns its status and, for
// a failure, the next attempt's time (database clock). ErrNotFound: the
// lease is no longer l's.
func RecordLeasedReplayAttempt(ctx context.Context, tx pgx.Tx, k ReplayKey, l Lease, a Attempt) (string, time.Time, error) {
	p := dbsqlc.ReplayDeliveryRecordLeasedParams{ReplayID: k.ReplayID, EventID: k.EventID, Holder: l.Holder, Status: a.Status,
		DurationMs: ptr(int32(a.Duration / time.Millisecond)), RetryInS: a.RetryIn.Seconds()}
	if a.Error != "" {
		p.LastError = ptr(truncate(a.Error, maxLastErrorLen))
	}
	p.ResponseStatus, p.ResponseBody = answerOf(a, len(a.ResponseBody))
	row, err := queries.ReplayDeliveryRecordLeased(ctx, tx, p)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("record attempt %d of event %d of replay %d: %w", l.Attempt, k.EventID, k.ReplayID, translate(err))
	}
	return row.Status, row.NextAttemptAt, nil
}

// DropReplayLease gives replayed delivery k back, as DropLease.
func DropReplayLease(ctx context.Context, q Querier, k ReplayKey, l Lease) error {
	if err := queries.ReplayDeliveryLeaseDrop(ctx, q, k.ReplayID, k.EventID, l.Holder); err != nil {
		return fmt.Errorf("drop lease of event %d of replay %d: %w", k.EventID, k.ReplayID, translate(err))
	}
	return nil
}

// StartExampleAttempt logs the start of example request msgID (a
// catalog example of type exampleType, see jobs.Dispatcher.SendExample)
// to webhook subscriberID by instance: an attempt log row with no event
// and no delivery. The returned lease only names that row, for
// FinishAttempt.
func StartExampleAttempt(ctx context.Context, q Querier, subscriberID int64, exampleType, msgID, instance string) (Lease, time.Time, error) {
	row, err := queries.DeliveryAttemptStartExample(ctx, q, subscriberID, &exampleType, msgID, instance)
	if err != nil {
		return Lease{}, time.Time{}, fmt.Errorf("log example %s to subscriber %d: %w", msgID, subscriberID, translate(err))
	}
	return Lease{Holder: msgID, AttemptID: row.ID, Attempt: 1}, row.StartedAt, nil
}

// ExampleAttempts returns the newest limit example attempts to subscriber
// subscriberID kept (started within RETENTION), newest first.
func ExampleAttempts(ctx context.Context, q Querier, subscriberID int64, limit int) ([]AttemptLog, error) {
	rows, err := queries.DeliveryAttemptListExamples(ctx, q, subscriberID, int32(limit))
	if err != nil {
		return nil, fmt.Errorf("example attempts of subscriber %d: %w", subscriberID, translate(err))
	}
	out := make([]AttemptLog, len(rows))
	for i, r := range rows {
		out[i] = AttemptLog{ExampleOf: &r.ExampleType, MessageID: &r.MessageID, Attempt: 1, StartedAt: r.StartedAt,
			Status: deref(r.Status), DurationMs: r.DurationMs, ResponseStatus: r.ResponseStatus, ResponseBody: r.ResponseBody, Error: r.Error}
	}
	return out, nil
}
