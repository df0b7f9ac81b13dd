package web

import (
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func newMux(t *testing.T, cfg Config) *http.ServeMux {
	t.Helper()
	mux := http.NewServeMux()
	Register(mux, cfg)
	return mux
}

func get(t *testing.T, h http.Handler, target string, header ...string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, target, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func body(t *testing.T, res *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return string(b)
}

func TestConfigJSON(t *testing.T) {
	t.Parallel()
	moscow, err := time.LoadLocation("Europe/Moscow")
	require.NoError(t, err)
	tests := []struct {
		loc  *time.Location
		want string
	}{
		{moscow, `{"timeZone":"Europe/Moscow"}`},
		{time.UTC, `{"timeZone":"UTC"}`},
		{nil, `{"timeZone":"UTC"}`},
	}
	for _, tt := range tests {
		res := get(t, newMux(t, Config{TimeZone: tt.loc}), "/config.json")
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.Equal(t, "application/json", res.Header.Get("Content-Type"))
		require.JSONEq(t, tt.want, body(t, res))
	}
}

// The built pages reference only assets that are embedded: a stale or
// partial dist/ (sources changed, make web not run) fails here.
func TestPagesReferenceEmbeddedAssets(t *testing.T) {
	t.Parallel()
	mux := newMux(t, Config{})
	ref := regexp.MustCompile(`(?:src|href)="(/assets/[^"]+)"`)
	for _, page := range []string{"/events", "/playground"} {
		res := get(t, mux, page)
		require.Equal(t, http.StatusOK, res.StatusCode, page)
		require.Equal(t, "text/html; charset=utf-8", res.Header.Get("Content-Type"))
		html := body(t, res)
		refs := ref.FindAllStringSubmatch(html, -1)
		require.NotEmpty(t, refs, "%s links no assets: run make web", page)
		for _, m := range refs {
			res := get(t, mux, m[1])
			require.Equal(t, http.StatusOK, res.StatusCode, "%s links %s", page, m[1])
			require.Equal(t, "public, max-age=31536000, immutable", res.Header.Get("Cache-Control"))
		}
		require.NotContains(t, html, "https://", "%s must not load anything from the internet", page)
	}
}

func TestEventsPageHeaders(t *testing.T) {
	t.Parallel()
	res := get(t, newMux(t, Config{}), "/events?type=order.received")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "no-cache", res.Header.Get("Cache-Control"))
	require.Contains(t, res.Header.Get("Content-Security-Policy"), "connect-src 'self'")
	html := body(t, res)
	for _, th := range []string{"№", "Событие", "Объект", "Данные", "Создано", "Обработано", "Кто"} {
		require.Contains(t, html, "<th>"+th+"</th>")
	}
}

func TestAssetsGzip(t *testing.T) {
	t.Parallel()
	mux := newMux(t, Config{})
	sub, err := fs.Sub(dist, "dist/assets")
	require.NoError(t, err)
	js, err := fs.Glob(sub, "events-*.js")
	require.NoError(t, err)
	require.Len(t, js, 1)
	plain, err := fs.ReadFile(sub, js[0])
	require.NoError(t, err)

	res := get(t, mux, "/assets/"+js[0])
	require.Equal(t, "text/javascript; charset=utf-8", res.Header.Get("Content-Type"))
	require.Empty(t, res.Header.Get("Content-Encoding"))
	require.Equal(t, string(plain), body(t, res))

	for range 2 { // the second answer comes from the cache
		res = get(t, mux, "/assets/"+js[0], "Accept-Encoding", "br, gzip")
		require.Equal(t, "gzip", res.Header.Get("Content-Encoding"))
		zr, err := gzip.NewReader(strings.NewReader(body(t, res)))
		require.NoError(t, err)
		got, err := io.ReadAll(zr)
		require.NoError(t, err)
		require.True(t, bytes.Equal(plain, got))
	}

	res = get(t, mux, "/assets/"+js[0], "Accept-Encoding", "gzip;q=0")
	require.Empty(t, res.Header.Get("Content-Encoding"))
}

func TestUnknownAssetIs404(t *testing.T) {
	t.Parallel()
	mux := newMux(t, Config{})
	for _, p := range []string{"/assets/nope.js", "/assets/", "/assets/sub/"} {
		require.Equal(t, http.StatusNotFound, get(t, mux, p).StatusCode, p)
	}
}
