// Package model holds the GraphQL-only types: custom scalars and the
// generated input/enum types that have no twin in package db.
package model

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/99designs/gqlgen/graphql"
	"github.com/shopspring/decimal"
)

// ScalarError is a malformed value of a custom scalar in a request; the
// GraphQL layer reports it as BAD_USER_INPUT at its input path.
type ScalarError struct{ Msg string }

func (e *ScalarError) Error() string { return e.Msg }

func scalarErr(format string, args ...any) error {
	return &ScalarError{Msg: fmt.Sprintf(format, args...)}
}

// quoteShort quotes s for an error message, cut after 40 characters
// (marked "…"): a request may carry megabytes in one value.
func quoteShort(s string) string {
	const max = 40
	if utf8.RuneCountInString(s) <= max {
		return strconv.Quote(s)
	}
	r := []rune(s[:min(len(s), 4*max)])
	return strconv.Quote(string(r[:max])) + "…"
}

// MarshalID64 writes an int64 database id as a GraphQL ID (a JSON string).
func MarshalID64(id int64) graphql.Marshaler {
	return graphql.WriterFunc(func(w io.Writer) {
		_, _ = io.WriteString(w, strconv.Quote(strconv.FormatInt(id, 10)))
	})
}

// UnmarshalID64 reads a GraphQL ID ("42" or 42) as a positive int64 id.
func UnmarshalID64(v any) (int64, error) {
	var s string
	switch v := v.(type) {
	case string:
		s = v
	case json.Number:
		s = v.String()
	case int64:
		s = strconv.FormatInt(v, 10)
	case int:
		s = strconv.Itoa(v)
	default:
		return 0, scalarErr("an id must be a string of digits, got %T", v)
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 1 {
		return 0, scalarErr("an id must be a positive integer, got %s", quoteShort(s))
	}
	return id, nil
}

// MarshalDecimal writes a decimal as a JSON string with its scale kept
// ("2.500").
func MarshalDecimal(d decimal.Decimal) graphql.Marshaler {
	return graphql.WriterFunc(func(w io.Writer) {
		_, _ = io.WriteString(w, strconv.Quote(d.StringFixed(max(0, -d.Exponent()))))
	})
}

// UnmarshalDecimal reads a decimal from a string ("2.5") or a JSON or
// GraphQL number, in plain digits (no exponent). A float literal with more
// than 15 significant digits is refused: it reached the server as a
// binary float, which keeps only about that many, so its digits may
// already be lost; send such a value as a string.
func UnmarshalDecimal(v any) (decimal.Decimal, error) {
	var s string
	switch v := v.(type) {
	case string:
		s = v
	case json.Number:
		s = v.String()
	case int64:
		return decimal.NewFromInt(v), nil
	case int:
		return decimal.NewFromInt(int64(v)), nil
	case float64:
		s = strconv.FormatFloat(v, 'f', -1, 64)
		if significantDigits(s) > 15 {
			return decimal.Decimal{}, scalarErr("%s has more digits than a number literal keeps: send it as a string, like \"%s\"", s, s)
		}
	default:
		return decimal.Decimal{}, scalarErr("a decimal must be a string like \"2.500\", got %T", v)
	}
	if strings.ContainsAny(s, "eE") {
		return decimal.Decimal{}, scalarErr("a decimal is written in plain digits, like \"1000\", not %s", quoteShort(s))
	}
	d, err := decimal.NewFromString(s)
	if err != nil {
		return decimal.Decimal{}, scalarErr("not a decimal number: %s", quoteShort(s))
	}
	return d, nil
}

// significantDigits counts the digits of a plain decimal number from its
// first non-zero one to its last non-zero one (1000 has one: a float holds
// it exactly).
func significantDigits(s string) int {
	digits := strings.Trim(strings.NewReplacer("-", "", ".", "").Replace(s), "0")
	return len(digits)
}

// MarshalJSON writes a stored JSON document (an event payload) unchanged.
func MarshalJSON(raw json.RawMessage) graphql.Marshaler {
	return graphql.WriterFunc(func(w io.Writer) {
		if len(raw) == 0 {
			_, _ = io.WriteString(w, "null")
			return
		}
		_, _ = w.Write(raw)
	})
}

// UnmarshalJSON accepts any JSON input value.
func UnmarshalJSON(v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, scalarErr("not JSON: %v", err)
	}
	return b, nil
}

// MarshalDateTime writes a time as RFC 3339 with offset.
func MarshalDateTime(t time.Time) graphql.Marshaler { return graphql.MarshalTime(t) }

// UnmarshalDateTime reads an RFC 3339 time ("2026-11-13T17:20:00Z"); any
// other value is a *ScalarError.
func UnmarshalDateTime(v any) (time.Time, error) {
	t, err := graphql.UnmarshalTime(v)
	if err != nil {
		return time.Time{}, scalarErr("a DateTime is RFC 3339 with offset, like \"2026-11-13T17:20:00Z\"")
	}
	return t, nil
}
