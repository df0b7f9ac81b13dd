package httpapi

import (
	"context"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"erp/resolvers"
)

// Tracing is the gqlgen extension that runs every query and mutation in a
// span named after the operation ("mutation createSalesOrder": its type
// and its operation name, else its first root field), so that the SQL
// statements, the River jobs inserted and the journal events written by
// its resolvers belong to it (the events keep its span as their
// trace_parent). Subscriptions are not traced: one lives for hours and
// answers thousands of times. Add it only when tracing is on: without it
// an operation pays nothing.
type Tracing struct {
	Tracer trace.Tracer
}

var (
	_ graphql.HandlerExtension    = Tracing{}
	_ graphql.ResponseInterceptor = Tracing{}
)

// ExtensionName implements graphql.HandlerExtension.
func (Tracing) ExtensionName() string { return "Tracing" }

// Validate implements graphql.HandlerExtension.
func (Tracing) Validate(graphql.ExecutableSchema) error { return nil }

// InterceptResponse implements graphql.ResponseInterceptor: the resolvers
// of a query or mutation run inside next, hence inside the span.
func (t Tracing) InterceptResponse(ctx context.Context, next graphql.ResponseHandler) *graphql.Response {
	oc := graphql.GetOperationContext(ctx)
	if oc == nil || oc.Operation == nil || oc.Operation.Operation == ast.Subscription {
		return next(ctx)
	}
	opType := string(oc.Operation.Operation)
	name := oc.OperationName
	if name == "" {
		name = rootField(oc.Operation.SelectionSet)
	}
	ctx, span := t.Tracer.Start(ctx, opType+" "+name, trace.WithAttributes(
		attribute.String("graphql.operation.type", opType),
		attribute.String("graphql.operation.name", name),
		attribute.String("erp.request_id", resolvers.RequestID(ctx)),
	))
	defer span.End()
	resp := next(ctx)
	if resp != nil && len(resp.Errors) > 0 {
		span.SetStatus(codes.Error, resp.Errors[0].Message)
	}
	return resp
}
