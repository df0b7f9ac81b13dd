package jobs

import (
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"erp/db"
)

// An external delivery (a webhook's or a NATS subscriber's, live or
// replayed) is attempted in three steps, and no transaction or pooled
// connection is held while the request (or the publish, awaiting its
// acknowledgement) is out:
//
//  1. take: a short transaction locks the open, due record, checks the
//     subscriber is not paused and no earlier event of the document comes
//     first, takes one of the webhook's lease slots (MaxInFlight) and a
//     rate token, and leases the record for the request's timeout plus
//     leaseMargin (the attempt is counted and logged as started);
//  2. send: the request, with nothing held;
//  3. record: a short transaction logs the answer, gives the slot back,
//     and stores the outcome on the record only if the lease is still
//     ours; then the retry or the document's next deliveries follow.
//
// A worker that dies between take and record leaves a lease that runs out:
// the record is due again and the next attempt (the minute sweep, or any
// job naming it) sends the same webhook-id, so delivery is at least once.
// An answer that comes after the lease was taken over is logged as an
// attempt and changes nothing else, so a delivery is never "delivered"
// twice.

// leaseMargin is how long a lease outlives its request's timeout: the
// time the take's commit, the request's start and the record take beside
// the request itself.
const leaseMargin = 5 * time.Second

// recordTimeout bounds recording an answer, and giving a lease back, once
// our own context may have ended (the server is stopping): past it the
// lease runs out by itself.
const recordTimeout = 5 * time.Second

// DefaultDisableAfter is how long a webhook may fail continuously before
// it is disabled (WEBHOOK_DISABLE_AFTER): 5 days, as Svix does.
const DefaultDisableAfter = 120 * time.Hour

// throttledError is take's error when a webhook's limits leave no room
// now: retryIn is when a rate token is due, 0 when a lease slot is (no one
// knows when a request in flight ends).
type throttledError struct {
	subscriberID int64
	retryIn      time.Duration
}

func (e *throttledError) Error() string {
	return fmt.Sprintf("webhook %d at its limit", e.subscriberID)
}

// externalDelivery is one delivery to an external subscriber (a webhook
// or NATS), live or replayed: the parts of the three steps that differ
// between the two. The send step is the kind's: an HTTP request or a
// JetStream publish (NatsPublisher.publish); the rest is shared.
type externalDelivery interface {
	// lock locks the record in tx if it is open and due and reads its
	// subscriber and event; ready false: no attempt now (w.outcome says
	// why).
	lock(ctx context.Context, d *Dispatcher, tx pgx.Tx, w *txWork) (sub db.Subscriber, ev db.Event, ready bool, err error)
	// lease leases the locked record to holder for ttl.
	lease(ctx context.Context, tx pgx.Tx, holder, instance string, ttl time.Duration) (db.Lease, error)
	// messageID is the request's webhook-id (a publish's Nats-Msg-Id):
	// the same at every attempt.
	messageID(ev db.Event, sub db.Subscriber) string
	// record stores attempt a made under t's lease, if the lease is still
	// t's (false: it is not, nothing changed), and notes in w what follows
	// from it.
	record(ctx context.Context, d *Dispatcher, tx pgx.Tx, w *txWork, t *taken, a db.Attempt) (bool, error)
	// drop gives t's lease back unmade.
	drop(ctx context.Context, tx pgx.Tx, l db.Lease) error
	String() string
}

// taken is an attempt take leased: what the request needs and what
// record checks.
type taken struct {
	lease  db.Lease
	slot   int32
	sub    db.Subscriber
	ev     db.Event
	target db.WebhookTarget
	msgID  string
}

// deliverExternal makes one attempt of external delivery x: take, send,
// record. It returns the record's work (w.outcome: the outcome; skipped
// or blocked when take found nothing to attempt). A *throttledError means
// the webhook's limits left no room and nothing was attempted; any other
// error that the attempt could not be taken or recorded (a lease taken
// and not recorded runs out by itself).
func (d *Dispatcher) deliverExternal(ctx context.Context, x externalDelivery) (txWork, error) {
	t, w, err := d.take(ctx, x)
	if err != nil {
		return txWork{}, fmt.Errorf("take %s: %w", x, err)
	}
	if t == nil {
		return w, nil
	}
	a, answered := d.send(ctx, t)
	if !answered {
		d.giveBack(ctx, x, t)
		return txWork{}, fmt.Errorf("send %s: %w", x, ctx.Err())
	}
	// An answer in hand is recorded even when ctx ends now (the server
	// stopping): otherwise a delivered request would be sent again.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	if w, err = d.recordExternal(rctx, x, t, a); err != nil {
		return txWork{}, fmt.Errorf("record %s: %w", x, err)
	}
	finished := w.outcome == db.DeliveryDelivered || w.outcome == db.DeliveryDead
	if err := d.wakeNext(rctx, x, t, finished); err != nil {
		// The sweep finds what this would have woken.
		d.logger.WarnContext(ctx, "wake the deliveries after an attempt", slog.String("delivery", x.String()),
			slog.String("error", err.Error()))
	}
	return w, nil
}

// wakeNext enqueues, in a transaction after the record's commit, what the
// attempt of t let through: the lease slot it gave back takes the
// webhook's next due deliveries (a delivery that found no slot waits for
// this, not polling), and a finished delivery releases its document's
// later events to the subscriber, live and replayed. After the commit,
// not in it: a take that read this delivery still open, or found no slot,
// may have run after the record's own look; it saw rows committed before
// it began, which a query begun now sees too.
//
// It wakes one due delivery (and one replayed) per slot free now, not
// MaxInFlight: the other slots are in flight, each waking in turn when
// its holder records. The free slots are counted before the due
// deliveries are read: of attempts recorded at once, the last to count
// sees every slot given back, and a slot taken after the count was taken
// with a delivery, which then is not due (leased), so a woken job that
// finds its delivery leased by another job finds its slot used for it. A
// free slot and a due delivery are not left waiting for the sweep.
func (d *Dispatcher) wakeNext(ctx context.Context, x externalDelivery, t *taken, finished bool) error {
	var w txWork
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		w = txWork{}
		free, err := db.FreeWebhookLeases(ctx, tx, t.sub.ID)
		if err != nil {
			return err
		}
		if free > 0 {
			if w.now, err = db.NextDueDeliveries(ctx, tx, t.sub.ID, free); err != nil {
				return err
			}
			if w.replayNow, err = db.NextDueReplayDeliveries(ctx, tx, t.sub.ID, free); err != nil {
				return err
			}
		}
		if finished {
			later, err := db.LaterOpenDeliveries(ctx, tx, t.ev, &t.sub.ID)
			if err != nil {
				return err
			}
			laterReplayed, err := db.LaterOpenReplayDeliveries(ctx, tx, t.ev, t.sub.ID)
			if err != nil {
				return err
			}
			w.now, w.replayNow = append(w.now, later...), append(w.replayNow, laterReplayed...)
		}
		return d.enqueue(ctx, tx, &w)
	})
	if err != nil {
		return fmt.Errorf("wake deliveries after %s: %w", x, err)
	}
	return nil
}

// take is step 1: in one short transaction it locks x, takes a lease slot
// and a rate token of its webhook and leases x. A nil *taken with no error
// means there is nothing to attempt now (w.outcome says why).
func (d *Dispatcher) take(ctx context.Context, x externalDelivery) (*taken, txWork, error) {
	var t *taken
	var w txWork
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		t, w = nil, txWork{outcome: OutcomeSkipped}
		sub, ev, ready, err := x.lock(ctx, d, tx, &w)
		if err != nil || !ready {
			return err
		}
		holder := crand.Text()
		ttl := time.Duration(sub.TimeoutMs)*time.Millisecond + leaseMargin
		slot, ok, err := db.TakeWebhookLease(ctx, tx, sub.ID, holder, ttl)
		if err != nil {
			return err
		}
		if !ok {
			return &throttledError{subscriberID: sub.ID}
		}
		if sub.RatePerSecond != nil {
			wait, err := db.TakeWebhookToken(ctx, tx, sub.ID, *sub.RatePerSecond)
			if err != nil {
				return err
			}
			if wait > 0 {
				return &throttledError{subscriberID: sub.ID, retryIn: wait}
			}
		}
		var target db.WebhookTarget
		if sub.Kind == db.SubscriberWebhook {
			if target, err = db.WebhookTargetOf(ctx, tx, sub.ID); err != nil {
				return err
			}
		}
		l, err := x.lease(ctx, tx, holder, d.instance, ttl)
		if err != nil {
			return err
		}
		t = &taken{lease: l, slot: slot, sub: sub, ev: ev, target: target, msgID: x.messageID(ev, sub)}
		return nil
	})
	if err != nil {
		return nil, txWork{}, err
	}
	return t, w, nil
}

// send is step 2: the request, with no transaction or connection held,
// in a "deliver event" span. answered is false when our own context ended
// the request (the server is stopping): there is no outcome to record.
func (d *Dispatcher) send(ctx context.Context, t *taken) (a db.Attempt, answered bool) {
	answered = true
	a, _ = d.traced(ctx, t.sub, t.ev, t.lease.Attempt, func(ctx context.Context) (db.Attempt, error) {
		var a db.Attempt
		body, err := json.Marshal(feedView(t.ev))
		if err != nil {
			a.Error = fmt.Sprintf("marshal event %d: %v", t.ev.ID, err)
			d.settle(&a, true, 0, t.lease.Attempt, t.sub)
			return a, nil
		}
		var res WebhookResult
		switch {
		case t.sub.Kind != db.SubscriberNats:
			res = d.webhooks.Send(ctx, webhookConfig(t.target, t.sub, t.msgID, d.webhookEvent(t.ev)), t.ev.ID, body)
		case d.nats == nil:
			// Another instance on the database may have NATS_URL: retry.
			res = WebhookResult{Err: errors.New("nats is not configured on this server instance (NATS_URL)")}
		default:
			res = d.nats.publish(ctx, t, d.webhookEvent(t.ev), body)
		}
		if res.Err != nil && ctx.Err() != nil {
			answered = false
			return db.Attempt{}, ctx.Err()
		}
		a.Duration, a.ResponseStatus, a.ResponseBody = res.Duration, res.Status, res.Body
		var permanent bool
		if res.Err != nil {
			a.Error = res.Err.Error()
			permanent = res.Permanent
		}
		d.settle(&a, permanent, res.RetryAfter, t.lease.Attempt, t.sub)
		if res.Status == http.StatusGone {
			// 410 Gone disables the webhook (receiverSignals) and leaves
			// its delivery open, even at its last attempt, for a resume:
			// nothing is lost.
			a.Status, a.RetryIn = db.DeliveryFailed, d.retry.Delay(int(t.lease.Attempt))
		}
		return a, nil
	})
	return a, answered
}

// webhookEvent is what a request's envelope says of ev.
func (d *Dispatcher) webhookEvent(ev db.Event) WebhookEvent {
	return WebhookEvent{Type: ev.Type, Entity: ev.Entity, EntityID: ev.EntityID, CreatedAt: ev.CreatedAt,
		DataSchema: dataSchemaURL(d.publicURL, ev.Type)}
}

// webhookConfig is the request of message msgID about ev to webhook sub
// at target: a delivery's and an example's (SendExample) alike.
func webhookConfig(target db.WebhookTarget, sub db.Subscriber, msgID string, ev WebhookEvent) WebhookConfig {
	return WebhookConfig{URL: target.URL, Secret: target.Secret, PreviousSecret: target.PreviousSecret,
		Timeout: time.Duration(sub.TimeoutMs) * time.Millisecond, MessageID: msgID, Format: WebhookFormat(target.Format), Event: ev}
}

// recordExternal is step 3: in one short transaction it stores the outcome
// on the record if the lease is still ours (and then applies the
// receiver's signals to its webhook), logs the attempt and gives the lease
// slot back, enqueueing what follows. An answer whose lease was taken over is
// logged only.
func (d *Dispatcher) recordExternal(ctx context.Context, x externalDelivery, t *taken, a db.Attempt) (txWork, error) {
	var w txWork
	var recorded bool
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		w = txWork{outcome: OutcomeSkipped}
		// The record, then the subscriber, then its lease slot: the lock
		// order of docs/architecture.md ("Locks and retries").
		var err error
		if recorded, err = x.record(ctx, d, tx, &w, t, a); err != nil {
			return err
		}
		// A late answer says nothing of the webhook now: a stale 410 must
		// not disable one an admin has resumed since.
		if recorded {
			if err := d.receiverSignals(ctx, tx, &w, t.sub, a); err != nil {
				return err
			}
		}
		if err := db.FinishAttempt(ctx, tx, t.lease, a); err != nil {
			return err
		}
		if err := db.ReleaseWebhookLease(ctx, tx, t.sub.ID, t.slot, t.lease.Holder); err != nil {
			return err
		}
		return d.enqueue(ctx, tx, &w)
	})
	if err != nil {
		return txWork{}, err
	}
	if !recorded {
		d.logger.InfoContext(ctx, "late answer logged: the delivery's lease was taken over", slog.String("delivery", x.String()),
			slog.Int("attempt", int(t.lease.Attempt)), slog.String("status", a.Status))
	}
	d.record(ctx, &w)
	return w, nil
}

// quietGap is how long a webhook may go without a failed attempt and
// still be in the same run of failures: twice the longest wait between a
// failing delivery's attempts. A longer gap means it had no traffic, not
// that it kept failing.
func quietGap(p RetryPolicy) time.Duration { return 2 * p.Max }

// receiverSignals applies what attempt a says about its webhook sub, in
// tx: a success ends its run of failures; a failure starts one, and a 410
// Gone, or a run longer than the disable-after period, disables it
// (journaled as subscriber.disabled, noted in w).
func (d *Dispatcher) receiverSignals(ctx context.Context, tx pgx.Tx, w *txWork, sub db.Subscriber, a db.Attempt) error {
	if a.Status == db.DeliveryDelivered {
		return db.NoteWebhookSuccess(ctx, tx, sub.ID)
	}
	now := d.now()
	since, err := db.NoteWebhookFailure(ctx, tx, sub.ID, now, quietGap(d.retry))
	if err != nil {
		return err
	}
	var reason string
	switch {
	case a.ResponseStatus == http.StatusGone:
		reason = db.DisabledGone
	case d.disableAfter > 0 && now.Sub(since) >= d.disableAfter:
		reason = db.DisabledFailing
	default:
		return nil
	}
	ev, ok, err := db.DisableWebhook(ctx, tx, sub, reason, now)
	if err != nil || !ok {
		return err
	}
	w.written = append(w.written, ev)
	d.logger.WarnContext(ctx, "webhook disabled", slog.Int64("subscriber_id", sub.ID), slog.String("subscriber", sub.Name),
		slog.String("reason", reason), slog.Time("failing_since", since), slog.String("last_error", a.Error))
	return nil
}

// giveBack ends an attempt whose answer our own stopping context cut off:
// it logs why, frees the lease slot and makes the record due again at once,
// with a context of its own (ctx has ended). A failure is logged: the lease
// then runs out by itself.
func (d *Dispatcher) giveBack(ctx context.Context, x externalDelivery, t *taken) {
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	err := pgx.BeginFunc(gctx, d.pool, func(tx pgx.Tx) error {
		// The record's order: the delivery, the attempt, the slot.
		if err := x.drop(gctx, tx, t.lease); err != nil {
			return err
		}
		if err := db.FinishAttempt(gctx, tx, t.lease, db.Attempt{Error: "interrupted: this server stopped before the answer came"}); err != nil {
			return err
		}
		return db.ReleaseWebhookLease(gctx, tx, t.sub.ID, t.slot, t.lease.Holder)
	})
	if err != nil {
		d.logger.WarnContext(ctx, "give back an interrupted attempt: its lease runs out by itself", slog.String("delivery", x.String()),
			slog.String("error", err.Error()))
	}
}

// liveDelivery is a delivery of the live stream (table deliveries).
type liveDelivery struct{ k db.DeliveryKey }

func (x liveDelivery) String() string {
	return fmt.Sprintf("delivery of event %d to subscriber %d", x.k.EventID, x.k.SubscriberID)
}

func (x liveDelivery) lock(ctx context.Context, d *Dispatcher, tx pgx.Tx, w *txWork) (db.Subscriber, db.Event, bool, error) {
	if _, err := db.LockOpenDelivery(ctx, tx, x.k); err != nil {
		if errors.Is(err, db.ErrNotFound) {
			return db.Subscriber{}, db.Event{}, false, nil
		}
		return db.Subscriber{}, db.Event{}, false, err
	}
	return d.readyToAttempt(ctx, tx, w, x.k)
}

func (x liveDelivery) lease(ctx context.Context, tx pgx.Tx, holder, instance string, ttl time.Duration) (db.Lease, error) {
	return db.LeaseDelivery(ctx, tx, x.k, holder, instance, ttl)
}

func (x liveDelivery) messageID(ev db.Event, sub db.Subscriber) string {
	return WebhookMessageID(ev.ID, sub.ID)
}

func (x liveDelivery) drop(ctx context.Context, tx pgx.Tx, l db.Lease) error {
	return db.DropLease(ctx, tx, x.k, l)
}

// record stores the outcome (a finished one releases the document's later
// deliveries after the commit: wakeNext).
func (x liveDelivery) record(ctx context.Context, _ *Dispatcher, tx pgx.Tx, w *txWork, t *taken, a db.Attempt) (bool, error) {
	rec, err := db.RecordLeasedAttempt(ctx, tx, x.k, t.lease, a)
	if errors.Is(err, db.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	w.outcome = rec.Status
	w.outcomes = append(w.outcomes, outcomeOf(x.k, t.ev, t.sub, t.lease.Attempt, a, rec.NextAttemptAt))
	if rec.Status == db.DeliveryFailed {
		w.retries = append(w.retries, db.Retry{Key: x.k, At: rec.NextAttemptAt})
	}
	return true, nil
}
