package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"erp/db"
)

// batchedAttempt is a first attempt made in a subscriber's batch, taken by
// firstAttempt instead of calling the subscriber: delivered, with the
// events it journaled.
type batchedAttempt struct {
	attempt db.Attempt
	written []db.Event
}

// attemptBatches makes, ahead of deliverEvents' walk, the first attempts
// of the dispatch's events to each BatchSubscriber together: one
// HandleBatch per subscriber, in a savepoint. It takes only the
// deliveries the walk would attempt whatever an earlier attempt of the
// batch does (the first of each document's events the subscriber takes,
// none held back), so the walk's order rules hold unchanged. A batch that
// fails is undone and left to the walk, event by event, which records each
// event's own outcome. Not after a failure (l.savepoints: the walk runs
// every attempt in its own savepoint), not with tracing on (each attempt
// has its span), and not for a subscriber with a condition.
func (d *Dispatcher) attemptBatches(ctx context.Context, tx pgx.Tx, l *lessons, events []db.Event, plans []db.DispatchPlan,
	blockedOutside map[db.DeliveryKey]bool, bound *lockBound) (map[db.DeliveryKey]batchedAttempt, error) {
	if l.savepoints || d.tracer != nil || len(events) < 2 || plans[0].Held {
		return nil, nil
	}
	type batch struct {
		sub db.Subscriber
		s   BatchSubscriber
		evs []db.Event
	}
	var batches []*batch
	bySub := map[int64]*batch{}
	taken := map[docKey]map[int64]bool{} // subscribers that take an earlier event of the document
	held := map[docKey]bool{}
	for i, ev := range events {
		doc := docKey{ev.Entity, ev.EntityID}
		if plans[i].Held || held[doc] {
			held[doc] = true
			continue
		}
		for _, sub := range plans[i].Subscribers {
			if sub.Kind != db.SubscriberBuiltin || sub.Paused || sub.Condition != "" {
				continue
			}
			k := db.DeliveryKey{EventID: ev.ID, SubscriberID: sub.ID}
			first := !taken[doc][sub.ID]
			if taken[doc] == nil {
				taken[doc] = map[int64]bool{}
			}
			taken[doc][sub.ID] = true
			bs, ok := d.builtins[sub.Name].(BatchSubscriber)
			if !first || !ok || blockedOutside[k] {
				continue
			}
			b := bySub[sub.ID]
			if b == nil {
				b = &batch{sub: sub, s: bs}
				bySub[sub.ID] = b
				batches = append(batches, b)
			}
			b.evs = append(b.evs, ev)
		}
	}
	made := map[db.DeliveryKey]batchedAttempt{}
	for _, b := range batches {
		if len(b.evs) < 2 {
			continue // one event: the walk's attempt costs no savepoint
		}
		if err := bound.before(ctx, tx); err != nil {
			return nil, err
		}
		start := time.Now()
		written, err := handleBatch(ctx, tx, b.sub, b.s, b.evs)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			d.logger.DebugContext(ctx, "batch of a built-in subscriber failed: attempted event by event",
				slog.String("subscriber", b.sub.Name), slog.Int("events", len(b.evs)), slog.String("error", err.Error()))
			continue
		}
		// Each attempt's duration is its share of the batch's.
		share := time.Since(start) / time.Duration(len(b.evs))
		for i, ev := range b.evs {
			a := db.Attempt{Duration: share}
			d.settle(&a, false, 0, 1, b.sub)
			made[db.DeliveryKey{EventID: ev.ID, SubscriberID: b.sub.ID}] = batchedAttempt{attempt: a, written: written[i]}
		}
	}
	return made, nil
}

// handleBatch runs s.HandleBatch on evs in a savepoint of tx, within the
// subscriber's timeout: on an error, or a result that does not match evs,
// nothing of it stays.
func handleBatch(ctx context.Context, tx pgx.Tx, sub db.Subscriber, s BatchSubscriber, evs []db.Event) ([][]db.Event, error) {
	hctx, cancel := context.WithTimeout(ctx, time.Duration(sub.TimeoutMs)*time.Millisecond)
	defer cancel()
	return inSavepoint(hctx, tx, func(sp pgx.Tx) ([][]db.Event, error) {
		written, err := s.HandleBatch(hctx, sp, evs)
		if err == nil && len(written) != len(evs) {
			err = fmt.Errorf("batch of %d events returned %d results", len(evs), len(written))
		}
		return written, err
	})
}
