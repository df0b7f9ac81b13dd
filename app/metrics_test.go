package app_test

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"erp/app"
	"erp/app/apptest"
	"erp/app/config"
	"erp/db"
	"erp/db/pgtest"
)

// scrapeWith GETs url with "Authorization: Bearer token" (none when token
// is empty) and returns the status and body.
func scrapeWith(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = res.Body.Close() }()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(body)
}

const metricsToken = "metrics-token-of-at-least-32-characters"

// With METRICS_TOKEN, /metrics answers only the scrape that carries it.
func TestMetricsNeedTheirToken(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, func(c *config.Config) { c.MetricsToken = metricsToken })

	for _, token := range []string{"", "wrong-token-of-at-least-32-characters", s.Token} {
		status, body := scrapeWith(t, s.URL+"/metrics", token)
		require.Equal(t, http.StatusUnauthorized, status, "token %q", token)
		require.NotContains(t, body, "erp_")
	}
	status, body := scrapeWith(t, s.URL+"/metrics", metricsToken)
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `erp_river_jobs{state="available"}`)
	require.Equal(t, http.StatusOK, s.Get(t, "/healthz"), "the other routes as before")
}

// With METRICS_ADDR, /metrics is served on that listener only, and that
// listener serves nothing else.
func TestMetricsOnTheirOwnListener(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, func(c *config.Config) {
		c.MetricsAddr = "127.0.0.1:0"
		c.MetricsToken = metricsToken
	})
	own := "http://" + s.App.MetricsAddr()
	require.NotEqual(t, "http://", own)

	status, _ := scrapeWith(t, s.URL+"/metrics", metricsToken)
	require.Equal(t, http.StatusNotFound, status, "not on the API's port")
	status, _ = scrapeWith(t, own+"/metrics", "")
	require.Equal(t, http.StatusUnauthorized, status, "the token holds there too")
	status, body := scrapeWith(t, own+"/metrics", metricsToken)
	require.Equal(t, http.StatusOK, status, body)
	require.True(t, strings.Contains(body, `erp_subscriber_pending{subscriber="order_acceptance"} 0`), body)
	for _, path := range []string{"/graphql", "/healthz", "/events"} {
		status, _ = scrapeWith(t, own+path, s.Token)
		require.Equal(t, http.StatusNotFound, status, path)
	}
}

// A METRICS_ADDR in use fails the start, naming the setting, before
// anything else runs.
func TestMetricsAddrInUseFailsTheStart(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = taken.Close() })
	cfg := config.Default()
	cfg.MetricsAddr = taken.Addr().String()
	d, err := db.OpenLike(t.Context(), pgtest.NewPool(t), app.PoolSizes(cfg))
	require.NoError(t, err)
	t.Cleanup(d.Close)
	a, err := app.New(d, cfg, apptest.Logger(t))
	require.NoError(t, err)
	err = a.Start(t.Context())
	require.ErrorContains(t, err, "listen on METRICS_ADDR "+cfg.MetricsAddr)
	require.Empty(t, a.MetricsAddr())
}
