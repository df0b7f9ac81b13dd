package jobs

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"erp/db"
)

// maxRedeliver bounds one bulk redelivery.
const maxRedeliver = 10000

// CreateWebhookSubscriber adds a webhook subscriber after checking that its
// URL is one we can send to (http/https). Errors: *db.InputError (also
// matching db.ErrConflict for a taken name).
func CreateWebhookSubscriber(ctx context.Context, q db.Querier, in db.WebhookSubscriberInput) (db.Subscriber, error) {
	if in.URL != nil {
		if err := ValidateWebhookURL(*in.URL); err != nil {
			return db.Subscriber{}, &db.InputError{Field: "url", Msg: err.Error()}
		}
	}
	return db.CreateWebhookSubscriber(ctx, q, in)
}

// UpdateWebhookSubscriber changes the given fields of webhook subscriber
// id; errors as CreateWebhookSubscriber, and db.ErrNotFound.
func UpdateWebhookSubscriber(ctx context.Context, q db.Querier, id int64, in db.WebhookSubscriberInput) (db.Subscriber, error) {
	if in.URL != nil {
		if err := ValidateWebhookURL(*in.URL); err != nil {
			return db.Subscriber{}, &db.InputError{Field: "url", Msg: err.Error()}
		}
	}
	return db.UpdateWebhookSubscriber(ctx, q, id, in)
}

// SetPaused pauses or resumes subscriber id; resuming schedules its held
// deliveries at once. db.ErrNotFound for no such subscriber.
func (d *Dispatcher) SetPaused(ctx context.Context, id int64, paused bool) (db.Subscriber, error) {
	var sub db.Subscriber
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		s, held, err := db.SetSubscriberPaused(ctx, tx, id, paused)
		if err != nil {
			return err
		}
		sub = s
		return d.enqueue(ctx, tx, &txWork{now: held})
	})
	return sub, err
}

// Redeliver reopens the deliveries matching f (at most 10,000), journals a
// delivery.redelivered event for each by actorID, and schedules them, all in
// one transaction. It returns the reopened deliveries' keys.
func (d *Dispatcher) Redeliver(ctx context.Context, actorID *int64, f db.DeliveryFilter) ([]db.DeliveryKey, error) {
	var keys []db.DeliveryKey
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		k, events, err := db.Redeliver(ctx, tx, actorID, f, maxRedeliver)
		if err != nil {
			return err
		}
		keys = k
		return d.enqueue(ctx, tx, &txWork{written: events, now: k})
	})
	if err != nil {
		return nil, fmt.Errorf("redeliver: %w", err)
	}
	return keys, nil
}
