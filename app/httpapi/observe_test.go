package httpapi_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"erp/app/apptest"
)

func TestRequestIDInHeaderAndExtensions(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	req, err := http.NewRequest(http.MethodPost, s.URL+"/graphql", strings.NewReader(`{"query":"{ items { id } }"}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+s.Token)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = res.Body.Close() }()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	id := res.Header.Get("X-Request-Id")
	require.NotEmpty(t, id)
	require.Contains(t, string(body), `"requestId":"`+id+`"`)
}
