package db

import (
	"errors"
	"math"
	"testing"
)

// requireAfterError fails t unless err is an *InputError on field.
func requireAfterError(t *testing.T, parser, s, field string, err error) {
	t.Helper()
	var in *InputError
	if !errors.As(err, &in) || in.Field != field {
		t.Fatalf("%s(%q): %v; want an *InputError on %s", parser, s, err, field)
	}
}

// FuzzParseCursors gives every cursor parser the same text: each either
// refuses it with an *InputError on its field or reads a position that its
// encoder writes as exactly that text, so a cursor changed by hand is an
// error or another cursor this server could have written, never a second
// spelling of one (testdata/fuzz/FuzzParseCursors holds the spellings
// that were read before: "+5", "05", a line break, padding bits, ids
// below 1).
func FuzzParseCursors(f *testing.F) {
	seq := int64(7)
	for _, s := range []string{
		"", "e1:1:-", "ZTE6MTIzOjQ1", Event{ID: 123, FeedSeq: &seq}.Cursor(), Event{ID: 1}.Cursor(),
		docCursor("so", 22), docCursor("mv", math.MaxInt64), Delivery{EventID: 5, SubscriberID: 2}.Cursor(),
		StockBalance{SKU: "A:1", Warehouse: "MAIN"}.Cursor(), StockEntry{ID: 9, itemID: 3}.Cursor(),
		"ZTE6MTIzOjQ1=", "!!!!",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if c, err := ParseCursor("after", s); err != nil {
			requireAfterError(t, "ParseCursor", s, "after", err)
		} else if back := (Event{ID: c.ID, FeedSeq: c.FeedSeq}).Cursor(); back != s || c.ID < 1 || c.FeedSeq != nil && *c.FeedSeq < 1 {
			t.Fatalf("ParseCursor(%q) = %+v, written back as %q", s, c, back)
		}

		if id, err := parseDocCursor("so", s); err != nil {
			requireAfterError(t, "parseDocCursor", s, "after", err)
		} else if s == "" && id != math.MaxInt64 || s != "" && (id < 1 || docCursor("so", id) != s) {
			t.Fatalf("parseDocCursor(%q) = %d, written back as %q", s, id, docCursor("so", id))
		}

		if k, err := parseDeliveryCursor(s); err != nil {
			requireAfterError(t, "parseDeliveryCursor", s, "after", err)
		} else if back := (Delivery{EventID: k.EventID, SubscriberID: k.SubscriberID}).Cursor(); back != s || k.EventID < 1 || k.SubscriberID < 1 {
			t.Fatalf("parseDeliveryCursor(%q) = %+v, written back as %q", s, k, back)
		}

		if b, err := parseStockBalanceCursor(s); err != nil {
			requireAfterError(t, "parseStockBalanceCursor", s, "after", err)
		} else if back := b.Cursor(); back != s {
			t.Fatalf("parseStockBalanceCursor(%q) = %+v, written back as %q", s, b, back)
		}

		const itemID = 3
		if id, err := parseStockLedgerCursor(s, itemID); err != nil {
			requireAfterError(t, "parseStockLedgerCursor", s, "after", err)
		} else if back := (StockEntry{ID: id, itemID: itemID}).Cursor(); back != s || id < 1 {
			t.Fatalf("parseStockLedgerCursor(%q) = %d, written back as %q", s, id, back)
		}
	})
}

// FuzzCursorRoundTrip checks that every position a cursor is written for
// reads back as itself.
func FuzzCursorRoundTrip(f *testing.F) {
	f.Add(int64(1), int64(0), "A1", "MAIN")
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64), "a:b", "")
	f.Add(int64(42), int64(-1), "СТОЛ-01", "склад\x00")
	f.Fuzz(func(t *testing.T, id, seq int64, sku, warehouse string) {
		if id < 1 {
			id = 1 + id&math.MaxInt32
		}
		ev := Event{ID: id}
		if seq >= 1 {
			ev.FeedSeq = &seq
		}
		c, err := ParseCursor("after", ev.Cursor())
		if err != nil || c.ID != id || (c.FeedSeq == nil) != (ev.FeedSeq == nil) || c.FeedSeq != nil && *c.FeedSeq != seq {
			t.Fatalf("event %d (feed %v): cursor %q read as %+v, %v", id, ev.FeedSeq, ev.Cursor(), c, err)
		}
		if got, err := parseDocCursor("mv", docCursor("mv", id)); err != nil || got != id {
			t.Fatalf("document %d: read as %d, %v", id, got, err)
		}
		if _, err := parseDocCursor("so", docCursor("mv", id)); err == nil {
			t.Fatalf("a cursor of the moves list was taken by the sales orders list")
		}
		d := Delivery{EventID: id, SubscriberID: max(seq, 1)}
		if k, err := parseDeliveryCursor(d.Cursor()); err != nil || k != d.Key() {
			t.Fatalf("delivery %+v: read as %+v, %v", d.Key(), k, err)
		}
		b := StockBalance{SKU: sku, Warehouse: warehouse}
		if got, err := parseStockBalanceCursor(b.Cursor()); err != nil || got != b {
			t.Fatalf("balance %+v: read as %+v, %v", b, got, err)
		}
		e := StockEntry{ID: id, itemID: max(seq, 1)}
		if got, err := parseStockLedgerCursor(e.Cursor(), e.itemID); err != nil || got != id {
			t.Fatalf("ledger row %d: read as %d, %v", id, got, err)
		}
		if _, err := parseStockLedgerCursor(e.Cursor(), e.itemID+1); err == nil {
			t.Fatalf("a cursor of item %d's ledger was taken for item %d's", e.itemID, e.itemID+1)
		}
	})
}
