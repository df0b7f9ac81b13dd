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
		res, err := client.PostForm(s.URL+"/riverui/login", url.Values{"token": {token}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = res.Body.Close() })
		return res
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
	out, err := client.Post(s.URL+"/riverui/logout", "", nil)
	require.NoError(t, err)
	_ = out.Body.Close()
	require.Equal(t, http.StatusUnauthorized, get("/riverui/api/jobs?state=completed").StatusCode) //nolint:bodyclose // get and login close it at cleanup
}
