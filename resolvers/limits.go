package resolvers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// DepthLimit is a gqlgen extension refusing operations whose fields nest
// deeper than Max (fragments followed), on every transport, before anything
// runs. gqlgen limits complexity and tokens itself but not depth.
type DepthLimit struct{ Max int }

var _ interface {
	graphql.HandlerExtension
	graphql.OperationContextMutator
} = DepthLimit{}

// ExtensionName implements graphql.HandlerExtension.
func (DepthLimit) ExtensionName() string { return "DepthLimit" }

// Validate implements graphql.HandlerExtension.
func (DepthLimit) Validate(graphql.ExecutableSchema) error { return nil }

// MutateOperationContext implements graphql.OperationContextMutator.
func (l DepthLimit) MutateOperationContext(_ context.Context, opCtx *graphql.OperationContext) *gqlerror.Error {
	if opCtx.Operation == nil {
		return nil
	}
	memo := map[*ast.FragmentDefinition]int{}
	if d := selectionDepth(opCtx.Operation.SelectionSet, memo); d > l.Max {
		return gqlErrorWithCode(fmt.Sprintf("operation nests %d levels deep, more than the limit of %d", d, l.Max), codeBadUserInput)
	}
	return nil
}

// selectionDepth is the deepest chain of fields in set. Validation has
// already refused fragment cycles; memo keeps repeated spreads linear.
func selectionDepth(set ast.SelectionSet, memo map[*ast.FragmentDefinition]int) int {
	deepest := 0
	for _, sel := range set {
		d := 0
		switch s := sel.(type) {
		case *ast.Field:
			d = 1 + selectionDepth(s.SelectionSet, memo)
		case *ast.InlineFragment:
			d = selectionDepth(s.SelectionSet, memo)
		case *ast.FragmentSpread:
			if s.Definition == nil {
				continue
			}
			v, ok := memo[s.Definition]
			if !ok {
				v = selectionDepth(s.Definition.SelectionSet, memo)
				memo[s.Definition] = v
			}
			d = v
		}
		deepest = max(deepest, d)
	}
	return deepest
}

// LimitBody caps request bodies at max bytes and refuses malformed JSON
// with a plain GraphQL error (BAD_USER_INPUT) before gqlgen, whose own
// decoding errors echo the body and name Go types. 413 when too large.
func LimitBody(max int64, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, max+1))
		if err != nil {
			writeError(w, http.StatusBadRequest, "could not read the request body", codeBadUserInput)
			return
		}
		if int64(len(body)) > max {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", max), codeBadUserInput)
			return
		}
		if isJSON(r.Header.Get("Content-Type")) && !validRequest(body) {
			writeError(w, http.StatusBadRequest, `request body must be a JSON object {"query": string, "variables": object, "operationName": string}`, codeBadUserInput)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

func isJSON(contentType string) bool {
	return len(contentType) >= 16 && contentType[:16] == "application/json"
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
	transport.SendError(w, status, gqlErrorWithCode(msg, code))
}
