package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/ext"
	"cel.dev/cel-go/interpreter"

	"erp/db"
	"erp/db/catalog"
)

// Limits of a subscriber filter. The cost unit is CEL's: about one per
// variable lookup, comparison or comprehension step; a typical condition
// costs under 20, a comprehension over 1000 elements about 7000. Stopping at
// the default limit takes about 0.1 ms, the bound a condition puts on each
// event it sees.
const (
	// DefaultFilterCostLimit is the CEL cost one evaluation of a condition
	// may spend before it is stopped (ErrFilterCostLimit).
	DefaultFilterCostLimit uint64 = 10_000
	// MaxConditionLen is the longest condition accepted, in characters.
	MaxConditionLen = 4096
	// maxFilterRange bounds lists.range(n): the list is allocated before
	// the cost limit sees it, and a longer one could not be walked anyway.
	maxFilterRange = 10_000
	// maxCachedPrograms bounds the program cache; past it the cache starts
	// over (conditions are few, one per subscriber).
	maxCachedPrograms = 1024
	celEventType      = "erp.Event"
)

// ErrFilterCostLimit is wrapped by Filter.Takes when a condition's
// evaluation was stopped by the cost limit.
var ErrFilterCostLimit = errors.New("condition stopped: cost limit exceeded")

// DefaultEventTypes lists the event types the journal writes, those of
// the catalog (db/catalog), the ones a filter's EventTypes may name unless
// Filters is given more.
func DefaultEventTypes() []string { return catalog.Names() }

// defaultEntities maps every name a filter's Entities may use to the table
// events.entity holds: the tables themselves and the "entity" names of
// doc.created payloads.
func defaultEntities() map[string]string { return db.EntityNames() }

// FilterSpec is a subscriber filter as a client sends it and as it is
// stored (subscribers.event_types, entities, condition). Empty EventTypes
// or Entities mean every one; an empty Condition means none.
type FilterSpec struct {
	EventTypes []string `json:"eventTypes,omitempty"`
	Entities   []string `json:"entities,omitempty"`
	Condition  string   `json:"condition,omitempty"`
}

// String writes the spec for logs: types=[…] entities=[…] condition="…".
func (s FilterSpec) String() string {
	return fmt.Sprintf("types=%v entities=%v condition=%q", s.EventTypes, s.Entities, s.Condition)
}

// FilterError is a filter that does not compile. Field is the input path
// of the bad value ("eventTypes.1", "entities.0", "condition"); Line and
// Column (1-based, in characters) place a condition's error in its text and
// are 0 for the other fields. It unwraps to a *db.InputError with the same
// field and message, so the GraphQL layer reports it as BAD_USER_INPUT.
type FilterError struct {
	Field  string
	Line   int
	Column int
	Msg    string
}

func (e *FilterError) Error() string { return e.Field + ": " + e.Msg }

// Unwrap gives the *db.InputError form of the error.
func (e *FilterError) Unwrap() error { return &db.InputError{Field: e.Field, Msg: e.Msg} }

// Filters compiles subscriber filters against the event types and entities
// it knows and keeps one CEL program per condition text. It is safe for
// concurrent use; one is enough for a process.
type Filters struct {
	env        *cel.Env
	eventTypes []string          // sorted
	entities   map[string]string // accepted name -> table
	costLimit  uint64

	mu       sync.Mutex
	programs map[string]cel.Program
	// compiling serialises Compile on env: cel-go's type checker builds
	// a shared catalog lazily while other checks clone its scopes, a data
	// race when two conditions compile at once. Compiling is rare (a
	// subscriber created or changed, a cache miss); evaluating needs no lock.
	compiling sync.Mutex
}

// FiltersOption configures NewFilters.
type FiltersOption func(*Filters)

// WithEventTypes makes more event types known, besides DefaultEventTypes
// (types journaled under names db does not export, or tests' own).
func WithEventTypes(eventTypes ...string) FiltersOption {
	return func(f *Filters) { f.eventTypes = append(f.eventTypes, eventTypes...) }
}

// WithEntity makes one more table known, accepted by its name and aliases.
func WithEntity(table string, aliases ...string) FiltersOption {
	return func(f *Filters) {
		f.entities[table] = table
		for _, a := range aliases {
			f.entities[a] = table
		}
	}
}

// WithCostLimit sets the CEL cost one evaluation may spend (default
// DefaultFilterCostLimit).
func WithCostLimit(limit uint64) FiltersOption {
	return func(f *Filters) { f.costLimit = limit }
}

// celEvent is what a condition sees as `event`. Actor is dyn rather than
// an object type so that `event.actor == null` holds for the system (a nil
// struct pointer would read as an empty actor, the way proto fields do).
type celEvent struct {
	ID        int64          `cel:"id"`
	Type      string         `cel:"type"`
	Entity    string         `cel:"entity"`
	EntityID  int64          `cel:"entityId"`
	Payload   map[string]any `cel:"payload"`
	Actor     any            `cel:"actor"`
	CreatedAt time.Time      `cel:"createdAt"`
}

// NewFilters builds the CEL environment: `event` is an object with fields
// id, type, entity (the table), entityId (int), payload (map(string, dyn):
// the event's JSON object, whole numbers as int), actor (null or a map with
// id, login, displayName, role) and createdAt (timestamp); a field name not
// in that list is a type error. The standard library plus CEL's strings and
// lists extensions are available.
func NewFilters(opts ...FiltersOption) (*Filters, error) {
	f := &Filters{
		eventTypes: DefaultEventTypes(),
		entities:   defaultEntities(),
		costLimit:  DefaultFilterCostLimit,
		programs:   map[string]cel.Program{},
	}
	for _, o := range opts {
		o(f)
	}
	slices.Sort(f.eventTypes)
	f.eventTypes = slices.Compact(f.eventTypes)
	env, err := cel.NewEnv(
		cel.Types(cel.NativeTypeFor[celEvent](cel.NativeTypeAlias(celEventType), types.ParseStructTags(true))),
		cel.Variable("event", cel.ObjectType(celEventType)),
		cel.CrossTypeNumericComparisons(true),
		ext.Strings(),
		ext.Lists(ext.ListsMaxRangeSize(maxFilterRange)),
	)
	if err != nil {
		return nil, fmt.Errorf("build filter environment: %w", err)
	}
	f.env = env
	return f, nil
}

var defaultFilters = sync.OnceValues(func() (*Filters, error) { return NewFilters() })

// CompileFilter compiles a filter with the default Filters (DefaultEventTypes,
// the journal's tables, DefaultFilterCostLimit). Errors as Filters.Compile.
func CompileFilter(eventTypes, entities []string, condition string) (*Filter, error) {
	f, err := defaultFilters()
	if err != nil {
		return nil, err
	}
	return f.Compile(FilterSpec{EventTypes: eventTypes, Entities: entities, Condition: condition})
}

// Compile checks spec and compiles its condition. Event types must be known
// and entities known tables or payload entity names (normalised to the
// table); both are de-duplicated and sorted. The condition must parse and
// type-check to bool (or dyn, checked when evaluated). Every rule broken is a
// *FilterError; the first one found is returned.
func (f *Filters) Compile(spec FilterSpec) (*Filter, error) {
	out := &Filter{}
	var typeErr *db.InputError
	if errors.As(f.CheckEventTypes("eventTypes", spec.EventTypes), &typeErr) {
		return nil, &FilterError{Field: typeErr.Field, Msg: typeErr.Msg}
	}
	out.spec.EventTypes = append(out.spec.EventTypes, spec.EventTypes...)
	for i, e := range spec.Entities {
		table, ok := f.entities[e]
		if !ok {
			return nil, &FilterError{Field: fmt.Sprintf("entities.%d", i),
				Msg: fmt.Sprintf("unknown entity %q; known: %s", e, f.knownEntities())}
		}
		out.spec.Entities = append(out.spec.Entities, table)
	}
	slices.Sort(out.spec.EventTypes)
	out.spec.EventTypes = slices.Compact(out.spec.EventTypes)
	slices.Sort(out.spec.Entities)
	out.spec.Entities = slices.Compact(out.spec.Entities)

	// The condition is kept as sent, so that error positions are the
	// client's; only a blank one means none.
	cond := spec.Condition
	if strings.TrimSpace(cond) == "" {
		return out, nil
	}
	if n := utf8.RuneCountInString(cond); n > MaxConditionLen {
		return nil, conditionError(1, 1, fmt.Sprintf("at most %d characters, not %d", MaxConditionLen, n))
	}
	prg, err := f.program(cond)
	if err != nil {
		return nil, err
	}
	out.spec.Condition, out.prg = cond, prg
	return out, nil
}

// knownEntities writes the tables with their aliases: "plan_prod_orders
// (or prod_order), …".
func (f *Filters) knownEntities() string {
	aliases := map[string][]string{}
	for name, table := range f.entities {
		if name != table {
			aliases[table] = append(aliases[table], name)
		}
	}
	tables := make([]string, 0, len(aliases))
	for _, table := range f.entities {
		if !slices.Contains(tables, table) {
			tables = append(tables, table)
		}
	}
	slices.Sort(tables)
	parts := make([]string, len(tables))
	for i, t := range tables {
		parts[i] = t
		if a := aliases[t]; len(a) > 0 {
			slices.Sort(a)
			parts[i] += " (or " + strings.Join(a, ", ") + ")"
		}
	}
	return strings.Join(parts, ", ")
}

// program compiles cond, or returns the program compiled before for the
// same text: programs are immutable and safe for concurrent use.
func (f *Filters) program(cond string) (cel.Program, error) {
	f.mu.Lock()
	prg, ok := f.programs[cond]
	f.mu.Unlock()
	if ok {
		return prg, nil
	}
	f.compiling.Lock()
	defer f.compiling.Unlock()
	ast, iss := f.env.Compile(cond)
	if iss.Err() != nil {
		errs := iss.Errors()
		first := errs[0]
		msg := first.Message
		if len(errs) > 1 {
			msg += fmt.Sprintf(" (and %d more)", len(errs)-1)
		}
		return nil, conditionError(first.Location.Line(), first.Location.Column()+1, msg)
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) && !t.IsExactType(cel.DynType) {
		// Point at the start of the whole expression: its smallest offset
		// (a node's own location is its operator's, '+' in `a + 1`).
		info := ast.NativeRep().SourceInfo()
		start := int32(len(cond))
		for _, r := range info.OffsetRanges() {
			start = min(start, r.Start)
		}
		loc := info.GetLocationByOffset(start)
		return nil, conditionError(loc.Line(), loc.Column()+1,
			fmt.Sprintf("the condition must be a bool, not %s", t))
	}
	prg, err := f.env.Program(ast, cel.CostLimit(f.costLimit), cel.EvalOptions(cel.OptTrackCost))
	if err != nil {
		return nil, fmt.Errorf("plan condition %q: %w", cond, err)
	}
	f.mu.Lock()
	if len(f.programs) >= maxCachedPrograms {
		clear(f.programs)
	}
	f.programs[cond] = prg
	f.mu.Unlock()
	return prg, nil
}

func conditionError(line, col int, msg string) *FilterError {
	// CEL reports a location of -1 when it has none; point at the start.
	line, col = max(line, 1), max(col, 1)
	return &FilterError{Field: "condition", Line: line, Column: col,
		Msg: fmt.Sprintf("line %d, column %d: %s", line, col, msg)}
}

// Filter is a compiled subscriber filter: an event is taken when its type
// is in EventTypes (empty: every type), its entity in Entities (empty:
// every one) and the condition, if any, is true. It is immutable and safe
// for concurrent use.
type Filter struct {
	spec FilterSpec
	prg  cel.Program // nil without a condition
}

// Spec is the filter in its normalised form (types and tables sorted and
// de-duplicated, a blank condition empty), the form to store.
func (f *Filter) Spec() FilterSpec { return f.spec }

// String writes the filter's spec.
func (f *Filter) String() string { return f.spec.String() }

// HasCondition reports whether Takes may evaluate CEL, or decides by type
// and entity alone (TakesTypeAndEntity is then the whole answer).
func (f *Filter) HasCondition() bool { return f.prg != nil }

// TakesTypeAndEntity is the cheap part of Takes: the type and entity
// lists only.
func (f *Filter) TakesTypeAndEntity(eventType, entity string) bool {
	return (len(f.spec.EventTypes) == 0 || slices.Contains(f.spec.EventTypes, eventType)) &&
		(len(f.spec.Entities) == 0 || slices.Contains(f.spec.Entities, entity))
}

// Takes reports whether the subscriber takes ev. Type and entity are
// checked first, without CEL; then the condition is evaluated with the cost
// limit. An evaluation that fails (a missing payload key, a result that is
// not a bool, the cost limit: ErrFilterCostLimit) means not taken: Takes
// returns false with the error, for logs and metrics, and retrying would
// fail the same way. A condition that needs an optional key tests it with
// has(event.payload.key). To try many filters on one event, TakesEvent
// decodes its payload once.
func (f *Filter) Takes(ev db.Event) (bool, error) {
	if !f.TakesTypeAndEntity(ev.Type, ev.Entity) {
		return false, nil
	}
	if f.prg == nil {
		return true, nil
	}
	return f.TakesEvent(NewFilterEvent(ev))
}

// TakesEvent is Takes on an event prepared by NewFilterEvent.
func (f *Filter) TakesEvent(e *FilterEvent) (bool, error) {
	ev := e.ev
	if !f.TakesTypeAndEntity(ev.Type, ev.Entity) {
		return false, nil
	}
	if f.prg == nil {
		return true, nil
	}
	in, err := e.input()
	if err != nil {
		return false, err
	}
	out, _, err := f.prg.Eval(eventActivation{in})
	if err != nil {
		var cancelled interpreter.EvalCancelledError
		if errors.As(err, &cancelled) && cancelled.Cause == interpreter.CostLimitExceeded {
			return false, fmt.Errorf("evaluate condition on event %d: %w", ev.ID, ErrFilterCostLimit)
		}
		return false, fmt.Errorf("evaluate condition on event %d: %w", ev.ID, err)
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("evaluate condition on event %d: the result is %s, not a bool", ev.ID, out.Type())
	}
	return b, nil
}

// FilterEvent is one event as conditions see it, built when the first
// condition needs it and shared by every filter tried on the event (CEL
// never changes its input). It is safe for concurrent use.
type FilterEvent struct {
	ev    db.Event
	input func() (*celEvent, error)
}

// NewFilterEvent prepares ev for Filter.TakesEvent; nothing is decoded yet.
func NewFilterEvent(ev db.Event) *FilterEvent {
	return &FilterEvent{ev: ev, input: sync.OnceValues(func() (*celEvent, error) {
		payload, err := decodePayload(ev.Payload)
		if err != nil {
			return nil, fmt.Errorf("decode payload of event %d: %w", ev.ID, err)
		}
		ce := &celEvent{ID: ev.ID, Type: ev.Type, Entity: ev.Entity, EntityID: ev.EntityID,
			Payload: payload, CreatedAt: ev.CreatedAt}
		if a := ev.Actor(); a != nil {
			ce.Actor = map[string]any{"id": a.ID, "login": a.Login, "displayName": a.DisplayName, "role": a.Role}
		}
		return ce, nil
	})}
}

// eventActivation binds `event` without a map per evaluation.
type eventActivation struct{ ev *celEvent }

func (a eventActivation) ResolveName(name string) (any, bool) {
	if name == "event" {
		return a.ev, true
	}
	return nil, false
}

func (eventActivation) Parent() interpreter.Activation { return nil }

// decodePayload reads the event's JSON object with whole numbers as int64
// (so `event.payload.id == 22` is an int comparison) and others as float64.
// An empty or null payload is an empty map.
func decodePayload(raw json.RawMessage) (map[string]any, error) {
	if len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("payload is not a JSON object: %w", err)
	}
	for k, v := range m {
		m[k] = intNumbers(v)
	}
	return m, nil
}

func intNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64() // valid JSON number: the decoder checked it
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = intNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = intNumbers(e)
		}
	}
	return v
}

// CheckEventTypes refuses, as a *db.InputError on field.<i>, the first of
// types that is not a known event type, listing the known ones: a journal
// query by a misspelt type would answer nothing instead of the mistake.
func (f *Filters) CheckEventTypes(field string, types []string) error {
	for i, t := range types {
		if _, ok := slices.BinarySearch(f.eventTypes, t); !ok {
			return &db.InputError{Field: fmt.Sprintf("%s.%d", field, i),
				Msg: fmt.Sprintf("unknown event type %.60q; known: %s", t, strings.Join(f.eventTypes, ", "))}
		}
	}
	return nil
}
