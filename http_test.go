package main

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func request(t *testing.T, method, target string, header map[string]string, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, target, strings.NewReader(body))
	require.NoError(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { res.Body.Close() })
	return res
}

func TestGraphQLOverHTTP(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, serverOpts{allowedOrigins: []string{"https://shop.example"}})
	auth := "Bearer " + s.Token
	q := `{"query":"{ items { id } }"}`

	// The GraphQL-over-HTTP media type when the client asks for it.
	res := request(t, http.MethodPost, s.URL+"/graphql", map[string]string{"Authorization": auth, "Content-Type": "application/json", "Accept": "application/graphql-response+json"}, q)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, res.Header.Get("Content-Type"), "application/graphql-response+json")

	// GET runs queries; a mutation over GET is refused and writes nothing.
	res = request(t, http.MethodGet, s.URL+"/graphql?query="+url.QueryEscape("{ items { id } }"), map[string]string{"Authorization": auth}, "")
	require.Equal(t, http.StatusOK, res.StatusCode)
	res = request(t, http.MethodGet, s.URL+"/graphql?query="+url.QueryEscape(`mutation { createItem(input: {sku: "G", name: "g", unit: "шт"}) { id } }`), map[string]string{"Authorization": auth}, "")
	require.NotEqual(t, http.StatusOK, res.StatusCode)
	var n int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM items`).Scan(&n))
	require.Zero(t, n)

	// CORS: the allowed origin gets its preflight answered, others nothing.
	pre := func(origin string) *http.Response {
		return request(t, http.MethodOptions, s.URL+"/graphql", map[string]string{
			"Origin": origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type",
		}, "")
	}
	require.Equal(t, "https://shop.example", pre("https://shop.example").Header.Get("Access-Control-Allow-Origin"))
	require.Empty(t, pre("https://evil.example").Header.Get("Access-Control-Allow-Origin"))
}

func TestNoCORSWithoutAllowList(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, serverOpts{})
	res := request(t, http.MethodOptions, s.URL+"/graphql", map[string]string{
		"Origin": "https://evil.example", "Access-Control-Request-Method": "POST",
	}, "")
	require.Empty(t, res.Header.Get("Access-Control-Allow-Origin"), "no allow-list means no cross-origin browser calls")
}

func TestProductionSwitchesOffIntrospectionAndPlayground(t *testing.T) {
	t.Parallel()
	for _, off := range []bool{false, true} {
		s := newTestServer(t, serverOpts{noIntrospection: off, noPlayground: off})
		_, res := s.do(t, s.Token, `{ __schema { queryType { name } } }`, nil)
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
