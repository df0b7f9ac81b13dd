package jobs_test

import (
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"erp/db"
	"erp/jobs"
)

// maxEvalAlloc bounds what one evaluation of a condition may allocate,
// in bytes: the cost limit is meant to stop a condition long before.
const maxEvalAlloc = 64 << 20

// FuzzFilterCondition compiles arbitrary conditions and evaluates those
// that compile on an event with an arbitrary payload. A condition that is
// refused is a *FilterError placed inside its text; one that compiles
// evaluates to a bool or an error (ErrFilterCostLimit when the cost limit
// stopped it), never a panic, and allocates a bounded amount on the way.
func FuzzFilterCondition(f *testing.F) {
	for _, c := range []struct{ cond, payload string }{
		{`event.payload.entity == "prod_order"`, `{"id": 7, "entity": "prod_order"}`},
		{`event.type.startsWith("order.") && event.payload.source == "crm"`, `{"source": "crm"}`},
		{`has(event.payload.lines) && event.payload.lines > 1`, `{"lines": 3, "total": 12.5}`},
		{`event.actor == null`, `null`},
		{`lists.range(10000).map(x, lists.range(10000)).size() > 0`, `{}`},
		{`"a".replace("a", "aaaaaaaaaa").replace("a", "aaaaaaaaaa").replace("a", "aaaaaaaaaa").size() > 3`, `{}`},
		{`event.payload.items.all(i, i.qty > 0)`, `{"items": [{"qty": 1}, {"qty": 2}]}`},
		{`event.payload.id + 1`, `{"id": 1}`},
		{`event.nope`, `{}`},
		{`event.payload.id == 9223372036854775807 + 1`, `{"id": 1}`},
		{"event.type ==\n  ", `{}`},
		{`[1,2,3].sort().flatten()`, `[1]`},
		{`event.createdAt > timestamp("2026-01-01T00:00:00Z")`, `{}`},
	} {
		f.Add(c.cond, c.payload)
	}
	filters, err := jobs.NewFilters()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, cond, payload string) {
		filter, err := filters.Compile(jobs.FilterSpec{Condition: cond})
		if err != nil {
			var fe *jobs.FilterError
			var in *db.InputError
			if !errors.As(err, &fe) || !errors.As(err, &in) || fe.Field != "condition" {
				t.Fatalf("Compile(%q): %v, not a *FilterError on condition", cond, err)
			}
			lines := strings.Split(cond, "\n")
			if fe.Line < 1 || fe.Line > len(lines) || fe.Column < 1 || fe.Column > utf8.RuneCountInString(lines[fe.Line-1])+1 {
				t.Fatalf("Compile(%q): %v at line %d, column %d, outside the text", cond, err, fe.Line, fe.Column)
			}
			return
		}
		id, login := int64(3), "ann"
		ev := db.Event{ID: 1, Type: db.EventDocCreated, Entity: db.EntitySalesOrders, EntityID: 22,
			Payload: json.RawMessage(payload), ActorID: &id, ActorLogin: &login, CreatedAt: time.Unix(1_780_000_000, 0)}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err = filter.Takes(ev)
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > maxEvalAlloc {
			t.Fatalf("evaluating %q allocated %d MB (%v)", cond, n>>20, err)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "evaluate condition on event 1: ") && !strings.HasPrefix(err.Error(), "decode payload of event 1: ") {
			t.Fatalf("Takes with %q: %v", cond, err)
		}
	})
}
