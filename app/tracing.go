package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// defaultServiceName names the service in traces unless OTEL_SERVICE_NAME
// (or service.name in OTEL_RESOURCE_ATTRIBUTES) says otherwise.
const defaultServiceName = "erp"

// StartTracing builds the tracer provider the OTEL_* environment asks for.
// Tracing is on when OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
// OTEL_EXPORTER_OTLP_ENDPOINT is set (and OTEL_SDK_DISABLED is not
// "true"): spans are batched to an OTLP exporter, gRPC when
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL (else OTEL_EXPORTER_OTLP_PROTOCOL) is
// "grpc", else HTTP/protobuf. The exporter reads its endpoint, headers,
// timeout, TLS and compression from the environment itself, the resource
// reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, the provider reads
// OTEL_TRACES_SAMPLER and the batch settings (OTEL_BSP_*). Off, it returns
// a nil provider and a no-op stop: no exporter, no goroutine, and nothing
// on the hot path, since every instrumented part checks for nil. stop
// flushes the spans still queued and shuts the exporter down, within
// ctx's deadline.
func StartTracing(ctx context.Context, logger *slog.Logger) (tp trace.TracerProvider, stop func(context.Context) error, err error) {
	noop := func(context.Context) error { return nil }
	endpoint := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		endpoint = os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	if endpoint == "" || strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return nil, noop, nil
	}
	protocol := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var exporter sdktrace.SpanExporter
	switch protocol {
	case "grpc":
		exporter, err = otlptracegrpc.New(ctx)
	case "", "http/protobuf":
		protocol = "http/protobuf"
		exporter, err = otlptracehttp.New(ctx)
	default:
		return nil, noop, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL: want grpc or http/protobuf, got %q", protocol)
	}
	if err != nil {
		return nil, noop, fmt.Errorf("otlp trace exporter (%s): %w", protocol, err)
	}
	// Later options win: the environment's service name over the default.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", defaultServiceName)),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithProcessPID(),
		resource.WithFromEnv(),
	)
	if err != nil {
		// A partial resource (a malformed OTEL_RESOURCE_ATTRIBUTES entry)
		// is still worth exporting under.
		logger.Warn("trace resource", slog.String("error", err.Error()))
	}
	provider := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	logger.Info("tracing on", slog.String("endpoint", endpoint), slog.String("protocol", protocol))
	return provider, func(ctx context.Context) error {
		if err := provider.Shutdown(ctx); err != nil {
			return fmt.Errorf("shut down tracing: %w", err)
		}
		return nil
	}, nil
}
