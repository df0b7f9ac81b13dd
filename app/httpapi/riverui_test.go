package httpapi_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"erp/app/apptest"
	"erp/app/config"
)

func TestRiverUIForSignedInAdminsOnly(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	viewer := apptest.RoleToken(t, s, "watcher", "VIEWER")
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	client := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string) *http.Response {
		t.Helper()
		res, err := client.Get(s.URL + path)
		require.NoError(t, err)
		t.Cleanup(func() { _ = res.Body.Close() })
		return res
	}
	login := func(token string) *http.Response {
		t.Helper()
		return signIn(t, client, s.URL, token)
	}

	// Signed out: the page sends to the form, the API refuses; a bearer
	// header is not a way in either (the UI is for browsers).
	res := get("/riverui/") //nolint:bodyclose // get and login close it at cleanup
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, "/riverui/login", res.Header.Get("Location"))
	require.Equal(t, http.StatusUnauthorized, get("/riverui/api/jobs?state=completed").StatusCode) //nolint:bodyclose // get and login close it at cleanup
	require.Equal(t, http.StatusOK, get("/riverui/login").StatusCode)                              //nolint:bodyclose // get and login close it at cleanup

	// Wrong token and a non-admin's token get no cookie.
	for _, token := range []string{"wrong", viewer} {
		res := login(token) //nolint:bodyclose // get and login close it at cleanup
		require.Equal(t, http.StatusUnauthorized, res.StatusCode)
		require.Empty(t, res.Cookies())
	}

	// The admin signs in: a session cookie, HttpOnly and SameSite=Strict,
	// holding neither the token nor anything in the URL.
	res = login(s.Token) //nolint:bodyclose // get and login close it at cleanup
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, "/riverui/", res.Header.Get("Location"))
	require.Len(t, res.Cookies(), 1)
	c := res.Cookies()[0]
	require.True(t, c.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, c.SameSite)
	require.Equal(t, "/riverui", c.Path)
	require.NotContains(t, c.Value, s.Token)

	res = get("/riverui/") //nolint:bodyclose // get and login close it at cleanup
	require.Equal(t, http.StatusOK, res.StatusCode)
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Contains(t, strings.ToLower(string(body)), "<html")
	res = get("/riverui/api/jobs?state=completed") //nolint:bodyclose // get and login close it at cleanup
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, res.Header.Get("Content-Type"), "json")

	// Signing out ends the session.
	out := sameOriginPost(t, client, s.URL+"/riverui/logout", "", "")
	_ = out.Body.Close()
	require.Equal(t, http.StatusUnauthorized, get("/riverui/api/jobs?state=completed").StatusCode) //nolint:bodyclose // get and login close it at cleanup
}

// signIn posts token to River UI's sign-in form as the form itself does
// (same origin); the body is closed at cleanup.
func signIn(t *testing.T, client *http.Client, base, token string) *http.Response {
	t.Helper()
	res := sameOriginPost(t, client, base+"/riverui/login", "application/x-www-form-urlencoded", url.Values{"token": {token}}.Encode())
	t.Cleanup(func() { _ = res.Body.Close() })
	return res
}

// sameOriginPost is a POST as a browser sends it from the server's own
// page.
func sameOriginPost(t *testing.T, client *http.Client, target, contentType, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, target, strings.NewReader(body))
	require.NoError(t, err)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	res, err := client.Do(req)
	require.NoError(t, err)
	return res
}

// TestRiverUIRefusesCrossOriginRequests: River UI's own pages post
// text/plain (cancel, retry, delete) or nothing (pause, resume) to its
// API, which reads JSON whatever the Content-Type: the same request from
// another origin, which a page there could send without asking (a
// "simple" request), is refused before it reaches River and changes
// nothing. So are sign-in and sign-out from another origin.
func TestRiverUIRefusesCrossOriginRequests(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	client := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	require.Equal(t, http.StatusSeeOther, signIn(t, client, s.URL, s.Token).StatusCode) //nolint:bodyclose // signIn closes it at cleanup

	var jobID int64
	require.NoError(t, s.Pool.QueryRow(t.Context(), `INSERT INTO river_job (kind, args, queue, state, scheduled_at, max_attempts, priority)
		VALUES ('e2e_never', '{}', 'default', 'scheduled', now() + interval '1 day', 1, 1) RETURNING id`).Scan(&jobID))
	state := func() string {
		t.Helper()
		var st string
		require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT state FROM river_job WHERE id = $1`, jobID).Scan(&st))
		return st
	}
	body := fmt.Sprintf(`{"ids":["%d"]}`, jobID)
	post := func(headers map[string]string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL+"/riverui/api/jobs/cancel", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "text/plain;charset=UTF-8") // what fetch sends for a string body
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		res, err := client.Do(req)
		require.NoError(t, err)
		_ = res.Body.Close()
		return res.StatusCode
	}

	host := strings.TrimPrefix(s.URL, "http://")
	for _, headers := range []map[string]string{
		{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
		{"Sec-Fetch-Site": "same-site", "Origin": "http://other." + host},
		{"Sec-Fetch-Site": "cross-site", "Origin": s.URL}, // Sec-Fetch-Site decides
		{"Origin": "https://evil.example"},                // a browser without Sec-Fetch-Site
		{"Origin": "null"},
		{}, // neither: no browser's
	} {
		require.Equal(t, http.StatusForbidden, post(headers), "%v", headers)
		require.Equal(t, "scheduled", state(), "refused: %v", headers)
	}

	// Sign-in and sign-out from another origin are refused as well.
	for _, path := range []string{"/riverui/login", "/riverui/logout"} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL+path, strings.NewReader(url.Values{"token": {s.Token}}.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		res, err := client.Do(req)
		require.NoError(t, err)
		_ = res.Body.Close()
		require.Equal(t, http.StatusForbidden, res.StatusCode, path)
		require.Empty(t, res.Cookies(), path)
	}

	// The UI's own request goes through; so does one from a browser
	// without Sec-Fetch-Site whose Origin is this server.
	require.Equal(t, http.StatusOK, post(map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": s.URL}))
	require.Equal(t, "cancelled", state())
	require.Equal(t, http.StatusOK, post(map[string]string{"Origin": s.URL}))
}

// TestPagesRefuseFraming: every page (and every other answer) tells the
// browser not to show it inside another page's frame.
func TestPagesRefuseFraming(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	client := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, path := range []string{"/events", "/playground", "/riverui/login", "/riverui/", "/graphql", "/healthz", "/"} {
		res, err := client.Get(s.URL + path)
		require.NoError(t, err)
		_ = res.Body.Close()
		require.Equal(t, "DENY", res.Header.Get("X-Frame-Options"), path)
		require.Contains(t, res.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'", path)
	}
	require.Equal(t, http.StatusSeeOther, signIn(t, client, s.URL, s.Token).StatusCode) //nolint:bodyclose // signIn closes it at cleanup
	res, err := client.Get(s.URL + "/riverui/")
	require.NoError(t, err)
	_ = res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, res.Header.Get("Content-Type"), "text/html")
	require.Equal(t, "DENY", res.Header.Get("X-Frame-Options"))
	require.Equal(t, "frame-ancestors 'none'", res.Header.Get("Content-Security-Policy"))
	// The events page keeps its own policy, which says the same.
	res, err = client.Get(s.URL + "/events")
	require.NoError(t, err)
	_ = res.Body.Close()
	require.Contains(t, res.Header.Get("Content-Security-Policy"), "connect-src 'self'")
}

// TestRiverUICookieSecure: the session cookie is Secure when COOKIE_SECURE
// says so, or when a trusted proxy says the browser came over https; an
// X-Forwarded-Proto from anyone else changes nothing.
func TestRiverUICookieSecure(t *testing.T) {
	t.Parallel()
	signInWith := func(s *apptest.Server, headers map[string]string) *http.Cookie {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL+"/riverui/login", strings.NewReader(url.Values{"token": {s.Token}}.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		require.NoError(t, err)
		_ = res.Body.Close()
		require.Equal(t, http.StatusSeeOther, res.StatusCode)
		require.Len(t, res.Cookies(), 1)
		return res.Cookies()[0]
	}
	https := map[string]string{"X-Forwarded-Proto": "https"}

	plain := apptest.New(t)
	require.False(t, signInWith(plain, nil).Secure)
	require.False(t, signInWith(plain, https).Secure, "no proxy is trusted")

	proxied := apptest.New(t, func(c *config.Config) { c.TrustedProxies = []string{"127.0.0.0/8"} })
	require.False(t, signInWith(proxied, nil).Secure)
	require.True(t, signInWith(proxied, https).Secure)
	require.True(t, signInWith(proxied, map[string]string{"X-Forwarded-Proto": "HTTPS, http"}).Secure, "the outermost proxy's")

	always := apptest.New(t, func(c *config.Config) { c.CookieSecure = true })
	c := signInWith(always, nil)
	require.True(t, c.Secure)
	require.True(t, c.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, c.SameSite)
}
