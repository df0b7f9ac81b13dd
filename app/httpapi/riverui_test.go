package httpapi_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"erp/app/apptest"
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
