package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"erp/app/apptest"
	"erp/app/config"
)

// response is an HTTP response read to its end.
type response struct {
	StatusCode int
	Header     http.Header
	Body       io.Reader
}

// request sends one request and reads its response.
func request(t *testing.T, method, target string, header map[string]string, body string) response {
	t.Helper()
	req, err := http.NewRequest(method, target, strings.NewReader(body))
	require.NoError(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = res.Body.Close() }()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return response{StatusCode: res.StatusCode, Header: res.Header, Body: bytes.NewReader(b)}
}

func TestGraphQLOverHTTP(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, func(c *config.Config) { c.AllowedOrigins = []string{"https://shop.example"} })
	auth := "Bearer " + s.Token
	q := `{"query":"{ items { id } }"}`

	// The GraphQL-over-HTTP media type when the client asks for it.
	res := request(t, http.MethodPost, s.URL+"/graphql", map[string]string{"Authorization": auth, "Content-Type": "application/json", "Accept": "application/graphql-response+json"}, q)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, res.Header.Get("Content-Type"), "application/graphql-response+json")

	// A JSON body is the only POST there is: without its Content-Type the
	// client is told so; the media type's case and parameters do not matter.
	res = request(t, http.MethodPost, s.URL+"/graphql", map[string]string{"Authorization": auth}, q)
	require.Equal(t, http.StatusUnsupportedMediaType, res.StatusCode)
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.JSONEq(t, `{"errors":[{"message":"a POST body must be JSON (Content-Type: application/json), got Content-Type \"\"","extensions":{"code":"BAD_USER_INPUT"}}]}`, string(body))
	res = request(t, http.MethodPost, s.URL+"/graphql", map[string]string{"Authorization": auth, "Content-Type": "Application/JSON; charset=utf-8"}, q)
	require.Equal(t, http.StatusOK, res.StatusCode)

	// GET runs queries; a mutation over GET is refused and writes nothing.
	res = request(t, http.MethodGet, s.URL+"/graphql?query="+url.QueryEscape("{ items { id } }"), map[string]string{"Authorization": auth}, "")
	require.Equal(t, http.StatusOK, res.StatusCode)
	res = request(t, http.MethodGet, s.URL+"/graphql?query="+url.QueryEscape(`mutation { createItem(input: {sku: "G", name: "g", unit: "шт"}) { id } }`), map[string]string{"Authorization": auth}, "")
	require.Equal(t, http.StatusMethodNotAllowed, res.StatusCode)
	require.Equal(t, http.MethodPost, res.Header.Get("Allow"))
	requireOnlyError(t, res, "BAD_USER_INPUT")
	var n int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM items`).Scan(&n))
	require.Zero(t, n)

	// CORS: the allowed origin gets its preflight answered (an
	// Idempotency-Key included), others nothing.
	pre := func(origin string) response {
		return request(t, http.MethodOptions, s.URL+"/graphql", map[string]string{
			"Origin": origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type,idempotency-key",
		}, "")
	}
	require.Equal(t, "https://shop.example", pre("https://shop.example").Header.Get("Access-Control-Allow-Origin"))
	require.Empty(t, pre("https://evil.example").Header.Get("Access-Control-Allow-Origin"))
}

// requireOnlyError checks a response body of errors and no data entry
// whose first error has extensions.code code.
func requireOnlyError(t *testing.T, res response, code string) {
	t.Helper()
	onlyError(t, res, code)
}

// onlyError is requireOnlyError returning the first error's message.
func onlyError(t *testing.T, res response, code string) string {
	t.Helper()
	var body map[string]json.RawMessage
	require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
	require.NotContains(t, body, "data", "a request that did not execute has no data entry")
	var errs []struct {
		Message    string
		Extensions struct{ Code string }
	}
	require.NoError(t, json.Unmarshal(body["errors"], &errs))
	require.NotEmpty(t, errs)
	require.Equal(t, code, errs[0].Extensions.Code)
	return errs[0].Message
}

// TestGraphQLOverHTTPStatusCodes pins the status codes the
// GraphQL-over-HTTP spec gives a failing request, per response media type.
func TestGraphQLOverHTTPStatusCodes(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	auth := "Bearer " + s.Token
	post := func(accept, body string) response {
		h := map[string]string{"Authorization": auth, "Content-Type": "application/json"}
		if accept != "" {
			h["Accept"] = accept
		}
		return request(t, http.MethodPost, s.URL+"/graphql", h, body)
	}
	for _, tc := range []struct {
		name, accept, body string
		status             int
		code               string
	}{
		{"parse failure, json", "application/json", `{"query":"{"}`, http.StatusOK, "GRAPHQL_PARSE_FAILED"},
		{"parse failure, no Accept", "", `{"query":"{"}`, http.StatusOK, "GRAPHQL_PARSE_FAILED"},
		{"validation failure, json", "application/json", `{"query":"{ nosuchfield }"}`, http.StatusOK, "GRAPHQL_VALIDATION_FAILED"},
		{"parse failure, graphql-response", "application/graphql-response+json", `{"query":"{"}`, http.StatusBadRequest, "GRAPHQL_PARSE_FAILED"},
		{"validation failure, graphql-response", "application/graphql-response+json", `{"query":"{ nosuchfield }"}`, http.StatusBadRequest, "GRAPHQL_VALIDATION_FAILED"},
		{"a typo'd query key", "application/json", `{"qeury":"{ __typename }"}`, http.StatusBadRequest, "BAD_USER_INPUT"},
		{"an Accept we do not speak", "text/html", `{"query":"{ __typename }"}`, http.StatusNotAcceptable, "BAD_USER_INPUT"},
	} {
		res := post(tc.accept, tc.body)
		require.Equal(t, tc.status, res.StatusCode, tc.name)
		requireOnlyError(t, res, tc.code)
	}
	// A variable that does not coerce is a request error too.
	res := post("application/json", `{"query":"query ($n: Int) { events(first: $n) { pageInfo { hasNextPage } } }","variables":{"n":"many"}}`)
	require.Equal(t, http.StatusOK, res.StatusCode)
	requireOnlyError(t, res, "GRAPHQL_VALIDATION_FAILED")

	// Methods /graphql does not serve: 405 with Allow, before the token.
	for _, m := range []string{http.MethodPut, http.MethodDelete, http.MethodPatch} {
		res := request(t, m, s.URL+"/graphql", map[string]string{"Content-Type": "application/json"}, `{"query":"{ __typename }"}`)
		require.Equal(t, http.StatusMethodNotAllowed, res.StatusCode, m)
		require.Equal(t, "GET, POST, OPTIONS", res.Header.Get("Allow"))
		requireOnlyError(t, res, "BAD_USER_INPUT")
	}
}

func TestNoCORSWithoutAllowList(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	res := request(t, http.MethodOptions, s.URL+"/graphql", map[string]string{
		"Origin": "https://evil.example", "Access-Control-Request-Method": "POST",
	}, "")
	require.Empty(t, res.Header.Get("Access-Control-Allow-Origin"), "no allow-list means no cross-origin browser calls")
}

func TestProductionSwitchesOffIntrospectionAndPlayground(t *testing.T) {
	t.Parallel()
	for _, off := range []bool{false, true} {
		s := apptest.New(t, func(c *config.Config) { c.Introspection, c.Playground = !off, !off })
		_, res := s.Do(t, s.Token, `{ __schema { queryType { name } } }`, nil)
		if off {
			require.NotEmpty(t, res.Errors, "introspection must be refused")
		} else {
			require.Empty(t, res.Errors)
		}
		page := request(t, http.MethodGet, s.URL+"/playground", nil, "")
		body, _ := io.ReadAll(page.Body)
		if off {
			require.Equal(t, http.StatusNotFound, page.StatusCode)
		} else {
			require.Equal(t, http.StatusOK, page.StatusCode)
			require.Contains(t, string(body), "<")
		}
	}
}

// introspectionQuery is graphql-js 16's getIntrospectionQuery with every
// option on (the playground's GraphiQL sends it with fewer): 230 fields,
// its TypeRef fragment nests ofType nine levels deep.
var introspectionQuery = `query IntrospectionQuery {
  __schema { description queryType { name kind } mutationType { name kind } subscriptionType { name kind }
    types { ...FullType }
    directives { name description isRepeatable locations args(includeDeprecated: true) { ...InputValue } } } }
fragment FullType on __Type { kind name description specifiedByURL isOneOf
  fields(includeDeprecated: true) { name description args(includeDeprecated: true) { ...InputValue } type { ...TypeRef } isDeprecated deprecationReason }
  inputFields(includeDeprecated: true) { ...InputValue } interfaces { ...TypeRef }
  enumValues(includeDeprecated: true) { name description isDeprecated deprecationReason } possibleTypes { ...TypeRef } }
fragment InputValue on __InputValue { name description type { ...TypeRef } defaultValue isDeprecated deprecationReason }
fragment TypeRef on __Type { kind name ` + strings.Repeat("ofType { name kind ", 9) + strings.Repeat("} ", 9) + "}"

func TestLimitsLetToolsInAndKeepAbuseOut(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)

	// GraphiQL and code generators read the schema: allowed.
	_, res := s.Do(t, s.Token, introspectionQuery, nil)
	require.Empty(t, res.Errors, "the playground's schema query must pass the limits")

	// Big pages add up: 50 aliases of a 500-row page are refused.
	var b strings.Builder
	for i := range 50 {
		fmt.Fprintf(&b, "p%d: events(first: 500) { edges { node { id type payload deliveries { status } } } } ", i)
	}
	_, res = s.Do(t, s.Token, "{ "+b.String()+" }", nil)
	require.NotEmpty(t, res.Errors)
	require.Equal(t, "COMPLEXITY_LIMIT_EXCEEDED", res.Errors[0].Extensions["code"])
	// One such page alone is fine.
	_, res = s.Do(t, s.Token, `{ events(first: 500) { edges { node { id type payload deliveries { status } } } } }`, nil)
	require.Empty(t, res.Errors)
}

func TestReviewFindingsAreRefusedCleanly(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	tests := []struct {
		name, query string
		vars        map[string]any
		code        string
	}{
		{"redeliver everything", `mutation { redeliverAll(filter: {}) }`, nil, "BAD_USER_INPUT"},
		{"demote the bootstrap admin", `mutation { setUserRole(login: "admin", role: VIEWER) { id } }`, nil, "BAD_USER_INPUT"},
		{"malformed DateTime", `mutation { issueToken(login: "admin", expiresAt: "2026-13-45") { token } }`, nil, "BAD_USER_INPUT"},
		{"huge webhook URL", `mutation($u: String!) { createWebhookSubscriber(input: {name: "big", url: $u}) { id } }`, map[string]any{"u": "http://x/" + strings.Repeat("a", 5000)}, "BAD_USER_INPUT"},
	}
	for _, tt := range tests {
		e := apptest.GQLErr(t, s, tt.query, tt.vars)
		require.Equal(t, tt.code, e.Extensions["code"], "%s: %s", tt.name, e.Message)
	}

	// An exhausted number series is a conflict, not an internal error.
	var year int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT extract(year FROM now())::int`).Scan(&year))
	apptest.GQL[map[string]any](t, s, `mutation($y: Int!) { setNumberSeriesStart(prefix: "ЗП", year: $y, start: 999999) }`, map[string]any{"y": year})
	po := `mutation { createPurchaseOrder(input: {supplier: "s", lines: [{sku: "A1", quantity: "1"}]}) { number } }`
	apptest.GQL[map[string]any](t, s, po, nil)
	e := apptest.GQLErr(t, s, po, nil)
	require.Equal(t, "CONFLICT", e.Extensions["code"], e.Message)
	require.Contains(t, e.Message, "exhausted")
}

// TestInvalidUTF8IsRefusedNotReplaced: a body or GET parameter that is not
// valid UTF-8 is 400 BAD_USER_INPUT, and nothing is stored (Go's JSON
// decoder would have put U+FFFD in its place).
func TestInvalidUTF8IsRefusedNotReplaced(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	auth := "Bearer " + s.Token
	create := `mutation($n: String!) { createItem(input: {sku: "U1", name: $n, unit: "шт"}) { id } }`
	body := `{"query": ` + strconv.Quote(create) + `, "variables": {"n": "Стол` + "\xff\xfe" + `"}}`
	res := request(t, http.MethodPost, s.URL+"/graphql", map[string]string{"Authorization": auth, "Content-Type": "application/json"}, body)
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	msg := onlyError(t, res, "BAD_USER_INPUT")
	require.Contains(t, msg, "not valid UTF-8")

	res = request(t, http.MethodGet, s.URL+"/graphql?query="+url.QueryEscape("{ items(sku: \"\xc3\") { id } }"), map[string]string{"Authorization": auth}, "")
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	require.Contains(t, onlyError(t, res, "BAD_USER_INPUT"), "not valid UTF-8")

	var n int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM items WHERE sku = 'U1'`).Scan(&n))
	require.Zero(t, n)
}
