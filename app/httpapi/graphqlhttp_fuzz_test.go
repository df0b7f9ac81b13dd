package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/vektah/gqlparser/v2/ast"

	"erp/app/httpapi"
	"erp/db"
	"erp/graph"
	"erp/resolvers"
)

// The limits of the fuzzed handler: smaller than the server's, so that
// short inputs reach them.
const (
	fuzzMaxBody          = 4096
	fuzzMaxTokens        = 300
	fuzzMaxDepth         = 4
	fuzzMaxFields        = 12
	fuzzMaxIntrospection = 20
	fuzzMaxComplexity    = 200
)

// acceptedKey holds, in a request's context, the *[]*graphql.OperationContext
// fuzzHandler appends the operations it lets through to.
type acceptedKey struct{}

// fuzzHandler is the /graphql chain of package app from GraphQLMethods to
// the extensions that decide whether an operation runs, on the real
// schema and without a database: an operation that passes them all is
// recorded under acceptedKey and answered {"data": null} instead of
// running.
func fuzzHandler() http.Handler {
	gql := handler.New(graph.NewExecutableSchema(graph.Config{}))
	gql.AddTransport(httpapi.GraphQLHTTP{})
	gql.SetValidationRulesFn(httpapi.ValidationRules)
	gql.SetQueryCache(lru.New[*ast.QueryDocument](100))
	gql.SetParserTokenLimit(fuzzMaxTokens)
	gql.Use(&httpapi.ComplexityLimit{Max: fuzzMaxComplexity})
	gql.Use(httpapi.ShapeLimit{MaxDepth: fuzzMaxDepth, MaxFields: fuzzMaxFields, MaxIntrospectionFields: fuzzMaxIntrospection})
	gql.Use(httpapi.RolesUpfront{})
	gql.Use(extension.Introspection{})
	gql.Use(extension.AutomaticPersistedQuery{Cache: lru.New[string](100)})
	gql.AroundOperations(func(ctx context.Context, _ graphql.OperationHandler) graphql.ResponseHandler {
		accepted := ctx.Value(acceptedKey{}).(*[]*graphql.OperationContext)
		*accepted = append(*accepted, graphql.GetOperationContext(ctx))
		return graphql.OneShot(&graphql.Response{Data: json.RawMessage("null")})
	})
	gql.SetErrorPresenter(resolvers.ErrorPresenter(slog.New(slog.DiscardHandler)))
	gql.SetRecoverFunc(resolvers.Recover)
	viewer := db.User{ID: 2, Login: "viewer", Role: db.RoleViewer}
	return httpapi.GraphQLMethods(httpapi.LimitBody(fuzzMaxBody, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gql.ServeHTTP(w, r.WithContext(resolvers.WithUser(r.Context(), viewer)))
	})))
}

// naiveShape is ShapeLimit's measure computed the plain way: every
// fragment spread walked afresh, stopping after budget selections
// (without a memo the walk is exponential in the spreads), so that its
// counts are then lower bounds.
func naiveShape(set ast.SelectionSet, inIntrospection bool, budget *int) (depth, fields, introspection int) {
	for _, sel := range set {
		if *budget--; *budget < 0 {
			break
		}
		var d, n, i int
		switch s := sel.(type) {
		case *ast.Field:
			if s.Name == "__typename" {
				continue
			}
			in := inIntrospection || s.Name == "__schema" || s.Name == "__type"
			d, n, i = naiveShape(s.SelectionSet, in, budget)
			if in {
				i += n + 1
				n = 0
			} else {
				d, n = d+1, n+1
			}
		case *ast.InlineFragment:
			d, n, i = naiveShape(s.SelectionSet, inIntrospection, budget)
		case *ast.FragmentSpread:
			if s.Definition != nil {
				d, n, i = naiveShape(s.Definition.SelectionSet, inIntrospection, budget)
			}
		}
		depth, fields, introspection = max(depth, d), fields+n, introspection+i
	}
	return depth, fields, introspection
}

// FuzzGraphQLRequest sends arbitrary GET query strings and POST bodies to
// the GraphQL chain: every answer is a JSON body of coded errors with a
// 2xx or 4xx status, never a panic or a 5xx; a body that is not JSON is a
// 4xx; and an operation let through keeps to the depth and field limits,
// counted here without ShapeLimit's memo.
func FuzzGraphQLRequest(f *testing.F) {
	for _, s := range []struct {
		get          bool
		accept, body string
	}{
		{false, "", `{"query": "{ me { login } }"}`},
		{false, "application/graphql-response+json", `{"query": "query Q($n: Int) { events(first: $n) { edges { cursor } } }", "variables": {"n": "x"}}`},
		{false, "", `{"query": "{ ...A } fragment A on Query { me { login } me2: me { login } }"}`},
		{false, "", `{"query": "{ __schema { types { name fields { name type { name ofType { name } } } } } }"}`},
		{false, "", `{"query": "mutation { revokeToken(id: 1) { id } }"}`},
		{false, "", `{"query": "subscription { a: eventProcessed { id } b: eventProcessed { id } }"}`},
		{false, "", `{"extensions": {"persistedQuery": {"version": 1, "sha256Hash": "abc"}}}`},
		{false, "text/html", `{"query": "{ me { login } }"}`},
		{false, "", `{"query": 1}`},
		{false, "", `[]`},
		{false, "", `{"query": "{ me { login }"`},
		{false, "", `{"query": "{ a { b { c { d { e { f } } } } } }"}`},
		{false, "", `{"query": "{ events { edges { node { actor { login } } } } }"}`},
		{false, "", `{"query": "{ ...F ...F } fragment F on Query { me { login displayName role } }"}`},
		{true, "", `query=%7B+me+%7B+login+%7D+%7D`},
		{true, "", `query=mutation+%7B+x+%7D&variables=%5B%5D`},
		{true, "*/*;q=0", `query=%7B`},
	} {
		f.Add(s.get, s.accept, s.body)
	}
	h := fuzzHandler()
	f.Fuzz(func(t *testing.T, get bool, accept, body string) {
		var accepted []*graphql.OperationContext
		var r *http.Request
		if get {
			r = httptest.NewRequest(http.MethodGet, "/graphql", nil)
			r.URL.RawQuery = body
		} else {
			r = httptest.NewRequest(http.MethodPost, "/graphql", strings.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
		}
		if accept != "" {
			r.Header.Set("Accept", accept)
		}
		r = r.WithContext(context.WithValue(r.Context(), acceptedKey{}, &accepted))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)

		if w.Code >= 500 || w.Code < 200 {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		if !get && !json.Valid([]byte(body)) && w.Code < 400 {
			t.Fatalf("a body that is not JSON answered %d: %s", w.Code, w.Body)
		}
		var resp struct {
			Data   json.RawMessage `json:"data"`
			Errors []struct {
				Message    string         `json:"message"`
				Extensions map[string]any `json:"extensions"`
			} `json:"errors"`
		}
		dec := json.NewDecoder(bytes.NewReader(w.Body.Bytes()))
		if err := dec.Decode(&resp); err != nil {
			t.Fatalf("status %d, body not JSON (%v): %q", w.Code, err, w.Body)
		}
		if len(accepted) == 0 {
			if len(resp.Errors) == 0 {
				t.Fatalf("status %d: refused without errors: %s", w.Code, w.Body)
			}
			for _, e := range resp.Errors {
				if code, _ := e.Extensions["code"].(string); code == "" || e.Message == "" {
					t.Fatalf("status %d: an error without a code or message: %s", w.Code, w.Body)
				}
			}
			return
		}
		if w.Code != http.StatusOK || len(resp.Errors) > 0 {
			t.Fatalf("accepted, answered %d: %s", w.Code, w.Body)
		}
		op := accepted[0].Operation
		if get && op.Operation != ast.Query {
			t.Fatalf("a %s ran over GET", op.Operation)
		}
		budget := 10_000
		depth, fields, introspection := naiveShape(op.SelectionSet, false, &budget)
		if depth > fuzzMaxDepth || fields > fuzzMaxFields || introspection > fuzzMaxIntrospection {
			q, _ := url.QueryUnescape(body)
			t.Fatalf("accepted an operation %d deep with %d fields and %d of introspection: %s", depth, fields, introspection, q)
		}
	})
}
