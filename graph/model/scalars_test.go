package model

import (
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/shopspring/decimal"
)

// plainDecimal is the text UnmarshalDecimal promises to read: an optional
// sign, digits with at most one point, no exponent.
var plainDecimal = regexp.MustCompile(`^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)$`)

// marshalDecimal is what MarshalDecimal writes, unquoted.
func marshalDecimal(t *testing.T, d decimal.Decimal) string {
	t.Helper()
	var b strings.Builder
	MarshalDecimal(d).MarshalGQL(&b)
	s, err := strconv.Unquote(b.String())
	if err != nil {
		t.Fatalf("MarshalDecimal(%s) wrote %s, not a JSON string: %v", d, b.String(), err)
	}
	return s
}

// scale is the number of digits after the point of a plain decimal.
func scale(s string) int {
	if _, frac, ok := strings.Cut(s, "."); ok {
		return len(frac)
	}
	return 0
}

// FuzzUnmarshalDecimal checks that a decimal sent as a string is read
// exactly when it is plain decimal digits, with its value (as math/big
// reads it) and its scale, and written back as text that reads the same.
func FuzzUnmarshalDecimal(f *testing.F) {
	for _, s := range []string{"2.500", "0", "-0.00", "+5", ".5", "5.", "00012.3400", "1e5", "1E-3", "", ".", "-",
		" 1", "1 ", "1_000", "0x10", "1.2.3", "NaN", "Inf", "٣", "123456789012345678901234567890.123456789"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := UnmarshalDecimal(s)
		if !plainDecimal.MatchString(s) {
			var se *ScalarError
			if !errors.As(err, &se) {
				t.Fatalf("UnmarshalDecimal(%q) = %s, %v; want a *ScalarError", s, d, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("UnmarshalDecimal(%q): %v", s, err)
		}
		want, ok := new(big.Rat).SetString(s)
		if !ok {
			t.Fatalf("math/big does not read %q", s)
		}
		if d.Rat().Cmp(want) != 0 {
			t.Fatalf("UnmarshalDecimal(%q) = %s, want %s", s, d, want.RatString())
		}
		out := marshalDecimal(t, d)
		if got := scale(out); got != scale(s) {
			t.Fatalf("UnmarshalDecimal(%q) written as %q: scale %d, want %d", s, out, got, scale(s))
		}
		again, err := UnmarshalDecimal(out)
		if err != nil {
			t.Fatalf("UnmarshalDecimal(%q), written by MarshalDecimal: %v", out, err)
		}
		if !again.Equal(d) || marshalDecimal(t, again) != out {
			t.Fatalf("%q read as %s, written as %q, read again as %s", s, d, out, again)
		}
	})
}

// FuzzUnmarshalDecimalFloat checks that a number literal (a float64) is
// read as the decimal it prints as, or refused when it has more digits
// than a float keeps.
func FuzzUnmarshalDecimalFloat(f *testing.F) {
	for _, v := range []float64{2.5, 0, -0.001, 1e21, 0.1, 1.0 / 3, math.MaxFloat64, math.SmallestNonzeroFloat64, math.Inf(1), math.NaN()} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v float64) {
		d, err := UnmarshalDecimal(v)
		var se *ScalarError
		if math.IsNaN(v) || math.IsInf(v, 0) {
			if !errors.As(err, &se) {
				t.Fatalf("UnmarshalDecimal(%v) = %s, %v; want a *ScalarError", v, d, err)
			}
			return
		}
		if err != nil {
			if !errors.As(err, &se) {
				t.Fatalf("UnmarshalDecimal(%v): %v, not a *ScalarError", v, err)
			}
			return
		}
		if got := d.InexactFloat64(); got != v {
			t.Fatalf("UnmarshalDecimal(%v) = %s, which is %v", v, d, got)
		}
		// The same number sent as JSON reads the same.
		n, err := UnmarshalDecimal(json.Number(strconv.FormatFloat(v, 'f', -1, 64)))
		if err != nil || !n.Equal(d) {
			t.Fatalf("UnmarshalDecimal(json.Number %v) = %s, %v; want %s", v, n, err, d)
		}
	})
}
