package app_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"erp/app"
	"erp/app/apptest"
	"erp/app/config"
	"erp/db"
	"erp/db/pgtest"
)

// traceReceiver is a webhook endpoint that keeps the traceparent header of
// every request.
type traceReceiver struct {
	mu      sync.Mutex
	parents []string
}

func newTraceReceiver(t *testing.T) (*traceReceiver, string) {
	t.Helper()
	r := &traceReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		r.mu.Lock()
		r.parents = append(r.parents, req.Header.Get("traceparent"))
		r.mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	return r, srv.URL
}

func (r *traceReceiver) received() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.parents...)
}

// salesOrderTraceParents are the trace_parent values of the sales orders'
// doc.created events, NULL as "".
func salesOrderTraceParents(t *testing.T, s *apptest.Server) []string {
	t.Helper()
	rows, err := s.Pool.Query(t.Context(), `SELECT coalesce(trace_parent, '') FROM events
		WHERE entity = 'sales_orders' AND type = 'doc.created' ORDER BY id`)
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var v string
		require.NoError(t, rows.Scan(&v))
		out = append(out, v)
	}
	require.NoError(t, rows.Err())
	return out
}

func attr(s tracetest.SpanStub, key attribute.Key) attribute.Value {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func linksTo(s tracetest.SpanStub, sc trace.SpanContext) bool {
	for _, l := range s.Links {
		if l.SpanContext.TraceID() == sc.TraceID() && l.SpanContext.SpanID() == sc.SpanID() {
			return true
		}
	}
	return false
}

// One createSalesOrder through the API, one webhook: the operation's
// span, its statements, the dispatch (by a link), the delivery and the
// webhook request are one trace, and the receiver's traceparent carries
// it, although dispatch and delivery find the mutation only through the
// event's trace_parent column.
func TestTraceFromMutationToWebhook(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.WithoutCancel(t.Context())) })
	pool, err := db.Connect(t.Context(), pgtest.NewDB(t), db.TraceStatements(tp))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := apptest.NewOn(t, pool, func(c *config.Config) { c.TracerProvider = tp })
	apptest.SeedItem(t, s)
	rcv, url := newTraceReceiver(t)
	apptest.CreateWebhook(t, s, "traced", url, "", []string{"doc.created"})

	apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": "Трассировка"})
	apptest.WaitAllProcessed(t, s)
	parents := salesOrderTraceParents(t, s)
	require.Len(t, parents, 1)

	var op, dispatch, deliver, request tracetest.SpanStub
	var insert, work []tracetest.SpanStub
	found := func() bool {
		insert, work = nil, nil
		op, dispatch, deliver, request = tracetest.SpanStub{}, tracetest.SpanStub{}, tracetest.SpanStub{}, tracetest.SpanStub{}
		for _, sp := range spans.GetSpans() {
			switch {
			case sp.Name == "mutation createSalesOrder":
				op = sp
			case sp.Name == "query SalesOrderInsert":
				insert = append(insert, sp)
			case sp.Name == "dispatch event":
				if linksTo(sp, op.SpanContext) {
					dispatch = sp
				}
			case sp.Name == "deliver event" && attr(sp, "erp.subscriber").AsString() == "traced":
				deliver = sp
			case sp.SpanKind == trace.SpanKindClient && sp.InstrumentationScope.Name == "go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp":
				request = sp
			case strings.HasPrefix(sp.Name, "river.work/"):
				work = append(work, sp)
			}
		}
		// The job's span ends after the delivery's, when River completes
		// the job: wait for it too. Usually the delivery's own
		// deliver_event job; the sweep or a release may make the attempt.
		deliverJob := false
		for _, w := range work {
			if linksTo(deliver, w.SpanContext) {
				deliverJob = true
			}
		}
		return op.SpanContext.IsValid() && dispatch.SpanContext.IsValid() && deliver.SpanContext.IsValid() &&
			request.SpanContext.IsValid() && len(insert) == 1 && deliverJob
	}
	apptest.WaitFor(t, 10*time.Second, "the spans of the event path", found)
	traceID := op.SpanContext.TraceID()

	// The event keeps the operation's span.
	want := "00-" + traceID.String() + "-" + op.SpanContext.SpanID().String() + "-01"
	require.Equal(t, want, parents[0], "events.trace_parent")
	// Its statements are its children.
	require.Equal(t, op.SpanContext.SpanID(), insert[0].Parent.SpanID(), "SalesOrderInsert's parent")
	require.Equal(t, traceID, insert[0].SpanContext.TraceID())
	// The dispatch (a River job's child) links to it.
	require.True(t, linksTo(dispatch, op.SpanContext), "dispatch links to the mutation")
	require.Equal(t, attr(dispatch, "erp.events.dispatched").AsInt64(), int64(1))
	// The delivery continues the mutation's trace and links to its job.
	require.Equal(t, traceID, deliver.SpanContext.TraceID(), "delivery in the mutation's trace")
	require.Equal(t, op.SpanContext.SpanID(), deliver.Parent.SpanID(), "delivery's parent is the stored span")
	require.Equal(t, "delivered", attr(deliver, "erp.delivery.status").AsString())
	var deliverJob bool
	for _, w := range work {
		if linksTo(deliver, w.SpanContext) {
			deliverJob = true
		}
	}
	require.True(t, deliverJob, "the delivery links to the span of the River job that made it")
	// The webhook request is the delivery's child, and the receiver got
	// its context: the mutation's trace id.
	require.Equal(t, deliver.SpanContext.SpanID(), request.Parent.SpanID(), "request's parent is the delivery")
	got := rcv.received()
	require.Len(t, got, 1)
	require.Equal(t, "00-"+traceID.String()+"-"+request.SpanContext.SpanID().String()+"-01", got[0], "receiver's traceparent")
}

// Without a tracer provider the server records nothing: no span context
// reaches the journal, the receiver gets no traceparent, and the pool has
// no statement tracer.
func TestTracingOff(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	require.Nil(t, s.Pool.Config().ConnConfig.Tracer)
	apptest.SeedItem(t, s)
	rcv, url := newTraceReceiver(t)
	apptest.CreateWebhook(t, s, "untraced", url, "", []string{"doc.created"})
	apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": "Без трассировки"})
	apptest.WaitAllProcessed(t, s)
	require.Equal(t, []string{""}, rcv.received(), "no traceparent header")
	var traced int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM events WHERE trace_parent IS NOT NULL`).Scan(&traced))
	require.Zero(t, traced, "events with a trace_parent")
}

// StartTracing reads the standard OTEL_* variables: off without an
// endpoint (no provider at all), on with one, where stop flushes the
// spans to the OTLP/HTTP endpoint. Not parallel: it sets the environment.
func TestStartTracingFromEnvironment(t *testing.T) {
	logger := apptest.Logger(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	tp, stop, err := app.StartTracing(t.Context(), logger)
	require.NoError(t, err)
	require.Nil(t, tp, "no endpoint: tracing off")
	require.NoError(t, stop(t.Context()))

	var mu sync.Mutex
	var paths []string
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		paths = append(paths, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type"))
		mu.Unlock()
	}))
	t.Cleanup(collector.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_SERVICE_NAME", "erp-test")
	tp, stop, err = app.StartTracing(t.Context(), logger)
	require.NoError(t, err)
	require.NotNil(t, tp)
	_, span := tp.Tracer("test").Start(t.Context(), "one span")
	span.End()
	require.NoError(t, stop(t.Context()))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"POST /v1/traces application/x-protobuf"}, paths, "the span flushed at stop")

	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	_, _, err = app.StartTracing(t.Context(), logger)
	require.ErrorContains(t, err, "OTEL_EXPORTER_OTLP_PROTOCOL")
}
