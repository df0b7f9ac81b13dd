package httpapi_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"erp/app/apptest"
	"erp/app/config"
	"erp/app/httpapi"
)

// TestFailedAuthenticationsLimitedPerClient: a client (here told apart by
// a trusted proxy's X-Forwarded-For) that sent httpapi.AuthFailures bad
// tokens, over HTTP or a websocket's connection_init, gets 429 with
// Retry-After for the rest of the minute, on every transport and with a
// good token too; other clients go on, and requests without a token never
// count.
func TestFailedAuthenticationsLimitedPerClient(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, func(c *config.Config) { c.TrustedProxies = []string{"127.0.0.0/8", "::1"} })
	post := func(client, token string) (int, http.Header, apptest.Response) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL+"/graphql", strings.NewReader(`{"query":"{ items { id } }"}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Forwarded-For", client)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer func() { _ = res.Body.Close() }()
		var body apptest.Response
		require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
		return res.StatusCode, res.Header, body
	}
	wsInit := func(client, token string) error {
		t.Helper()
		d := websocket.Dialer{Subprotocols: []string{apptest.ProtoTransportWS}, HandshakeTimeout: 5 * time.Second}
		conn, res, err := d.Dial(apptest.WSURL(s), http.Header{"X-Forwarded-For": {client}})
		if res != nil {
			_ = res.Body.Close()
		}
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close() }()
		c := apptest.NewWS(t, conn, apptest.ProtoTransportWS)
		c.Send(apptest.Message{Type: "connection_init", Payload: json.RawMessage(`{"Authorization": "Bearer ` + token + `"}`)})
		_, err = c.Read(5 * time.Second)
		return err
	}

	const a, b, c = "203.0.113.7", "198.51.100.1", "192.0.2.44"
	for i := range httpapi.AuthFailures {
		if i%2 == 1 { // half of them as websockets
			var ce *websocket.CloseError
			require.True(t, errors.As(wsInit(a, "erp_wrong"), &ce))
			require.Equal(t, httpapi.CloseUnauthorized, ce.Code)
			continue
		}
		status, _, _ := post(a, "erp_wrong")
		require.Equal(t, http.StatusUnauthorized, status, "failure %d", i+1)
	}
	status, h, res := post(a, s.Token)
	require.Equal(t, http.StatusTooManyRequests, status, "a good token from a refused client")
	retry, err := strconv.Atoi(h.Get("Retry-After"))
	require.NoError(t, err)
	require.True(t, retry >= 1 && retry <= 60, "Retry-After %d", retry)
	require.Len(t, res.Errors, 1)
	require.Equal(t, httpapi.CodeTooManyRequests, res.Errors[0].Extensions["code"])
	require.NotEmpty(t, res.Errors[0].Extensions["requestId"])
	err = wsInit(a, s.Token)
	require.ErrorIs(t, err, websocket.ErrBadHandshake, "the upgrade is refused")

	form, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL+"/riverui/login", strings.NewReader(url.Values{"token": {s.Token}}.Encode()))
	require.NoError(t, err)
	form.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	form.Header.Set("Sec-Fetch-Site", "same-origin")
	form.Header.Set("X-Forwarded-For", a)
	formRes, err := http.DefaultClient.Do(form)
	require.NoError(t, err)
	_ = formRes.Body.Close()
	require.Equal(t, http.StatusTooManyRequests, formRes.StatusCode, "River UI's sign-in too")

	// Others are not refused; a missing token is no failure.
	status, _, _ = post(b, s.Token)
	require.Equal(t, http.StatusOK, status)
	for range 2 * httpapi.AuthFailures {
		status, _, _ := post(c, "")
		require.Equal(t, http.StatusUnauthorized, status)
	}
	status, _, _ = post(c, s.Token)
	require.Equal(t, http.StatusOK, status)

	// One log line says which client was refused; no token is logged.
	var limited []map[string]any
	for _, line := range s.Logs(t) {
		if strings.HasPrefix(line["msg"].(string), "too many failed authentications") {
			limited = append(limited, line)
		}
	}
	require.Len(t, limited, 1)
	require.Equal(t, a+"/32", limited[0]["client"])
	logs, err := json.Marshal(s.Logs(t))
	require.NoError(t, err)
	require.NotContains(t, string(logs), "erp_wrong")
}
