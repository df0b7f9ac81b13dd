package db

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
)

func TestTraceParentRoundTrip(t *testing.T) {
	t.Parallel()
	tid, err := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	require.NoError(t, err)
	sid, err := trace.SpanIDFromHex("00f067aa0ba902b7")
	require.NoError(t, err)
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	got := traceParent(trace.ContextWithSpanContext(t.Context(), sc))
	require.NotNil(t, got)
	require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", *got)

	back := Event{TraceParent: got}.SpanContext()
	require.True(t, back.IsValid())
	require.True(t, back.IsRemote())
	require.Equal(t, tid, back.TraceID())
	require.Equal(t, sid, back.SpanID())
	require.True(t, back.IsSampled())

	for _, bad := range []string{"", "00-zz-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1"} {
		require.False(t, Event{TraceParent: &bad}.SpanContext().IsValid(), "%q", bad)
	}
	require.False(t, Event{}.SpanContext().IsValid())
}

// Untraced, writing an event formats nothing and allocates nothing for
// its trace_parent. Not parallel: AllocsPerRun counts the whole process.
func TestTraceParentOffAllocatesNothing(t *testing.T) {
	ctx := t.Context()
	require.Nil(t, traceParent(ctx))
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = traceParent(ctx) }))
}

func TestStatementName(t *testing.T) {
	t.Parallel()
	for sql, want := range map[string]string{
		"-- name: EventInsert :one\nWITH e AS (INSERT …)": "EventInsert",
		"select 1":                 "SELECT",
		"-- a comment\nUPDATE x":   "UPDATE",
		"-- name: \nDELETE FROM x": "DELETE",
	} {
		require.Equal(t, want, statementName(t.Context(), sql), "%q", sql)
	}
}
