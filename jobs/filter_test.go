package jobs_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"erp/db"
	"erp/jobs"
)

// filterEvents are one event of each shape the journal writes, by name.
func filterEvents() map[string]db.Event {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	id, login, name, role := int64(3), "ann", "Ann Smith", db.RoleSales
	withActor := func(ev db.Event) db.Event {
		ev.ActorID, ev.ActorLogin, ev.ActorName, ev.ActorRole = &id, &login, &name, &role
		return ev
	}
	return map[string]db.Event{
		"sales": withActor(db.Event{ID: 1, Type: db.EventDocCreated, Entity: db.EntitySalesOrders, EntityID: 22,
			Payload: json.RawMessage(`{"id": 22, "no": "ЗК-2026-000022", "entity": "sales_order"}`), CreatedAt: at}),
		"prod": {ID: 2, Type: db.EventDocCreated, Entity: db.EntityProdOrders, EntityID: 7,
			Payload: json.RawMessage(`{"id": 7, "no": "ПЗ-2026-000007", "entity": "prod_order"}`), CreatedAt: at.Add(time.Hour)},
		"move": {ID: 3, Type: db.EventDocCreated, Entity: db.EntityWarehouseMoves, EntityID: 46,
			Payload: json.RawMessage(`{"id": 46, "no": "ВЦ-2026-000045", "entity": "wh_move"}`), CreatedAt: at},
		"shop": withActor(db.Event{ID: 4, Type: db.EventOrderReceived, Entity: db.EntitySalesOrders, EntityID: 22,
			Payload: json.RawMessage(`{"lines": 1, "source": "shop", "sync_id": "shop-9", "order_id": 22}`), CreatedAt: at}),
		"crm": {ID: 5, Type: db.EventOrderReceived, Entity: db.EntitySalesOrders, EntityID: 16,
			Payload: json.RawMessage(`{"lines": 3, "source": "crm", "crm_order_id": 51015, "order_id": 16, "total": 12.5}`), CreatedAt: at},
		"user": withActor(db.Event{ID: 6, Type: db.EventUserCreated, Entity: db.EntityUsers, EntityID: 9,
			Payload: json.RawMessage(`{"login": "bob", "role": "viewer"}`), CreatedAt: at}),
	}
}

// takenBy returns the names of the events f takes, sorted.
func takenBy(t *testing.T, f *jobs.Filter) []string {
	t.Helper()
	var taken []string
	for name, ev := range filterEvents() {
		ok, err := f.Takes(ev)
		require.NoError(t, err, "Takes(%s)", name)
		if ok {
			taken = append(taken, name)
		}
	}
	slices.Sort(taken)
	return taken
}

func TestFilterTakes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		types     []string
		entities  []string
		condition string
		want      []string
	}{
		{"everything", nil, nil, "", []string{"crm", "move", "prod", "sales", "shop", "user"}},
		{"one type", []string{db.EventOrderReceived}, nil, "", []string{"crm", "shop"}},
		{"two types", []string{db.EventOrderReceived, db.EventUserCreated}, nil, "", []string{"crm", "shop", "user"}},
		{"one table", nil, []string{db.EntitySalesOrders}, "", []string{"crm", "sales", "shop"}},
		{"payload entity name", nil, []string{"prod_order", "wh_move"}, "", []string{"move", "prod"}},
		{"type and table", []string{db.EventDocCreated}, []string{"sales_order"}, "", []string{"sales"}},
		{"type and table, none match", []string{db.EventUserCreated}, []string{db.EntityProdOrders}, "", nil},
		{"the contract's example", []string{db.EventDocCreated}, nil, `event.payload.entity == "prod_order"`, []string{"prod"}},
		{"condition alone", nil, nil, `event.type.startsWith("order.") && event.payload.source == "crm"`, []string{"crm"}},
		{"whole numbers are ints", nil, nil, `has(event.payload.lines) && event.payload.lines > 1`, []string{"crm"}},
		{"fractions are doubles", nil, nil, `has(event.payload.total) && event.payload.total > 12.0`, []string{"crm"}},
		{"entity is the table", nil, nil, `event.entity == "sales_orders" && event.entityId == 22`, []string{"sales", "shop"}},
		{"system actor is null", nil, nil, `event.actor == null`, []string{"crm", "move", "prod"}},
		{"actor fields", nil, nil, `event.actor != null && event.actor.login == "ann" && event.actor.displayName == "Ann Smith" && event.actor.id == 3 && event.actor.role == "sales"`, []string{"sales", "shop", "user"}},
		{"createdAt", nil, nil, `event.createdAt > timestamp("2026-03-01T12:30:00Z")`, []string{"prod"}},
		{"event id", nil, nil, `event.id % 2 == 0`, []string{"prod", "shop", "user"}},
		{"comprehension and strings extension", nil, nil, `["prod_order", "wh_move"].exists(e, has(event.payload.entity) && event.payload.entity == e) && event.payload.no.lowerAscii() != ""`, []string{"move", "prod"}},
		{"everything together", []string{db.EventDocCreated, db.EventOrderReceived}, []string{"sales_orders"}, `event.actor != null`, []string{"sales", "shop"}},
		{"blank condition is none", []string{db.EventUserCreated}, nil, "  \n ", []string{"user"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, err := jobs.CompileFilter(tt.types, tt.entities, tt.condition)
			require.NoError(t, err)
			if got := takenBy(t, f); !slices.Equal(got, tt.want) {
				t.Errorf("taken = %v, want %v (filter %s)", got, tt.want, f)
			}
		})
	}
}

func TestFilterConditionErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		condition string
		line, col int
		msg       string // a fragment of CEL's message
	}{
		{"syntax", `event.type == (`, 1, 16, "Syntax error"},
		{"syntax on line 3", "event.type == \"doc.created\" &&\n  event.entity == \"sales_orders\" &&\n  event.id >", 3, 13, "Syntax error"},
		{"unknown function", "event.type ==\n  foo(1)", 2, 6, "undeclared reference to 'foo'"},
		{"unknown variable", `evnt.type == "doc.created"`, 1, 1, "undeclared reference to 'evnt'"},
		{"unknown field of event", `event.typo == "x"`, 1, 6, "undefined field 'typo'"},
		{"columns count characters", `event.payload.no == "ЗК" && event.typo`, 1, 34, "undefined field 'typo'"},
		{"type mismatch", `event.entityId == "22"`, 1, 16, "no matching overload"},
		{"int result", `event.entityId + 1`, 1, 1, "must be a bool, not int"},
		{"string result, after blanks", "\n  event.type", 2, 3, "must be a bool, not string"},
		{"too long", strings.Repeat("true && ", 600) + "true", 1, 1, "at most 4096 characters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := jobs.CompileFilter(nil, nil, tt.condition)
			var fe *jobs.FilterError
			require.ErrorAs(t, err, &fe)
			if fe.Field != "condition" || fe.Line != tt.line || fe.Column != tt.col {
				t.Errorf("error at %s %d:%d, want condition %d:%d (%v)", fe.Field, fe.Line, fe.Column, tt.line, tt.col, err)
			}
			assert.Contains(t, fe.Msg, tt.msg)
			assert.True(t, strings.HasPrefix(err.Error(), "condition: line "), "error %q starts with its field and position", err)
			var inputErr *db.InputError
			require.ErrorAs(t, err, &inputErr, "reported as BAD_USER_INPUT")
			assert.Equal(t, "condition", inputErr.Field)
			assert.Equal(t, fe.Msg, inputErr.Msg)
		})
	}
}

func TestFilterCostLimit(t *testing.T) {
	t.Parallel()
	ten := "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"
	tests := []struct{ name, condition string }{
		{"generated list", `lists.range(10000).all(i, i >= 0)`},
		{"nested comprehensions", ten + ".all(a, " + ten + ".all(b, " + ten + ".all(c, " + ten + ".all(d, " + ten + ".all(e, event.id > 0)))))"},
		{"payload-sized", `lists.range(1000).exists(i, lists.range(1000).exists(j, string(i * j) == event.payload.no))`},
	}
	ev := filterEvents()["sales"]
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, err := jobs.CompileFilter(nil, nil, tt.condition)
			require.NoError(t, err)
			start := time.Now()
			ok, err := f.Takes(ev)
			elapsed := time.Since(start)
			assert.False(t, ok, "an evaluation stopped is not taken")
			require.ErrorIs(t, err, jobs.ErrFilterCostLimit)
			t.Logf("stopped after %v: %v", elapsed, err)
		})
	}

	t.Run("a lower limit of its own", func(t *testing.T) {
		t.Parallel()
		filters, err := jobs.NewFilters(jobs.WithCostLimit(10))
		require.NoError(t, err)
		f, err := filters.Compile(jobs.FilterSpec{Condition: `lists.range(20).all(i, i >= 0)`})
		require.NoError(t, err)
		_, err = f.Takes(ev)
		require.ErrorIs(t, err, jobs.ErrFilterCostLimit)
	})
}

func TestFilterEvaluationErrorIsNotTaken(t *testing.T) {
	t.Parallel()
	f, err := jobs.CompileFilter(nil, nil, `event.payload.lines > 1`)
	require.NoError(t, err)
	ok, err := f.Takes(filterEvents()["sales"]) // no "lines" in a doc.created payload
	assert.False(t, ok)
	require.Error(t, err)
	assert.NotErrorIs(t, err, jobs.ErrFilterCostLimit)
	assert.Contains(t, err.Error(), "no such key: lines")

	// A list too long to walk within the cost limit is refused before it
	// is allocated.
	f, err = jobs.CompileFilter(nil, nil, `lists.range(1000000).size() > 0`)
	require.NoError(t, err)
	ok, err = f.Takes(filterEvents()["sales"])
	assert.False(t, ok)
	require.ErrorContains(t, err, "exceeds maximum allowed")

	f, err = jobs.CompileFilter(nil, nil, `event.payload.source`) // dyn: checked when evaluated
	require.NoError(t, err)
	ok, err = f.Takes(filterEvents()["crm"])
	assert.False(t, ok)
	require.ErrorContains(t, err, "not a bool")

	// The cheap check runs first: no CEL, so no error, for another type.
	f, err = jobs.CompileFilter([]string{db.EventOrderReceived}, nil, `event.payload.lines > 1`)
	require.NoError(t, err)
	ok, err = f.Takes(filterEvents()["sales"])
	assert.False(t, ok)
	require.NoError(t, err)
}

func TestFilterUnknownTypesAndEntities(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name            string
		types, entities []string
		field           string
		want            []string // fragments of the message
	}{
		{"typo in a type", []string{db.EventDocCreated, "doc.create"}, nil, "eventTypes.1",
			append([]string{`unknown event type "doc.create"; known: `}, jobs.DefaultEventTypes()...)},
		{"empty type", []string{""}, nil, "eventTypes.0", []string{`unknown event type ""`, db.EventOrderReceived}},
		{"typo in an entity", nil, []string{"sales_orders", "prod_orders"}, "entities.1",
			[]string{`unknown entity "prod_orders"; known: `, "plan_prod_orders (or prod_order)", "sales_orders (or sales_order)",
				"wh_moves (or wh_move)", "wh_purchase_orders (or purchase_order)", "users"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := jobs.CompileFilter(tt.types, tt.entities, "")
			var fe *jobs.FilterError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tt.field, fe.Field)
			assert.Zero(t, fe.Line)
			for _, w := range tt.want {
				assert.Contains(t, fe.Msg, w)
			}
			var inputErr *db.InputError
			require.ErrorAs(t, err, &inputErr)
			assert.Equal(t, tt.field, inputErr.Field)
		})
	}
}

func TestFilterSpecNormalised(t *testing.T) {
	t.Parallel()
	f, err := jobs.CompileFilter(
		[]string{db.EventOrderReceived, db.EventDocCreated, db.EventOrderReceived},
		[]string{"prod_order", "sales_orders", db.EntityProdOrders, "sales_order", "purchase_order", "wh_move"},
		"event.id > 0")
	require.NoError(t, err)
	want := jobs.FilterSpec{
		EventTypes: []string{db.EventDocCreated, db.EventOrderReceived},
		Entities:   []string{db.EntityProdOrders, db.EntitySalesOrders, db.EntityWarehouseMoves, db.EntityPurchaseOrders},
		Condition:  "event.id > 0",
	}
	assert.Equal(t, want, f.Spec())
	assert.True(t, f.HasCondition())

	// The stored form compiles back to the same filter.
	again, err := jobs.CompileFilter(f.Spec().EventTypes, f.Spec().Entities, f.Spec().Condition)
	require.NoError(t, err)
	assert.Equal(t, f.Spec(), again.Spec())

	plain, err := jobs.CompileFilter(nil, nil, "")
	require.NoError(t, err)
	assert.False(t, plain.HasCondition())
	assert.Equal(t, jobs.FilterSpec{}, plain.Spec())
}

func TestFiltersKnowMore(t *testing.T) {
	t.Parallel()
	filters, err := jobs.NewFilters(jobs.WithEventTypes("test.step"), jobs.WithEntity("subscribers", "subscriber"))
	require.NoError(t, err)
	f, err := filters.Compile(jobs.FilterSpec{EventTypes: []string{"test.step"}, Entities: []string{"subscriber"}})
	require.NoError(t, err)
	assert.Equal(t, []string{"subscribers"}, f.Spec().Entities)
	ok, err := f.Takes(db.Event{Type: "test.step", Entity: "subscribers"})
	require.NoError(t, err)
	assert.True(t, ok)

	// The default set is not changed by another Filters.
	_, err = jobs.CompileFilter([]string{"test.step"}, nil, "")
	require.Error(t, err)
}

func TestFilterConcurrentTakes(t *testing.T) {
	t.Parallel()
	filters, err := jobs.NewFilters()
	require.NoError(t, err)
	events := filterEvents()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			// One program from the cache, shared by every goroutine.
			f, err := filters.Compile(jobs.FilterSpec{Condition: `event.actor != null && event.payload.size() > 2`})
			if !assert.NoError(t, err) {
				return
			}
			for range 50 {
				for name, ev := range events {
					ok, err := f.Takes(ev)
					assert.NoError(t, err)
					want := name == "sales" || name == "shop"
					assert.Equal(t, want, ok, name)
				}
			}
		})
	}
	wg.Wait()
}

func TestFilterEventShared(t *testing.T) {
	t.Parallel()
	var filters []*jobs.Filter
	for _, c := range []string{`event.payload.source == "shop"`, `event.payload.lines > 1`, `event.actor.login == "ann"`, ""} {
		f, err := jobs.CompileFilter([]string{db.EventOrderReceived}, nil, c)
		require.NoError(t, err)
		filters = append(filters, f)
	}
	for name, want := range map[string][]bool{"shop": {true, false, true, true}, "crm": {false, true, false, true}} {
		ev := filterEvents()[name]
		e := jobs.NewFilterEvent(ev)
		for i, f := range filters {
			got, err := f.TakesEvent(e)
			if err != nil {
				// crm's actor is null: that condition fails and is not taken.
				assert.Equal(t, "crm", name)
				assert.Equal(t, 2, i)
			}
			alone, _ := f.Takes(ev)
			if got != want[i] || alone != got {
				t.Errorf("%s, filter %d (%s): TakesEvent %v, Takes %v, want %v", name, i, f, got, alone, want[i])
			}
		}
	}

	bad := jobs.NewFilterEvent(db.Event{ID: 9, Type: db.EventOrderReceived, Payload: json.RawMessage(`[1, 2]`)})
	ok, err := filters[0].TakesEvent(bad)
	assert.False(t, ok)
	require.ErrorContains(t, err, "decode payload of event 9")
	ok, err = filters[3].TakesEvent(bad) // no condition: the payload is not read
	assert.True(t, ok)
	require.NoError(t, err)
}

func TestFilterErrorIsBadInput(t *testing.T) {
	t.Parallel()
	_, err := jobs.CompileFilter(nil, nil, "event.")
	require.Error(t, err)
	var fe *jobs.FilterError
	require.True(t, errors.As(err, &fe))
	assert.Equal(t, "condition: "+fe.Msg, err.Error())
}

// BenchmarkFilterTakes measures one decision: the cheap path (type and
// entity lists only) and the CEL path (payload decoded, condition run).
func BenchmarkFilterTakes(b *testing.B) {
	events := filterEvents()
	cases := []struct {
		name      string
		types     []string
		entities  []string
		condition string
		event     string
	}{
		{"cheap/other type", []string{db.EventOrderReceived}, nil, `event.payload.lines > 1`, "sales"},
		{"cheap/type and entity taken", []string{db.EventDocCreated}, []string{"prod_order"}, "", "prod"},
		{"cel/payload entity", []string{db.EventDocCreated}, nil, `event.payload.entity == "prod_order"`, "prod"},
		{"cel/actor and payload", nil, nil, `event.actor != null && event.actor.login == "ann" && event.payload.source == "shop" && event.payload.lines >= 1`, "shop"},
		{"cel/comprehension", nil, nil, `["sales_order", "prod_order", "wh_move"].exists(e, has(event.payload.entity) && event.payload.entity == e)`, "move"},
	}
	for _, c := range cases {
		f, err := jobs.CompileFilter(c.types, c.entities, c.condition)
		require.NoError(b, err)
		ev := events[c.event]
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := f.Takes(ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}

	// Five subscribers with conditions on one event: the payload is
	// decoded once, not five times.
	var five []*jobs.Filter
	for _, c := range []string{`event.payload.source == "shop"`, `event.payload.lines > 0`, `event.actor != null`,
		`event.payload.order_id == 22`, `event.type == "order.received"`} {
		f, err := jobs.CompileFilter(nil, nil, c)
		require.NoError(b, err)
		five = append(five, f)
	}
	b.Run("cel/five filters, one event", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			e := jobs.NewFilterEvent(events["shop"])
			for _, f := range five {
				if _, err := f.TakesEvent(e); err != nil {
					b.Fatal(err)
				}
			}
		}
	})

	// The worst a condition can cost: evaluation up to the cost limit.
	f, err := jobs.CompileFilter(nil, nil, `lists.range(10000).all(i, i >= 0)`)
	require.NoError(b, err)
	ev := events["sales"]
	b.Run("cel/stopped by the cost limit", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := f.Takes(ev); !errors.Is(err, jobs.ErrFilterCostLimit) {
				b.Fatalf("got %v, want the cost limit", err)
			}
		}
	})
}
