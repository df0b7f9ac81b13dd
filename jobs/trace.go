package jobs

import (
	"context"
	"net/http"

	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"erp/db"
)

// tracerName is the instrumentation scope of this package's spans.
const tracerName = "erp/jobs"

// Span names and attributes of the event path. Each dispatch is a span
// "dispatch event" (a child of its River job's span) with a link to the
// span that wrote each event it dispatched (events.trace_parent): a batch
// dispatches the events of many mutations, and a link, unlike a parent,
// can name all of them. Each delivery attempt is a span "deliver event"
// whose parent is the span that wrote the event, so that the attempt, and
// the webhook request it makes with its traceparent header, continue the
// writer's trace however late and on whichever instance they run; it links
// to the River job's span that ran it.
const (
	spanDispatch     = "dispatch event"
	spanDeliver      = "deliver event"
	attrEventID      = attribute.Key("erp.event.id")
	attrEventType    = attribute.Key("erp.event.type")
	attrEvents       = attribute.Key("erp.events.dispatched")
	attrSubscriber   = attribute.Key("erp.subscriber")
	attrAttempt      = attribute.Key("erp.delivery.attempt")
	attrDeliveryStat = attribute.Key("erp.delivery.status")
)

// WithWebhookTracing makes the sender's requests client spans on tp
// (otelhttp's transport), each sending the W3C traceparent of its span, a
// child of the delivery span, so the receiver continues the trace of the
// mutation that wrote the event. nil tp: no tracing, the plain transport.
func WithWebhookTracing(tp trace.TracerProvider) WebhookSenderOption {
	return func(o *webhookSenderOptions) { o.tracerProvider = tp }
}

// tracedTransport wraps base in otelhttp's transport on tp, propagating
// W3C Trace Context whatever the process's global propagator is.
func tracedTransport(base http.RoundTripper, tp trace.TracerProvider) http.RoundTripper {
	return otelhttp.NewTransport(base,
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelhttp.WithPropagators(propagation.TraceContext{}))
}

// RiverTracing is River's OpenTelemetry middleware on tp (otelriver): a
// producer span per batch of jobs inserted, a consumer span per job worked
// ("river.work/dispatch_event"), linked to the span that inserted the job
// through the traceparent it leaves in the job's metadata.
func RiverTracing(tp trace.TracerProvider) rivertype.Middleware {
	return otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
		EnableTracePropagation:      true,
		EnableWorkSpanJobKindSuffix: true,
		MeterProvider:               metricnoop.NewMeterProvider(),
		TracerProvider:              tp,
	})
}

// dispatch is dispatchLoop in a "dispatch event" span when tracing is on.
func (d *Dispatcher) dispatch(ctx context.Context, id int64) (txWork, error) {
	if d.tracer == nil {
		return d.dispatchLoop(ctx, id)
	}
	ctx, span := d.tracer.Start(ctx, spanDispatch, trace.WithAttributes(attrEventID.Int64(id)))
	defer span.End()
	w, err := d.dispatchLoop(ctx, id)
	for _, l := range w.links {
		span.AddLink(l)
	}
	span.SetAttributes(attrEvents.Int(len(w.dispatched)))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return w, err
}

// writerLinks are links to the spans that wrote events (those written
// traced); nil when tracing is off.
func (d *Dispatcher) writerLinks(events []db.Event) []trace.Link {
	if d.tracer == nil {
		return nil
	}
	var links []trace.Link
	for _, ev := range events {
		if sc := ev.SpanContext(); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attrEventID.Int64(ev.ID)}})
		}
	}
	return links
}

// traced runs one attempt of ev to sub (number attemptNo) in a "deliver
// event" span when tracing is on: a child of the span that wrote ev (when
// it was written traced), linked to the span in ctx (the River job's, or
// the dispatch's). fn gets the span's context.
func (d *Dispatcher) traced(ctx context.Context, sub db.Subscriber, ev db.Event, attemptNo int32, fn func(context.Context) (db.Attempt, error)) (db.Attempt, error) {
	if d.tracer == nil {
		return fn(ctx)
	}
	opts := []trace.SpanStartOption{trace.WithAttributes(attrEventID.Int64(ev.ID), attrEventType.String(ev.Type),
		attrSubscriber.String(sub.Name), attrAttempt.Int(int(attemptNo)))}
	parent := ctx
	if writer := ev.SpanContext(); writer.IsValid() {
		if here := trace.SpanContextFromContext(ctx); here.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: here}))
		}
		parent = trace.ContextWithRemoteSpanContext(ctx, writer)
	}
	actx, span := d.tracer.Start(parent, spanDeliver, opts...)
	defer span.End()
	a, err := fn(actx)
	switch {
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	case a.Status != "":
		span.SetAttributes(attrDeliveryStat.String(a.Status))
		if a.Error != "" {
			span.SetStatus(codes.Error, a.Error)
		}
	}
	return a, err
}
