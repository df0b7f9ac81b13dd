package demo

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestClientErrors: GraphQL errors are an *Error whatever the HTTP status,
// and a body that is not GraphQL says so with its status.
func TestClientErrors(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("Authorization") {
		case "Bearer good":
			fmt.Fprint(w, `{"data":{"ok":true}}`)
		case "Bearer field":
			fmt.Fprint(w, `{"errors":[{"message":"bad sku","extensions":{"code":"BAD_USER_INPUT","field":"sku"}}]}`)
		case "Bearer proxy":
			w.WriteHeader(http.StatusBadGateway)
			fmt.Fprint(w, "<html>bad gateway</html>")
		default:
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"errors":[{"message":"invalid token","extensions":{"code":"UNAUTHENTICATED"}}]}`)
		}
	}))
	t.Cleanup(srv.Close)
	c := func(token string) *client { return &client{endpoint: srv.URL, token: token, http: srv.Client()} }

	res, err := call[struct{ OK bool }](t.Context(), c("good"), `{ ok }`, nil)
	require.NoError(t, err)
	require.True(t, res.OK)

	err = c("wrong").exec(t.Context(), `{ ok }`, nil)
	require.Equal(t, "UNAUTHENTICATED", Code(fmt.Errorf("step: %w", err)))
	e, ok := errors.AsType[*Error](err)
	require.True(t, ok, "%T", err)
	require.Equal(t, http.StatusUnauthorized, e.Status)

	err = c("field").exec(t.Context(), `{ ok }`, nil)
	require.EqualError(t, err, "BAD_USER_INPUT: bad sku (field sku)")

	err = c("proxy").exec(t.Context(), `{ ok }`, nil)
	require.ErrorContains(t, err, "http 502")
	require.ErrorContains(t, err, "not a GraphQL response")
	require.Empty(t, Code(err))
}
