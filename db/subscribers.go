package db

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"erp/db/internal/dbsqlc"
)

// Subscriber is a row of subscribers: a built-in handler, a webhook or a
// NATS JetStream publisher.
// The webhook secret is never read back out; HasSecret tells whether one is
// set.
type Subscriber struct {
	ID   int64
	Name string
	Kind string
	// EventTypes and Entities (tables, events.entity) it takes; empty
	// means every one. Condition is a CEL expression the events must also
	// satisfy (package jobs compiles it); empty means none.
	EventTypes []string
	Entities   []string
	Condition  string
	URL        *string
	// Stream and SubjectPrefix are a NATS subscriber's (nil otherwise):
	// the JetStream stream its publishes are stored in and the subject
	// prefix of <prefix>.<entity>.<entity id>.<type>.
	Stream        *string
	SubjectPrefix *string
	// Format is a webhook's or NATS subscriber's body format:
	// FormatStandardWebhooks or FormatCloudEvents.
	Format      string
	HasSecret   bool
	MaxAttempts int32
	TimeoutMs   int32
	// MaxInFlight is how many requests to a webhook may be in flight at
	// once across every instance on the database (1…100); RatePerSecond,
	// if set, how many it may get per second on average (TakeWebhookToken).
	MaxInFlight   int32
	RatePerSecond *float64
	Paused        bool
	CreatedAt     time.Time
	UpdatedAt     time.Time
	// PreviousSecretValidUntil is, during a webhook's secret rotation
	// (RotateWebhookSecret), when the previous secret stops being valid;
	// nil when no previous secret is valid now.
	PreviousSecretValidUntil *time.Time
	// NewSecret is the secret in clear, set only in the value
	// CreateWebhookSubscriber or RotateWebhookSecret (package jobs)
	// returns, so that the client can be told it once; empty whenever a
	// subscriber is read back.
	NewSecret string
}

// Webhook body formats (subscribers.format).
const (
	FormatStandardWebhooks = "standard_webhooks"
	FormatCloudEvents      = "cloudevents"
)

// WebhookSubscriberInput creates or (fields set) updates a webhook
// subscriber. The URL must already be validated by the caller (package jobs
// knows what it can send to).
//
// EventTypes, Entities and Condition are the filter as package jobs
// normalised and compiled it (nil or absent: unchanged on update; an empty
// Condition given removes it). Format is FormatStandardWebhooks or
// FormatCloudEvents.
type WebhookSubscriberInput struct {
	Name        *string
	URL         *string
	EventTypes  []string
	Entities    []string
	Condition   *string
	Format      *string
	Secret      *string
	MaxAttempts *int32
	TimeoutMs   *int32
	// MaxInFlight: 1…100 (default DefaultMaxInFlight). RatePerSecond:
	// MinRatePerSecond…MaxRatePerSecond; on update 0 removes the limit.
	MaxInFlight   *int32
	RatePerSecond *float64
}

// An external subscriber's limits when none is given (the columns'
// defaults): max_in_flight, max_attempts and timeout_ms.
const (
	DefaultMaxInFlight = 4
	DefaultMaxAttempts = 10
	DefaultTimeoutMs   = 10000
)

func (in WebhookSubscriberInput) validate(creating bool) error {
	if creating && (in.Name == nil || in.URL == nil) {
		return inputErr("name", "a webhook subscriber needs a name and a url")
	}
	if in.URL != nil && len(*in.URL) > maxWebhookURL {
		return inputErr("url", "at most %d characters", maxWebhookURL)
	}
	if in.Secret != nil && len(*in.Secret) > maxWebhookSecret {
		return inputErr("secret", "at most %d characters", maxWebhookSecret)
	}
	return externalInput{Name: in.Name, EventTypes: in.EventTypes, Entities: in.Entities, Format: in.Format,
		MaxAttempts: in.MaxAttempts, TimeoutMs: in.TimeoutMs, MaxInFlight: in.MaxInFlight,
		RatePerSecond: in.RatePerSecond}.validate(creating)
}

// externalInput is what every external subscriber (webhook, NATS) is
// given alike: its name, filter lists, format and limits.
type externalInput struct {
	Name                                *string
	EventTypes, Entities                []string
	Format                              *string
	MaxAttempts, TimeoutMs, MaxInFlight *int32
	RatePerSecond                       *float64
}

func (in externalInput) validate(creating bool) error {
	if in.Name != nil && !validSubscriberName(*in.Name) {
		return inputErr("name", "1 to 64 lowercase letters, digits, '_', '.', '-', starting with a letter or digit")
	}
	if len(in.EventTypes) > maxSubscriberTypes {
		return inputErr("eventTypes", "at most %d event types", maxSubscriberTypes)
	}
	for i, t := range in.EventTypes {
		if strings.TrimSpace(t) == "" || len(t) > 100 {
			return inputErr(fmt.Sprintf("eventTypes.%d", i), "1 to 100 characters")
		}
	}
	if len(in.Entities) > maxSubscriberTypes {
		return inputErr("entities", "at most %d entities", maxSubscriberTypes)
	}
	if in.Format != nil && *in.Format != FormatStandardWebhooks && *in.Format != FormatCloudEvents {
		return inputErr("format", "%s or %s", FormatStandardWebhooks, FormatCloudEvents)
	}
	if in.MaxAttempts != nil && (*in.MaxAttempts < 1 || *in.MaxAttempts > 100) {
		return inputErr("maxAttempts", "must be between 1 and 100")
	}
	if in.TimeoutMs != nil && (*in.TimeoutMs < 100 || *in.TimeoutMs > 120000) {
		return inputErr("timeoutMs", "must be between 100 and 120000 ms")
	}
	if in.MaxInFlight != nil && (*in.MaxInFlight < 1 || *in.MaxInFlight > 100) {
		return inputErr("maxInFlight", "must be between 1 and 100")
	}
	if r := in.RatePerSecond; r != nil && !validRate(*r, creating) {
		if creating {
			return inputErr("ratePerSecond", "must be between %v and %v", MinRatePerSecond, MaxRatePerSecond)
		}
		return inputErr("ratePerSecond", "must be between %v and %v, or 0 to remove the limit", MinRatePerSecond, MaxRatePerSecond)
	}
	return nil
}

// MinRatePerSecond and MaxRatePerSecond bound a subscriber's
// ratePerSecond (requests or publishes per second). The floor, one every
// 1000 s (about 17 minutes), is slower than any receiver needs (pause a
// subscriber to stop it) and keeps the gap between tokens far inside a
// time.Duration.
const (
	MinRatePerSecond = 0.001
	MaxRatePerSecond = 10000
)

// validRate tells whether r is a ratePerSecond to write: in
// [MinRatePerSecond, MaxRatePerSecond], or 0 (remove the limit) on update.
// NaN is neither.
func validRate(r float64, creating bool) bool {
	if r == 0 {
		return !creating
	}
	return r >= MinRatePerSecond && r <= MaxRatePerSecond
}

func validSubscriberName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i, r := range s {
		ok := (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || (i > 0 && (r == '_' || r == '.' || r == '-'))
		if !ok {
			return false
		}
	}
	return true
}

// UpsertBuiltinSubscriber records a built-in subscriber and its filter
// (event types, entities, condition; empty: every one, none), so that
// deliveries to it are planned and recorded like any other. Run at start.
func UpsertBuiltinSubscriber(ctx context.Context, q Querier, name string, eventTypes, entities []string, condition string) (Subscriber, error) {
	if eventTypes == nil {
		eventTypes = []string{}
	}
	if entities == nil {
		entities = []string{}
	}
	row, err := queries.SubscriberUpsertBuiltin(ctx, q, name, eventTypes, entities, nonEmpty(condition))
	if err != nil {
		return Subscriber{}, fmt.Errorf("register built-in subscriber %s: %w", name, translate(err))
	}
	return subscriberFrom(dbsqlc.SubscriberRow(row)), nil
}

// CreateWebhookSubscriber inserts a webhook subscriber. A taken name is an
// *InputError on "name" matching ErrConflict.
func CreateWebhookSubscriber(ctx context.Context, q Querier, in WebhookSubscriberInput) (Subscriber, error) {
	if err := in.validate(true); err != nil {
		return Subscriber{}, err
	}
	types, entities := in.EventTypes, in.Entities
	if types == nil {
		types = []string{}
	}
	if entities == nil {
		entities = []string{}
	}
	var cond *string
	if in.Condition != nil {
		cond = nonEmpty(*in.Condition)
	}
	row, err := queries.SubscriberInsertWebhook(ctx, q, dbsqlc.SubscriberInsertWebhookParams{Name: *in.Name, Url: in.URL,
		EventTypes: types, Entities: entities, Condition: cond, Format: in.Format, Secret: in.Secret,
		MaxAttempts: in.MaxAttempts, TimeoutMs: in.TimeoutMs, MaxInFlight: in.MaxInFlight, RatePerSecond: in.RatePerSecond})
	if err != nil {
		return Subscriber{}, webhookWriteErr(err, in, "insert webhook subscriber "+*in.Name)
	}
	return subscriberFrom(dbsqlc.SubscriberRow(row)), nil
}

// UpdateWebhookSubscriber changes the given fields of webhook subscriber id
// (EventTypes nil keeps them; empty means every type). ErrNotFound if there
// is no such webhook subscriber.
func UpdateWebhookSubscriber(ctx context.Context, q Querier, id int64, in WebhookSubscriberInput) (Subscriber, error) {
	if err := in.validate(false); err != nil {
		return Subscriber{}, err
	}
	row, err := queries.SubscriberUpdateWebhook(ctx, q, dbsqlc.SubscriberUpdateWebhookParams{ID: id, Name: in.Name,
		Url: in.URL, EventTypes: in.EventTypes, Entities: in.Entities, Condition: in.Condition, Format: in.Format,
		Secret: in.Secret, MaxAttempts: in.MaxAttempts, TimeoutMs: in.TimeoutMs, MaxInFlight: in.MaxInFlight,
		RatePerSecond: in.RatePerSecond})
	if errors.Is(err, pgx.ErrNoRows) {
		return Subscriber{}, noWebhook(ctx, q, id)
	}
	if err != nil {
		return Subscriber{}, webhookWriteErr(err, in, fmt.Sprintf("update webhook subscriber %d", id))
	}
	return subscriberFrom(dbsqlc.SubscriberRow(row)), nil
}

// noWebhook is the ErrNotFound of a webhook mutation given id, which names
// no webhook subscriber; the message says so of a built-in one, whose
// filter is its code's.
func noWebhook(ctx context.Context, q Querier, id int64) error {
	if s, err := queries.SubscriberGetByID(ctx, q, id); err == nil && s.Kind == SubscriberBuiltin {
		return fmt.Errorf("subscriber %d (%s) is built in, not a webhook: only pauseSubscriber and resumeSubscriber apply to it: %w",
			id, s.Name, ErrNotFound)
	}
	return fmt.Errorf("there is no webhook subscriber %d: %w", id, ErrNotFound)
}

// webhookWriteErr is the error of writing webhook subscriber in: a taken
// name is an *InputError on "name" matching ErrConflict.
func webhookWriteErr(err error, in WebhookSubscriberInput, action string) error {
	return nameTaken(err, in.Name, action)
}

// nameTaken is the error of writing a subscriber named name: a taken name
// is an *InputError on "name" matching ErrConflict.
func nameTaken(err error, name *string, action string) error {
	err = translate(err)
	if errors.Is(err, ErrConflict) && name != nil {
		return conflictOn("name", "a subscriber named %q exists", *name)
	}
	return fmt.Errorf("%s: %w", action, err)
}

// NatsSubscriberInput creates or (fields set) updates a NATS subscriber:
// as WebhookSubscriberInput, with Stream (a JetStream stream name: 1 to 64
// of A-Z a-z 0-9 _ -) and SubjectPrefix (NATS subject tokens of A-Z a-z
// 0-9 _ - joined by dots, at most 128 characters; no wildcards, no $ and
// not under _INBOX, NATS's own) instead of
// a URL and a secret. Both are set at creation only.
type NatsSubscriberInput struct {
	Name          *string
	Stream        *string
	SubjectPrefix *string
	EventTypes    []string
	Entities      []string
	Condition     *string
	Format        *string
	MaxAttempts   *int32
	TimeoutMs     *int32
	MaxInFlight   *int32
	RatePerSecond *float64
}

// Validate checks in's fields (creating: name, stream and subjectPrefix
// are required) and returns an *InputError naming the first bad one.
func (in NatsSubscriberInput) Validate(creating bool) error {
	if creating && (in.Name == nil || in.Stream == nil || in.SubjectPrefix == nil) {
		return inputErr("name", "a NATS subscriber needs a name, a stream and a subjectPrefix")
	}
	if in.Stream != nil && !natsStreamName.MatchString(*in.Stream) {
		return inputErr("stream", "1 to 64 of A-Z a-z 0-9 _ -")
	}
	if p := in.SubjectPrefix; p != nil && (len(*p) > 128 || !natsSubjectPrefix.MatchString(*p)) {
		return inputErr("subjectPrefix", "NATS subject tokens of A-Z a-z 0-9 _ - joined by dots, at most 128 characters, no wildcards (* >) or spaces, e.g. erp.journal")
	}
	if p := in.SubjectPrefix; p != nil && (*p == "_INBOX" || strings.HasPrefix(*p, "_INBOX.")) {
		return inputErr("subjectPrefix", "_INBOX is NATS's for replies: a stream on it would capture every reply; choose another prefix, e.g. erp.journal")
	}
	return externalInput{Name: in.Name, EventTypes: in.EventTypes, Entities: in.Entities, Format: in.Format,
		MaxAttempts: in.MaxAttempts, TimeoutMs: in.TimeoutMs, MaxInFlight: in.MaxInFlight,
		RatePerSecond: in.RatePerSecond}.validate(creating)
}

// The migration's CHECKs on subscribers.stream and subject_prefix.
var (
	natsStreamName    = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	natsSubjectPrefix = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)
)

// CreateNatsSubscriber inserts a NATS subscriber (in validated, its
// filter normalised by the caller) in tx, after waiting for every other
// transaction creating one to end and checking NatsSubscriberClash in
// that order: of concurrent creates with overlapping prefixes, the first
// to take the lock is inserted and the others get NatsSubscriberClash's
// *InputError on "subjectPrefix". A taken name is an *InputError on
// "name" matching ErrConflict. tx should end soon: it holds up every other
// create.
func CreateNatsSubscriber(ctx context.Context, tx pgx.Tx, in NatsSubscriberInput) (Subscriber, error) {
	if err := in.Validate(true); err != nil {
		return Subscriber{}, err
	}
	if err := queries.SubscriberNatsCreateLock(ctx, tx); err != nil {
		return Subscriber{}, fmt.Errorf("lock NATS subscriber creation: %w", translate(err))
	}
	if err := NatsSubscriberClash(ctx, tx, 0, in.Name, in.SubjectPrefix); err != nil {
		return Subscriber{}, err
	}
	types, entities := in.EventTypes, in.Entities
	if types == nil {
		types = []string{}
	}
	if entities == nil {
		entities = []string{}
	}
	var cond *string
	if in.Condition != nil {
		cond = nonEmpty(*in.Condition)
	}
	row, err := queries.SubscriberInsertNats(ctx, tx, dbsqlc.SubscriberInsertNatsParams{Name: *in.Name, Stream: in.Stream,
		SubjectPrefix: in.SubjectPrefix, EventTypes: types, Entities: entities, Condition: cond, Format: in.Format,
		MaxAttempts: in.MaxAttempts, TimeoutMs: in.TimeoutMs, MaxInFlight: in.MaxInFlight, RatePerSecond: in.RatePerSecond})
	if err != nil {
		return Subscriber{}, nameTaken(err, in.Name, "insert NATS subscriber "+*in.Name)
	}
	return subscriberFrom(dbsqlc.SubscriberRow(row)), nil
}

// NatsSubscriberClash checks what the database would refuse of NATS
// subscriber id (0: a new one) named name publishing under prefix (nil:
// unchanged), so that NATS is asked nothing about an input refused
// anyway: a taken name is an *InputError on "name" matching ErrConflict;
// a prefix equal to, covering or covered by another NATS subscriber's
// (both would store the same events) an *InputError on "subjectPrefix"
// naming it. Against a writer in between, the update still checks the
// name (a unique constraint) and CreateNatsSubscriber both again.
func NatsSubscriberClash(ctx context.Context, q Querier, id int64, name, prefix *string) error {
	rows, err := queries.SubscriberClashList(ctx, q, id, name, prefix)
	if err != nil {
		return fmt.Errorf("list subscribers clashing with NATS subscriber %d: %w", id, translate(err))
	}
	for _, r := range rows {
		if name != nil && r.Name == *name {
			return conflictOn("name", "a subscriber named %q exists", *name)
		}
	}
	if len(rows) > 0 {
		return inputErr("subjectPrefix", "NATS subscriber %q publishes under %s: prefix %s would store the same events again; choose a prefix that neither covers nor is covered by it",
			rows[0].Name, *rows[0].SubjectPrefix, *prefix)
	}
	return nil
}

// NatsStreamInUse tells whether a NATS subscriber publishes to stream. It
// first waits for a NATS subscriber creation under way (its lock, held to
// the end of tx), so that a subscriber still committing is seen.
func NatsStreamInUse(ctx context.Context, tx pgx.Tx, stream string) (bool, error) {
	if err := queries.SubscriberNatsCreateLock(ctx, tx); err != nil {
		return false, fmt.Errorf("lock NATS subscriber creation: %w", translate(err))
	}
	used, err := queries.SubscriberNatsStreamInUse(ctx, tx, &stream)
	if err != nil {
		return false, fmt.Errorf("look up NATS subscribers of stream %s: %w", stream, translate(err))
	}
	return used, nil
}

// UpdateNatsSubscriber changes the given fields of NATS subscriber id; a
// Stream or SubjectPrefix given is an *InputError (they are fixed).
// ErrNotFound if there is no such NATS subscriber.
func UpdateNatsSubscriber(ctx context.Context, q Querier, id int64, in NatsSubscriberInput) (Subscriber, error) {
	if in.Stream != nil {
		return Subscriber{}, inputErr("stream", "is fixed at creation: create another subscriber for another stream")
	}
	if in.SubjectPrefix != nil {
		return Subscriber{}, inputErr("subjectPrefix", "is fixed at creation: create another subscriber for another prefix")
	}
	if err := in.Validate(false); err != nil {
		return Subscriber{}, err
	}
	row, err := queries.SubscriberUpdateNats(ctx, q, dbsqlc.SubscriberUpdateNatsParams{ID: id, Name: in.Name,
		EventTypes: in.EventTypes, Entities: in.Entities, Condition: in.Condition, Format: in.Format,
		MaxAttempts: in.MaxAttempts, TimeoutMs: in.TimeoutMs, MaxInFlight: in.MaxInFlight, RatePerSecond: in.RatePerSecond})
	if errors.Is(err, pgx.ErrNoRows) {
		return Subscriber{}, fmt.Errorf("there is no NATS subscriber %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return Subscriber{}, nameTaken(err, in.Name, fmt.Sprintf("update NATS subscriber %d", id))
	}
	return subscriberFrom(dbsqlc.SubscriberRow(row)), nil
}

// SetSubscriberPaused pauses or resumes subscriber id, by actorID. A paused
// subscriber's deliveries are recorded but held until it is resumed (a
// paused built-in one holds its events unprocessed; a webhook's never
// do). Resuming a paused subscriber ends a disabled webhook's disabled
// state and run of failures and journals subscriber.enabled (payload:
// the reason it had been disabled for, or null) about it. It returns the
// subscriber, the keys of its open deliveries (to schedule on resume) and
// the event journaled, if any.
func SetSubscriberPaused(ctx context.Context, tx pgx.Tx, actorID *int64, id int64, paused bool) (Subscriber, []DeliveryKey, *Event, error) {
	row, err := queries.SubscriberSetPaused(ctx, tx, paused, id)
	if err != nil {
		return Subscriber{}, nil, nil, fmt.Errorf("set subscriber %d paused=%t: %w", id, paused, translate(err))
	}
	s := subscriberFrom(dbsqlc.SubscriberRow{ID: row.ID, Name: row.Name, Kind: row.Kind, EventTypes: row.EventTypes,
		Url: row.Url, HasSecret: row.HasSecret, MaxAttempts: row.MaxAttempts, TimeoutMs: row.TimeoutMs, Paused: row.Paused,
		CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt, Entities: row.Entities, Condition: row.Condition,
		Format: row.Format, MaxInFlight: row.MaxInFlight, RatePerSecond: row.RatePerSecond, Stream: row.Stream,
		SubjectPrefix: row.SubjectPrefix, PreviousSecretUntil: row.PreviousSecretUntil})
	if paused {
		return s, nil, nil, nil
	}
	var enabled *Event
	if row.WasPaused {
		ev, err := appendEvent(ctx, tx, actorID, EventSubscriberEnabled, EntitySubscribers, s.ID,
			map[string]any{"subscriber": s.Name, "was_disabled": row.WasDisabled})
		if err != nil {
			return Subscriber{}, nil, nil, err
		}
		enabled = &ev
	}
	rows, err := queries.DeliveryListOpenKeysOfSubscriber(ctx, tx, id)
	if err != nil {
		return Subscriber{}, nil, nil, fmt.Errorf("open deliveries of subscriber %d: %w", id, translate(err))
	}
	return s, keysFrom(rows), enabled, nil
}

// Why a webhook was disabled (subscribers.disabled_reason, and the
// reason of subscriber.disabled): it answered 410 Gone, or it failed
// continuously for the disable-after period.
const (
	DisabledGone    = "gone"
	DisabledFailing = "failing"
)

// NoteWebhookFailure notes, in tx, a failed attempt to webhook id at now
// (the caller's clock): it starts the webhook's run of failures unless one
// runs whose last failure is no older than quietGap (a longer quiet spell,
// a webhook without traffic, breaks the run). It returns when the run
// began.
func NoteWebhookFailure(ctx context.Context, tx pgx.Tx, id int64, now time.Time, quietGap time.Duration) (time.Time, error) {
	since, err := queries.SubscriberNoteFailure(ctx, tx, now.Add(-quietGap), now, id)
	if err != nil {
		return time.Time{}, fmt.Errorf("note failure of subscriber %d: %w", id, translate(err))
	}
	if since == nil {
		return now, nil
	}
	return *since, nil
}

// NoteWebhookSuccess ends webhook id's run of failures, if one runs
// (otherwise it writes nothing, so a healthy webhook's row stays cold).
func NoteWebhookSuccess(ctx context.Context, q Querier, id int64) error {
	if err := queries.SubscriberNoteSuccess(ctx, q, id); err != nil {
		return fmt.Errorf("note success of subscriber %d: %w", id, translate(err))
	}
	return nil
}

// DisableWebhook pauses webhook sub for reason (DisabledGone or
// DisabledFailing) and journals subscriber.disabled about it, by the
// system, with payload {"subscriber", "reason", "since"}: since is when
// its run of failures began, or now. ok is false, and nothing is
// written, when it was disabled already.
func DisableWebhook(ctx context.Context, tx pgx.Tx, sub Subscriber, reason string, now time.Time) (ev Event, ok bool, err error) {
	since, err := queries.SubscriberDisable(ctx, tx, &reason, sub.ID)
	if errors.Is(err, pgx.ErrNoRows) {
		return Event{}, false, nil
	}
	if err != nil {
		return Event{}, false, fmt.Errorf("disable subscriber %d: %w", sub.ID, translate(err))
	}
	if since == nil {
		since = &now
	}
	ev, err = appendEvent(ctx, tx, nil, EventSubscriberDisabled, EntitySubscribers, sub.ID,
		map[string]any{"subscriber": sub.Name, "reason": reason, "since": since.UTC().Format(time.RFC3339Nano)})
	if err != nil {
		return Event{}, false, err
	}
	return ev, true, nil
}

// SubscriberByID returns subscriber id, or ErrNotFound.
func SubscriberByID(ctx context.Context, q Querier, id int64) (Subscriber, error) {
	return one(subscriberFrom, "get subscriber", id)(queries.SubscriberGetByID(ctx, q, id))
}

// SubscribersByIDs returns the subscribers with the given ids (table
// subscribers), in id order; ids that do not exist are skipped.
func SubscribersByIDs(ctx context.Context, q Querier, ids []int64) ([]Subscriber, error) {
	if ids == nil {
		ids = []int64{}
	}
	rows, err := queries.SubscriberListByIDs(ctx, q, ids)
	if err != nil {
		return nil, fmt.Errorf("get %d subscribers: %w", len(ids), translate(err))
	}
	return mapRows(rows, func(r dbsqlc.SubscriberListByIDsRow) Subscriber { return subscriberFrom(dbsqlc.SubscriberRow(r)) }), nil
}

// Subscribers lists every subscriber by name.
func Subscribers(ctx context.Context, q Querier) ([]Subscriber, error) {
	rows, err := queries.SubscriberList(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("list subscribers: %w", translate(err))
	}
	return mapRows(rows, subscriberFrom), nil
}

func subscriberFrom(r dbsqlc.SubscriberRow) Subscriber {
	return Subscriber{ID: r.ID, Name: r.Name, Kind: r.Kind, EventTypes: r.EventTypes, Entities: r.Entities,
		Condition: deref(r.Condition), URL: r.Url, Stream: r.Stream, SubjectPrefix: r.SubjectPrefix, Format: r.Format, HasSecret: r.HasSecret,
		MaxAttempts: r.MaxAttempts, TimeoutMs: r.TimeoutMs, MaxInFlight: r.MaxInFlight, RatePerSecond: r.RatePerSecond,
		Paused: r.Paused, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
		PreviousSecretValidUntil: validUntil(r.PreviousSecretUntil, time.Now())}
}

// validUntil is until while it is after now, else nil: the column keeps a
// grace period's end after it has passed.
func validUntil(until *time.Time, now time.Time) *time.Time {
	if until == nil || !until.After(now) {
		return nil
	}
	return until
}

// nonEmpty is s, or nil (SQL NULL) when it is empty.
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// WebhookTargetOf returns the endpoint of webhook subscriber id.
func WebhookTargetOf(ctx context.Context, q Querier, id int64) (WebhookTarget, error) {
	row, err := queries.SubscriberGetWebhookTarget(ctx, q, id)
	if err != nil {
		return WebhookTarget{}, fmt.Errorf("webhook target %d: %w", id, translate(err))
	}
	return WebhookTarget{URL: row.Url, Secret: row.Secret, PreviousSecret: row.PreviousSecret,
		TimeoutMs: row.TimeoutMs, Format: row.Format}, nil
}

// WebhookTarget is what sending needs of a webhook subscriber, secrets
// included; it never leaves package jobs. PreviousSecret is the secret
// before a rotation while its grace period runs, else empty. Format is
// FormatStandardWebhooks or FormatCloudEvents.
type WebhookTarget struct {
	URL            string
	Secret         string
	PreviousSecret string
	TimeoutMs      int32
	Format         string
}

// MaxSecretGrace is the longest grace period RotateWebhookSecret keeps a
// previous secret valid for: 30 days.
const MaxSecretGrace = 30 * 24 * time.Hour

// RotateWebhookSecret replaces webhook id's secret with secret (checked by
// the caller) in tx, by actorID. The secret it had stays valid for grace
// (0 to MaxSecretGrace, whole seconds): until then requests carry both
// signatures. A second rotation within the grace period drops the oldest
// secret: only the one just replaced stays valid. It journals
// subscriber.secret_rotated and returns the subscriber (with
// PreviousSecretValidUntil) and the event. Errors: *InputError on "graceSeconds", ErrNotFound (no
// webhook subscriber id).
func RotateWebhookSecret(ctx context.Context, tx pgx.Tx, actorID *int64, id int64, secret string, grace time.Duration) (Subscriber, Event, error) {
	if grace < 0 || grace > MaxSecretGrace || grace%time.Second != 0 {
		return Subscriber{}, Event{}, inputErr("graceSeconds", "whole seconds from 0 (the old secret ends at once) to %d (30 days), not %s",
			int(MaxSecretGrace/time.Second), strconv.FormatFloat(grace.Seconds(), 'f', -1, 64))
	}
	row, err := queries.SubscriberRotateSecret(ctx, tx, &secret, int32(grace/time.Second), id)
	if errors.Is(err, pgx.ErrNoRows) {
		return Subscriber{}, Event{}, noWebhook(ctx, tx, id)
	}
	if err != nil {
		return Subscriber{}, Event{}, fmt.Errorf("rotate secret of subscriber %d: %w", id, translate(err))
	}
	s := subscriberFrom(dbsqlc.SubscriberRow(row))
	var until any
	if row.PreviousSecretUntil != nil {
		until = row.PreviousSecretUntil.UTC().Format(time.RFC3339Nano)
	}
	ev, err := appendEvent(ctx, tx, actorID, EventSubscriberSecretRotated, EntitySubscribers, s.ID,
		map[string]any{"subscriber": s.Name, "previous_valid_until": until})
	if err != nil {
		return Subscriber{}, Event{}, err
	}
	return s, ev, nil
}

// SubscriberLag is how far a subscriber is behind the journal, from its
// delivery records (table deliveries; delivered ones are kept for
// RETENTION).
type SubscriberLag struct {
	SubscriberID int64
	Subscriber   string
	// Pending counts the open records: not yet delivered nor dead
	// (status pending or failed). Failing counts those of them whose last
	// attempt failed (status failed, retried at next_attempt_at); Dead the
	// dead letters.
	Pending, Failing, Dead int64
	// OldestPendingAt is when the oldest open record was created (its
	// event's dispatch); nil with none open. OldestPendingSeconds is its
	// age by the database clock at the query, in seconds (0 with none).
	OldestPendingAt      *time.Time
	OldestPendingSeconds float64
	// LastDeliveredAt is the newest delivered_at of its kept records; nil
	// when none is kept.
	LastDeliveredAt *time.Time
}

// SubscriberLags returns the lag of every subscriber, by name, in one
// statement that reads only indexes of open, dead and the newest delivered
// records (never the delivered history). The Prometheus scrape reads
// SubscribersPending, which skips the dead letters and the newest
// delivery.
func SubscriberLags(ctx context.Context, q Querier) ([]SubscriberLag, error) {
	rows, err := queries.SubscriberLagList(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("list subscriber lag: %w", translate(err))
	}
	return mapRows(rows, lagFrom), nil
}

// SubscriberLagsByIDs returns the lag (see SubscriberLags) of the
// subscribers with the given ids, in id order; ids that do not exist are
// skipped.
func SubscriberLagsByIDs(ctx context.Context, q Querier, ids []int64) ([]SubscriberLag, error) {
	if ids == nil {
		ids = []int64{}
	}
	rows, err := queries.SubscriberLagListByIDs(ctx, q, ids)
	if err != nil {
		return nil, fmt.Errorf("get lag of %d subscribers: %w", len(ids), translate(err))
	}
	return mapRows(rows, func(r dbsqlc.SubscriberLagListByIDsRow) SubscriberLag { return lagFrom(dbsqlc.SubscriberLagListRow(r)) }), nil
}

func lagFrom(r dbsqlc.SubscriberLagListRow) SubscriberLag {
	return SubscriberLag{SubscriberID: r.ID, Subscriber: r.Name, Pending: r.Pending, Failing: r.Failing, Dead: r.Dead,
		OldestPendingAt: r.OldestPendingAt, OldestPendingSeconds: r.OldestPendingSeconds, LastDeliveredAt: r.LastDeliveredAt}
}

// TakeWebhookLease takes a free one of webhook subscriberID's MaxInFlight
// lease slots (table subscriber_leases) for holder, for ttl; ok is false
// when every slot is leased. Run it on the pool, outside a transaction:
// the lease counts for every instance once committed. A lease runs out by
// itself after ttl (a crashed holder's slot comes back); ReleaseWebhookLease
// gives it back earlier.
func TakeWebhookLease(ctx context.Context, q Querier, subscriberID int64, holder string, ttl time.Duration) (slot int32, ok bool, err error) {
	slot, err = queries.SubscriberLeaseTake(ctx, q, &holder, ttl.Seconds(), subscriberID)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("take a lease of webhook %d: %w", subscriberID, translate(err))
	}
	return slot, true, nil
}

// FreeWebhookLeases returns how many of webhook subscriberID's lease slots
// (TakeWebhookLease) are free now: 0 … MaxInFlight.
func FreeWebhookLeases(ctx context.Context, q Querier, subscriberID int64) (int, error) {
	n, err := queries.SubscriberLeaseCountFree(ctx, q, subscriberID)
	if err != nil {
		return 0, fmt.Errorf("count free leases of webhook %d: %w", subscriberID, translate(err))
	}
	return int(n), nil
}

// ReleaseWebhookLease gives slot of subscriberID back if holder still
// holds it (a lease that ran out may be someone else's by now).
func ReleaseWebhookLease(ctx context.Context, q Querier, subscriberID int64, slot int32, holder string) error {
	if err := queries.SubscriberLeaseRelease(ctx, q, subscriberID, slot, &holder); err != nil {
		return fmt.Errorf("release lease %d of webhook %d: %w", slot, subscriberID, translate(err))
	}
	return nil
}

// TakeWebhookToken takes one request's token from the bucket of webhook
// subscriberID (table subscriber_buckets), refilled at rate per second and
// holding at most one second's worth (at least 1). It returns 0 when it
// took one, else how long until the next is there. Run it on the pool,
// outside a transaction, as TakeWebhookLease.
func TakeWebhookToken(ctx context.Context, q Querier, subscriberID int64, rate float64) (time.Duration, error) {
	row, err := queries.SubscriberBucketTake(ctx, q, subscriberID, max(rate, 1), rate)
	if err != nil {
		return 0, fmt.Errorf("take a token of webhook %d: %w", subscriberID, translate(err))
	}
	if row.Taken {
		return 0, nil
	}
	return tokenWait(row.Tokens, rate), nil
}

// tokenWait is how long a bucket holding tokens (< 1) takes to refill one
// at rate per second, at most a day: a rate stored before the floor
// existed (or any tiny one) must not overflow time.Duration into a
// negative wait, which would send at once.
func tokenWait(tokens, rate float64) time.Duration {
	const most = 24 * time.Hour
	secs := (1 - tokens) / rate
	if !(secs < most.Seconds()) {
		return most
	}
	return time.Duration(secs * float64(time.Second))
}
