package httpapi

import (
	"encoding/json"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"erp/resolvers"
)

// Media types of a GraphQL-over-HTTP response.
const (
	mediaJSON            = "application/json"
	mediaGraphQLResponse = "application/graphql-response+json"
)

// GraphQLHTTP is the GraphQL-over-HTTP transport for GET and POST
// (application/json bodies), answering as the GraphQL-over-HTTP spec
// says where gqlgen's GET and POST transports do not:
//
//   - the response is application/graphql-response+json when the Accept
//     header lists it, else application/json; an Accept that allows
//     neither is 406;
//   - a request with neither `query` nor a persisted query is 400;
//   - a document that does not parse or validate, or variables that do
//     not coerce, is 200 with `errors` under application/json (so older
//     clients read the errors) and 400 with `errors` and no `data` under
//     application/graphql-response+json;
//   - a mutation or subscription over GET is 405 with Allow: POST.
//
// Every refusal is a GraphQL error body with extensions.code. LimitBody
// has already refused bodies that are not a JSON object.
type GraphQLHTTP struct{}

var _ graphql.Transport = GraphQLHTTP{}

// Supports implements graphql.Transport: GET without Upgrade, and POST
// with Content-Type application/json.
func (GraphQLHTTP) Supports(r *http.Request) bool {
	if r.Header.Get("Upgrade") != "" {
		return false
	}
	switch r.Method {
	case http.MethodGet:
		return true
	case http.MethodPost:
		return isJSON(r.Header.Get("Content-Type"))
	}
	return false
}

// Do implements graphql.Transport.
func (GraphQLHTTP) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	media, ok := responseMedia(r.Header.Get("Accept"))
	if !ok {
		writeError(w, http.StatusNotAcceptable, "the Accept header allows neither application/graphql-response+json nor application/json", resolvers.CodeBadUserInput)
		return
	}
	w.Header().Set("Content-Type", media)
	start := graphql.Now()
	params, err := requestParams(r)
	if err != nil {
		writeErrors(w, http.StatusBadRequest, gqlerror.List{resolvers.CodedError(err.Error(), resolvers.CodeBadUserInput)})
		return
	}
	params.Headers = r.Header
	params.ReadTime = graphql.TraceTiming{Start: start, End: graphql.Now()}

	ctx := r.Context()
	opCtx, errs := exec.CreateOperationContext(ctx, params)
	if errs != nil {
		status := http.StatusOK
		if media == mediaGraphQLResponse {
			status = http.StatusBadRequest
		}
		resp := exec.DispatchError(graphql.WithOperationContext(ctx, opCtx), errs)
		writeErrors(w, status, resp.Errors)
		return
	}
	if r.Method == http.MethodGet && opCtx.Operation.Operation != ast.Query {
		w.Header().Set("Allow", http.MethodPost)
		writeErrors(w, http.StatusMethodNotAllowed, gqlerror.List{resolvers.CodedError("a "+string(opCtx.Operation.Operation)+" must be sent with POST; GET runs queries only", resolvers.CodeBadUserInput)})
		return
	}
	responses, ctx := exec.DispatchOperation(ctx, opCtx)
	writeResponse(w, http.StatusOK, responses(ctx))
}

// GraphQLMethods refuses, before authentication, every method /graphql
// does not serve (PUT, DELETE, PATCH, …) with 405, an Allow header and a
// GraphQL error body (BAD_USER_INPUT), where gqlgen would answer 400
// "transport not supported" with no code.
func GraphQLMethods(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodPost, http.MethodOptions:
			next.ServeHTTP(w, r)
		default:
			w.Header().Set("Allow", "GET, POST, OPTIONS")
			writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" is not allowed on /graphql: use POST (or GET for queries)", resolvers.CodeBadUserInput)
		}
	})
}

// responseMedia picks the response media type from an Accept header: the
// first of its entries that names one we speak (a wildcard means
// application/json, which every client reads); no header is
// application/json.
func responseMedia(accept string) (string, bool) {
	if strings.TrimSpace(accept) == "" {
		return mediaJSON, true
	}
	for part := range strings.SplitSeq(accept, ",") {
		mediaType, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil || params["q"] == "0" {
			continue
		}
		switch mediaType {
		case mediaGraphQLResponse:
			return mediaGraphQLResponse, true
		case mediaJSON, "application/*", "*/*":
			return mediaJSON, true
		}
	}
	return "", false
}

// errQuery is a request that says nothing to run.
type errQuery string

func (e errQuery) Error() string { return string(e) }

// requestParams reads query, operationName, variables and extensions from
// the URL (GET) or the JSON body (POST).
func requestParams(r *http.Request) (*graphql.RawParams, error) {
	params := &graphql.RawParams{}
	if r.Method == http.MethodGet {
		q := r.URL.Query()
		for _, name := range []string{"query", "operationName", "variables", "extensions"} {
			if !utf8.ValidString(q.Get(name)) {
				return nil, errQuery("the " + name + " parameter is not valid UTF-8")
			}
		}
		params.Query = q.Get("query")
		params.OperationName = q.Get("operationName")
		for name, into := range map[string]*map[string]any{"variables": &params.Variables, "extensions": &params.Extensions} {
			if v := q.Get(name); v != "" {
				if err := decodeJSON(v, into); err != nil {
					return nil, errQuery("the " + name + " parameter must be a JSON object")
				}
			}
		}
	} else {
		dec := json.NewDecoder(r.Body)
		dec.UseNumber()
		if err := dec.Decode(params); err != nil {
			return nil, errQuery(`request body must be a JSON object {"query": string, "variables": object, "operationName": string}`)
		}
	}
	if params.Query == "" && params.Extensions["persistedQuery"] == nil {
		return nil, errQuery(`the request has no "query"`)
	}
	return params, nil
}

func decodeJSON(s string, into *map[string]any) error {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	return dec.Decode(into)
}

// writeErrors writes a response of errors only: no `data` entry, as the
// spec asks of a request that never executed.
func writeErrors(w http.ResponseWriter, status int, errs gqlerror.List) {
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Errors gqlerror.List `json:"errors"`
	}{errs})
}

func writeResponse(w http.ResponseWriter, status int, resp *graphql.Response) {
	b, err := json.Marshal(resp)
	if err != nil {
		writeErrors(w, http.StatusInternalServerError, gqlerror.List{resolvers.CodedError("internal error", resolvers.CodeInternal)})
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
