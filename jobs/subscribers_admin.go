package jobs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"erp/db"
)

// maxRedeliver bounds one bulk redelivery.
const maxRedeliver = 10000

// CreateWebhookSubscriber adds a webhook subscriber after checking its
// input: the URL is one the sender may send to (WebhookSender.CheckURL: a
// refused address is an error on "url") and is stored normalised
// (NormalizeWebhookURL: a raw space is an error on "url"), the filter compiles (event types
// known, entities known tables or payload names, the condition parses and
// type-checks: a *FilterError) and is stored normalised, a secret given is
// a Standard Webhooks one (ValidateWebhookSecret) and the format is known;
// the URL, which may take a DNS lookup, is checked last.
// Without a secret one is generated (NewWebhookSecret) and returned once,
// in the result's NewSecret. Errors: *db.InputError (also matching
// db.ErrConflict for a taken name).
func (d *Dispatcher) CreateWebhookSubscriber(ctx context.Context, q db.Querier, in db.WebhookSubscriberInput) (db.Subscriber, error) {
	if in.URL == nil {
		return db.Subscriber{}, &db.InputError{Field: "url", Msg: "a webhook subscriber needs a url"}
	}
	generated := ""
	if in.Secret == nil {
		secret, err := NewWebhookSecret()
		if err != nil {
			return db.Subscriber{}, err
		}
		in.Secret, generated = &secret, secret
	}
	if err := d.checkWebhookInput(ctx, &in); err != nil {
		return db.Subscriber{}, err
	}
	s, err := db.CreateWebhookSubscriber(ctx, q, in)
	if err != nil {
		return db.Subscriber{}, err
	}
	s.NewSecret = generated
	return s, nil
}

// UpdateWebhookSubscriber changes the given fields of webhook subscriber
// id, each checked as CreateWebhookSubscriber checks it (an empty condition
// removes it); errors as CreateWebhookSubscriber, and db.ErrNotFound.
func (d *Dispatcher) UpdateWebhookSubscriber(ctx context.Context, q db.Querier, id int64, in db.WebhookSubscriberInput) (db.Subscriber, error) {
	if err := d.checkWebhookInput(ctx, &in); err != nil {
		return db.Subscriber{}, err
	}
	return db.UpdateWebhookSubscriber(ctx, q, id, in)
}

// checkWebhookInput checks the given fields of in and normalises its
// filter (types and tables sorted and de-duplicated), format and URL
// (NormalizeWebhookURL).
func (d *Dispatcher) checkWebhookInput(ctx context.Context, in *db.WebhookSubscriberInput) error {
	if d.filtersErr != nil {
		return d.filtersErr
	}
	if in.Secret != nil {
		if err := ValidateWebhookSecret(*in.Secret); err != nil {
			return &db.InputError{Field: "secret", Msg: err.Error()}
		}
	}
	if err := normalizeFormat(in.Format); err != nil {
		return err
	}
	if err := d.normalizeFilter(&in.EventTypes, &in.Entities, &in.Condition); err != nil {
		return err
	}
	// Last: it may ask DNS, and an address that does not resolve must not
	// hide a mistake in the fields above.
	if in.URL != nil {
		norm, err := NormalizeWebhookURL(*in.URL)
		if err != nil {
			return &db.InputError{Field: "url", Msg: err.Error()}
		}
		*in.URL = norm
		if err := d.webhooks.CheckURL(ctx, *in.URL); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("check webhook url: %w", ctx.Err())
			}
			return &db.InputError{Field: "url", Msg: err.Error()}
		}
	}
	return nil
}

// normalizeFormat checks a format given and stores its canonical name.
func normalizeFormat(format *string) error {
	if format == nil {
		return nil
	}
	f, err := ParseWebhookFormat(*format)
	if err != nil {
		return &db.InputError{Field: "format", Msg: err.Error()}
	}
	*format = string(f)
	return nil
}

// normalizeFilter compiles a filter (event types known, entities known
// tables or payload names, the condition parses and type-checks: a
// *FilterError) and stores it normalised: types and tables sorted and
// de-duplicated. nil stays nil (unchanged on update); a list given stays a
// list, [] if empty (every one).
func (d *Dispatcher) normalizeFilter(types, entities *[]string, condition **string) error {
	if d.filtersErr != nil {
		return d.filtersErr
	}
	spec := FilterSpec{EventTypes: *types, Entities: *entities}
	if *condition != nil {
		spec.Condition = **condition
	}
	f, err := d.filters.Compile(spec)
	if err != nil {
		return err
	}
	norm := f.Spec()
	if *types != nil {
		*types = append([]string{}, norm.EventTypes...)
	}
	if *entities != nil {
		*entities = append([]string{}, norm.Entities...)
	}
	if *condition != nil {
		*condition = &norm.Condition
	}
	return nil
}

// CreateNatsSubscriber adds a NATS subscriber after checking its input
// (db.NatsSubscriberInput.Validate; the filter and format as
// CreateWebhookSubscriber checks them) and its stream: one is created
// (subjects <subjectPrefix>.>, a duplicate window of the subscriber's
// RetryPolicy.Horizon) when NATS has none of that name; an existing one
// must take the subjects and keep message ids at least as long. Errors:
// *db.InputError (this server has no NATS_URL, on "stream"; the stream
// refused; a taken name, matching db.ErrConflict; a prefix overlapping
// another NATS subscriber's), *FilterError, *NatsUnreachableError (NATS is
// down, or did not answer the stream's creation in time), or NATS could
// not be asked.
// An input the database refuses does not reach NATS: the name and prefix
// are checked first. The stream is checked with no transaction open; the
// insert then runs in a short transaction of its own that waits for any
// other NATS subscriber's creation and checks name and prefix again
// (db.CreateNatsSubscriber), so of concurrent creates with overlapping
// prefixes one is stored and the others get the same *db.InputError on
// "subjectPrefix". A create refused there, or cancelled once NATS was
// asked to make its stream (whose answer is awaited regardless), removes
// that stream unless a subscriber publishes to it.
func (d *Dispatcher) CreateNatsSubscriber(ctx context.Context, in db.NatsSubscriberInput) (db.Subscriber, error) {
	if d.nats == nil {
		return db.Subscriber{}, &db.InputError{Field: "stream", Msg: "this server has no NATS: start it with NATS_URL (e.g. nats://localhost:4222) to publish to JetStream"}
	}
	if err := in.Validate(true); err != nil {
		return db.Subscriber{}, err
	}
	if err := normalizeFormat(in.Format); err != nil {
		return db.Subscriber{}, err
	}
	if err := d.normalizeFilter(&in.EventTypes, &in.Entities, &in.Condition); err != nil {
		return db.Subscriber{}, err
	}
	attempts, timeout := cmp.Or(ptrValue(in.MaxAttempts), db.DefaultMaxAttempts), cmp.Or(ptrValue(in.TimeoutMs), db.DefaultTimeoutMs)
	horizon := d.retry.Horizon(int(attempts), time.Duration(timeout)*time.Millisecond)
	// Checked again at the insert; checked here so that NATS is asked
	// nothing about an input refused anyway.
	if err := db.NatsSubscriberClash(ctx, d.pool, 0, in.Name, in.SubjectPrefix); err != nil {
		return db.Subscriber{}, err
	}
	created, err := d.nats.ensureStream(ctx, *in.Stream, *in.SubjectPrefix, horizon, true)
	if err != nil {
		return db.Subscriber{}, err
	}
	var sub db.Subscriber
	err = runTx(ctx, d.pool, func(tx pgx.Tx) (err error) {
		sub, err = db.CreateNatsSubscriber(ctx, tx, in)
		return err
	})
	if err != nil && created {
		d.dropUnusedStream(ctx, *in.Stream)
	}
	return sub, err
}

// dropUnusedStream removes stream, made by a create the database then
// refused, unless a subscriber publishes to it: a concurrent create of the
// same stream may have made it too (and been stored, or be committing:
// the check waits for it). A create of the same stream not yet at its
// insert is not seen. It runs to the end (at most recordTimeout) when ctx
// is done, as it is when the request that made the stream was cancelled.
// A failure is logged, not returned: the refusal is the caller's answer.
func (d *Dispatcher) dropUnusedStream(ctx context.Context, stream string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	var used bool
	err := runTx(ctx, d.pool, func(tx pgx.Tx) (err error) {
		used, err = db.NatsStreamInUse(ctx, tx, stream)
		return err
	})
	if err == nil && !used {
		err = d.nats.deleteStream(ctx, stream)
	}
	if err != nil {
		d.logger.WarnContext(ctx, "a NATS stream made for a refused subscriber stays", slog.String("stream", stream), slog.String("error", err.Error()))
	}
}

// UpdateNatsSubscriber changes the given fields of NATS subscriber id,
// each checked as CreateNatsSubscriber checks it; a new maxAttempts or
// timeoutMs that lengthens the retry schedule must still fit the stream's
// duplicate window, and only then is NATS asked. Errors as
// CreateNatsSubscriber (*NatsUnreachableError while NATS is down), and
// db.ErrNotFound.
func (d *Dispatcher) UpdateNatsSubscriber(ctx context.Context, q db.Querier, id int64, in db.NatsSubscriberInput) (db.Subscriber, error) {
	if err := in.Validate(false); err != nil {
		return db.Subscriber{}, err
	}
	if err := normalizeFormat(in.Format); err != nil {
		return db.Subscriber{}, err
	}
	if err := d.normalizeFilter(&in.EventTypes, &in.Entities, &in.Condition); err != nil {
		return db.Subscriber{}, err
	}
	if in.MaxAttempts != nil || in.TimeoutMs != nil {
		cur, err := db.SubscriberByID(ctx, q, id)
		if err != nil || cur.Kind != db.SubscriberNats {
			return db.Subscriber{}, fmt.Errorf("there is no NATS subscriber %d: %w", id, db.ErrNotFound)
		}
		if err := db.NatsSubscriberClash(ctx, q, id, in.Name, nil); err != nil {
			return db.Subscriber{}, err
		}
		attempts, timeout := cmp.Or(ptrValue(in.MaxAttempts), cur.MaxAttempts), cmp.Or(ptrValue(in.TimeoutMs), cur.TimeoutMs)
		horizon := d.retry.Horizon(int(attempts), time.Duration(timeout)*time.Millisecond)
		// A schedule no longer than the one the stream was checked for
		// needs no new look at it: NATS may be down meanwhile.
		if horizon > d.retry.Horizon(int(cur.MaxAttempts), time.Duration(cur.TimeoutMs)*time.Millisecond) {
			if d.nats == nil {
				return db.Subscriber{}, &db.InputError{Field: "maxAttempts", Msg: "this server has no NATS (NATS_URL) to check the stream's duplicate window against"}
			}
			if _, err := d.nats.ensureStream(ctx, deref(cur.Stream), deref(cur.SubjectPrefix), horizon, false); err != nil {
				return db.Subscriber{}, err
			}
		}
	}
	return db.UpdateNatsSubscriber(ctx, q, id, in)
}

func ptrValue[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// SetPaused pauses or resumes subscriber id, by actorID; resuming
// schedules its held deliveries at once, and resuming a paused one (a
// disabled webhook included) journals subscriber.enabled. db.ErrNotFound
// for no such subscriber.
func (d *Dispatcher) SetPaused(ctx context.Context, actorID *int64, id int64, paused bool) (db.Subscriber, error) {
	var sub db.Subscriber
	err := runTx(ctx, d.pool, func(tx pgx.Tx) error {
		s, held, enabled, err := db.SetSubscriberPaused(ctx, tx, actorID, id, paused)
		if err != nil {
			return err
		}
		sub = s
		w := txWork{now: held}
		if enabled != nil {
			w.written = append(w.written, *enabled)
		}
		if !paused {
			if w.replayNow, err = db.OpenReplayDeliveriesOf(ctx, tx, id); err != nil {
				return err
			}
		}
		return d.enqueue(ctx, tx, &w)
	})
	return sub, err
}

// Redeliver reopens the deliveries matching f (at most 10,000), journals a
// delivery.redelivered event for each by actorID, and schedules them, all in
// one transaction, run again as Write's when PostgreSQL fails it for a
// deadlock (it locks the events' documents). It returns the reopened
// deliveries' keys.
func (d *Dispatcher) Redeliver(ctx context.Context, actorID *int64, f db.DeliveryFilter) ([]db.DeliveryKey, error) {
	var keys []db.DeliveryKey
	err := runTx(ctx, d.pool, func(tx pgx.Tx) error {
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

// RotateWebhookSecret gives webhook subscriber id a new secret
// (NewWebhookSecret), by actorID; the old one stays valid for grace (0 to
// db.MaxSecretGrace, whole seconds), during which every request, replays
// and redeliveries included, carries both signatures. It journals
// subscriber.secret_rotated and returns the subscriber with the new secret
// in NewSecret (this once) and PreviousSecretValidUntil. Errors:
// *db.InputError on "graceSeconds", db.ErrNotFound (no webhook subscriber
// id).
func (d *Dispatcher) RotateWebhookSecret(ctx context.Context, actorID *int64, id int64, grace time.Duration) (db.Subscriber, error) {
	secret, err := NewWebhookSecret()
	if err != nil {
		return db.Subscriber{}, err
	}
	var out db.Subscriber
	err = runTx(ctx, d.pool, func(tx pgx.Tx) error {
		s, ev, err := db.RotateWebhookSecret(ctx, tx, actorID, id, secret, grace)
		if err != nil {
			return err
		}
		out = s
		return d.enqueue(ctx, tx, &txWork{written: []db.Event{ev}})
	})
	if err != nil {
		return db.Subscriber{}, err
	}
	out.NewSecret = secret
	return out, nil
}

// ConditionResult is the outcome of TestCondition. A condition that does
// not compile (or is blank) has Matches nil, Error why and, when known,
// Line and Column (1-based). One that compiles has Matches whether a
// subscriber with it takes the event; when evaluating failed, Matches is
// false (as delivery then decides) and Error says why.
type ConditionResult struct {
	Matches      *bool
	Error        *string
	Line, Column *int
}

// TestCondition compiles condition as a subscriber's (Filters.Compile) and
// evaluates it on ev (Filter.Takes), writing nothing. A condition that
// does not compile is a result, not an error; the error is only the
// server's (its filters failed to build).
func (d *Dispatcher) TestCondition(condition string, ev db.Event) (ConditionResult, error) {
	if d.filtersErr != nil {
		return ConditionResult{}, d.filtersErr
	}
	if strings.TrimSpace(condition) == "" {
		msg := `the condition is blank: write a CEL expression over event, e.g. event.payload.entity == "sales_order"`
		return ConditionResult{Error: &msg}, nil
	}
	f, err := d.filters.Compile(FilterSpec{Condition: condition})
	if fe, ok := errors.AsType[*FilterError](err); ok {
		res := ConditionResult{Error: &fe.Msg}
		if fe.Line > 0 && fe.Column > 0 {
			res.Line, res.Column = &fe.Line, &fe.Column
		}
		return res, nil
	}
	if err != nil {
		return ConditionResult{}, err
	}
	ok, err := f.Takes(ev)
	res := ConditionResult{Matches: &ok}
	if err != nil {
		msg := err.Error()
		res.Error = &msg
	}
	return res, nil
}
