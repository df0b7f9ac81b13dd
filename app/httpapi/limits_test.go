package httpapi_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/stretchr/testify/require"

	"erp/app/apptest"
	"erp/app/httpapi"
	"erp/graph"
)

// aliased is n aliases of field: "p0: field p1: field …".
func aliased(prefix string, n int, field string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s%d: %s ", prefix, i, field)
	}
	return b.String()
}

// Not parallel: it measures the process's heap, which the application
// shares with the test; Go runs the parallel tests after it.
func TestAliasedIntrospectionIsBounded(t *testing.T) {
	s := apptest.New(t)
	shop := apptest.RoleToken(t, s, "shop", "INTEGRATION")
	queries := []struct {
		name, query string
		code        string
	}{
		// The probe's query: aliased types and fields inside fragments
		// multiply (answered 24.7 MB before the limits counted them).
		{"aliased types and fields in fragments", `{ ...Q }
fragment Q on Query { ` + aliased("s", 10, "__schema { ...S }") + `}
fragment S on __Schema { ` + aliased("t", 10, "types { ...T }") + `}
fragment T on __Type { kind name description ` + aliased("f", 10, "fields(includeDeprecated: true) { ...F }") + `}
fragment F on __Field { name description isDeprecated deprecationReason args { name description defaultValue type { ...R } } type { ...R } }
fragment R on __Type { kind name ofType { kind name ofType { kind name ofType { kind name } } } }`, "BAD_USER_INPUT"},
		// Within the selection limits (497 introspection fields), but
		// every type's fields, and their types' fields, each selecting 97
		// names, make over 100,000 as the response is built.
		{"aliased names where lists multiply", `{ __schema { types { fields { ...L type {
  fields { ...L } ofType { fields { ...L } ofType { fields { ...L } ofType { fields { ...L } } } } } } } } }
fragment L on __Field { ` + aliased("n", 97, "name") + `}`, httpapi.CodeResponseTooLarge},
	}

	heap := func() uint64 {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	runtime.GC()
	base := heap()
	peak := base
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			peak = max(peak, heap())
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	for _, q := range queries {
		require.InDelta(t, 1500, len(q.query), 500, "%s: a query of a kilobyte or two", q.name)
		for range 3 {
			status, res := s.Do(t, shop, q.query, nil)
			require.Equal(t, http.StatusOK, status, q.name)
			require.Len(t, res.Errors, 1, q.name)
			require.Equal(t, q.code, res.Errors[0].Extensions["code"], "%s: %s", q.name, res.Errors[0].Message)
			require.Contains(t, []string{"", "null"}, string(res.Data), q.name)
		}
	}
	close(stop)
	<-sampled
	t.Logf("heap %d MB, at most %d MB while answering", base>>20, peak>>20)
	// The documented bound of one response (docs/api.md, "Requests are
	// limited"): 64 MB, about 30 MB measured at the 100,000 fields.
	require.Less(t, peak-base, uint64(64<<20), "heap grew from %d MB to %d MB", base>>20, peak>>20)
	runtime.GC()
	require.Less(t, int64(heap())-int64(base), int64(8<<20), "nothing of the refused responses is kept")

	// The playground's schema query is answered, whoever asks.
	_, res := s.Do(t, shop, introspectionQuery, nil)
	require.Empty(t, res.Errors)
}

func TestResponseLimitRefusesPastEitherBound(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name              string
		maxFields, maxLen int
		wantErr           string
	}{
		{"within both", 100_000, 1 << 20, ""},
		{"past the fields", 1000, 1 << 20, "response has more than 1000 fields and objects in lists, the limit"},
		{"past the bytes", 100_000, 10_000, "bytes of data, more than the limit of 10000"},
	}
	for _, tt := range tests {
		// Introspection needs no resolvers.
		h := handler.New(graph.NewExecutableSchema(graph.Config{}))
		h.AddTransport(transport.POST{})
		h.Use(extension.Introspection{})
		h.Use(httpapi.ResponseLimit{MaxFields: tt.maxFields, MaxBytes: tt.maxLen})
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/graphql", strings.NewReader(fmt.Sprintf(`{"query": %q}`, introspectionQuery)))
		r.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(w, r)
		body := w.Body.String()
		if tt.wantErr == "" {
			require.NotContains(t, body, `"errors"`, tt.name)
			require.Contains(t, body, `"__schema"`, tt.name)
			continue
		}
		require.Contains(t, body, tt.wantErr, tt.name)
		require.Contains(t, body, `"code":"RESPONSE_TOO_LARGE"`, tt.name)
		require.Contains(t, body, `"data":null`, tt.name)
	}
}
