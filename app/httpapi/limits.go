package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"sync/atomic"
	"unicode/utf8"

	"github.com/99designs/gqlgen/complexity"
	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/errcode"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"erp/resolvers"
)

// ComplexityLimit is a gqlgen extension refusing an operation whose
// complexity, as gqlgen's complexity.Calculate weighs it with the schema's
// complexity functions, is over Max: COMPLEXITY_LIMIT_EXCEEDED, with
// gqlgen's message. It is gqlgen's extension.FixedComplexityLimit without
// the ComplexityStats that one keeps in the operation's Stats: nothing
// reads them, and their map would cost every open subscription 300 bytes
// for its life. Use it by pointer (Validate takes the schema).
type ComplexityLimit struct {
	Max int

	es graphql.ExecutableSchema
}

var _ interface {
	graphql.HandlerExtension
	graphql.OperationContextMutator
} = (*ComplexityLimit)(nil)

// ExtensionName implements graphql.HandlerExtension.
func (*ComplexityLimit) ExtensionName() string { return "ComplexityLimit" }

// Validate implements graphql.HandlerExtension.
func (c *ComplexityLimit) Validate(es graphql.ExecutableSchema) error {
	c.es = es
	return nil
}

// MutateOperationContext implements graphql.OperationContextMutator.
func (c *ComplexityLimit) MutateOperationContext(ctx context.Context, opCtx *graphql.OperationContext) *gqlerror.Error {
	n := complexity.Calculate(ctx, c.es, opCtx.Operation, opCtx.Variables)
	if n <= c.Max {
		return nil
	}
	err := gqlerror.Errorf("operation has complexity %d, which exceeds the limit of %d", n, c.Max)
	errcode.Set(err, "COMPLEXITY_LIMIT_EXCEEDED")
	return err
}

// ShapeLimit is a gqlgen extension refusing operations whose fields nest
// deeper than MaxDepth or that select more than MaxFields fields (aliases
// and fragments expanded), on every transport, before anything runs.
// gqlgen limits complexity and tokens itself, but complexity weighs list
// pages, not the plain count of fields a response is built from, and
// skips introspection. Introspection (__schema, __type and everything
// under them) is counted the same way against MaxIntrospectionFields, and
// not against MaxDepth: GraphiQL's schema query nests 15 deep in ofType
// chains. __typename is not counted: a constant, which Apollo Client adds
// to every selection.
type ShapeLimit struct{ MaxDepth, MaxFields, MaxIntrospectionFields int }

var _ interface {
	graphql.HandlerExtension
	graphql.OperationContextMutator
} = ShapeLimit{}

// ExtensionName implements graphql.HandlerExtension.
func (ShapeLimit) ExtensionName() string { return "ShapeLimit" }

// Validate implements graphql.HandlerExtension.
func (ShapeLimit) Validate(graphql.ExecutableSchema) error { return nil }

// MutateOperationContext implements graphql.OperationContextMutator.
func (l ShapeLimit) MutateOperationContext(_ context.Context, opCtx *graphql.OperationContext) *gqlerror.Error {
	if opCtx.Operation == nil {
		return nil
	}
	st := selectionShape(opCtx.Operation.SelectionSet, map[*ast.FragmentDefinition]shape{})
	if st.depth > l.MaxDepth {
		return resolvers.CodedError(fmt.Sprintf("operation nests %d levels deep, more than the limit of %d", st.depth, l.MaxDepth), resolvers.CodeBadUserInput)
	}
	if st.fields > l.MaxFields {
		return resolvers.CodedError(fmt.Sprintf("operation selects %d fields, more than the limit of %d", st.fields, l.MaxFields), resolvers.CodeBadUserInput)
	}
	if st.introspection > l.MaxIntrospectionFields {
		return resolvers.CodedError(fmt.Sprintf("operation selects %d introspection fields, more than the limit of %d", st.introspection, l.MaxIntrospectionFields), resolvers.CodeBadUserInput)
	}
	return nil
}

// shape is what selectionShape measures: the depth and fields of the
// data selected, and the fields of introspection.
type shape struct{ depth, fields, introspection int }

// selectionShape measures set. Validation has already refused fragment
// cycles; memo keeps repeated spreads linear. Field counts saturate rather
// than overflow on fragments spread many times.
func selectionShape(set ast.SelectionSet, memo map[*ast.FragmentDefinition]shape) shape {
	var out shape
	for _, sel := range set {
		var sub shape
		switch s := sel.(type) {
		case *ast.Field:
			switch s.Name {
			case "__typename":
				continue
			case "__schema", "__type":
				in := selectionShape(s.SelectionSet, memo)
				sub.introspection = min(1+in.fields+in.introspection, 1<<30)
			default:
				sub = selectionShape(s.SelectionSet, memo)
				sub.depth++
				sub.fields++
			}
		case *ast.InlineFragment:
			sub = selectionShape(s.SelectionSet, memo)
		case *ast.FragmentSpread:
			if s.Definition == nil {
				continue
			}
			v, ok := memo[s.Definition]
			if !ok {
				v = selectionShape(s.Definition.SelectionSet, memo)
				memo[s.Definition] = v
			}
			sub = v
		}
		out.depth = max(out.depth, sub.depth)
		out.fields = min(out.fields+sub.fields, 1<<30)
		out.introspection = min(out.introspection+sub.introspection, 1<<30)
	}
	return out
}

// ResponseLimit is a gqlgen extension bounding what one response (of a
// query, a mutation or one subscription event) costs once it runs: at
// most MaxFields fields resolved plus objects in lists (introspection's
// too), and at most MaxBytes bytes of data. Past MaxFields nothing more
// resolves, so the memory and time a response takes stay in proportion to
// MaxFields; a response past either bound is one error,
// RESPONSE_TOO_LARGE, and no data (a mutation's writes stand: only its
// answer is refused). ShapeLimit and ComplexityLimit refuse most such
// operations before they run; this holds where lists multiply unweighed,
// as in introspection's types { fields { type { fields … } } } or a page
// of orders' lines.
type ResponseLimit struct{ MaxFields, MaxBytes int }

var _ interface {
	graphql.HandlerExtension
	graphql.ResponseInterceptor
	graphql.FieldInterceptor
} = ResponseLimit{}

// ExtensionName implements graphql.HandlerExtension.
func (ResponseLimit) ExtensionName() string { return "ResponseLimit" }

// Validate implements graphql.HandlerExtension.
func (ResponseLimit) Validate(graphql.ExecutableSchema) error { return nil }

// fieldsKey holds the *atomic.Int64 counting a response's fields.
type fieldsKey struct{}

// InterceptResponse implements graphql.ResponseInterceptor.
func (l ResponseLimit) InterceptResponse(ctx context.Context, next graphql.ResponseHandler) *graphql.Response {
	var fields atomic.Int64
	resp := next(context.WithValue(ctx, fieldsKey{}, &fields))
	if resp == nil {
		return nil
	}
	var msg string
	switch {
	case fields.Load() > int64(l.MaxFields):
		msg = fmt.Sprintf("response has more than %d fields and objects in lists, the limit", l.MaxFields)
	case len(resp.Data) > l.MaxBytes:
		msg = fmt.Sprintf("response has %d bytes of data, more than the limit of %d", len(resp.Data), l.MaxBytes)
	default:
		return resp
	}
	// A new response: a subscription's may be shared by other sockets.
	return &graphql.Response{
		Errors:     gqlerror.List{resolvers.CodedError(msg, CodeResponseTooLarge)},
		Extensions: resp.Extensions,
	}
}

// InterceptField implements graphql.FieldInterceptor. A list of objects
// counts its elements besides: an element selecting only __typename
// resolves no field. Past the limit a field resolves to null without an
// error (gqlgen takes a Marshaler from a field interceptor as the
// field's value): one error per field would cost what the limit saves.
func (l ResponseLimit) InterceptField(ctx context.Context, next graphql.Resolver) (any, error) {
	fields, ok := ctx.Value(fieldsKey{}).(*atomic.Int64)
	if !ok {
		return next(ctx)
	}
	if fields.Add(1) > int64(l.MaxFields) {
		return graphql.Null, nil
	}
	res, err := next(ctx)
	if v := reflect.ValueOf(res); v.Kind() == reflect.Slice && graphql.GetFieldContext(ctx).Field.Selections != nil &&
		fields.Add(int64(v.Len())) > int64(l.MaxFields) {
		return graphql.Null, nil
	}
	return res, err
}

// CodeResponseTooLarge is the code of a response past ResponseLimit.
const CodeResponseTooLarge = "RESPONSE_TOO_LARGE"

// LimitBody caps request bodies at max bytes and refuses malformed JSON
// with a plain GraphQL error (BAD_USER_INPUT) before gqlgen, whose own
// decoding errors echo the body and name Go types. 413 when too large, 415
// for a POST whose Content-Type is not application/json (gqlgen would
// answer "transport not supported"), 400 for a body that is not valid
// UTF-8.
func LimitBody(max int64, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		if !isJSON(r.Header.Get("Content-Type")) {
			writeError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("a POST body must be JSON (Content-Type: application/json), got Content-Type %.60q", r.Header.Get("Content-Type")), resolvers.CodeBadUserInput)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, max+1))
		if err != nil {
			writeError(w, http.StatusBadRequest, "could not read the request body", resolvers.CodeBadUserInput)
			return
		}
		if int64(len(body)) > max {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", max), resolvers.CodeBadUserInput)
			return
		}
		if !utf8.Valid(body) {
			// Go's JSON decoder would store U+FFFD in place of the bad bytes.
			writeError(w, http.StatusBadRequest, "request body is not valid UTF-8", resolvers.CodeBadUserInput)
			return
		}
		if !validRequest(body) {
			writeError(w, http.StatusBadRequest, `request body must be a JSON object {"query": string, "variables": object, "operationName": string}`, resolvers.CodeBadUserInput)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

// isJSON reports whether a Content-Type is application/json, whatever its
// case and parameters (the test gqlgen's POST transport makes).
func isJSON(contentType string) bool {
	mediaType, _, err := mime.ParseMediaType(contentType)
	return err == nil && mediaType == "application/json"
}

// validRequest checks the shape of a GraphQL-over-HTTP JSON body.
func validRequest(body []byte) bool {
	var req struct {
		Query         *string        `json:"query"`
		OperationName *string        `json:"operationName"`
		Variables     map[string]any `json:"variables"`
		Extensions    map[string]any `json:"extensions"`
	}
	return json.Unmarshal(body, &req) == nil
}

func writeError(w http.ResponseWriter, status int, msg, code string) {
	w.Header().Set("Content-Type", "application/json")
	writeErrors(w, status, gqlerror.List{resolvers.CodedError(msg, code)})
}
