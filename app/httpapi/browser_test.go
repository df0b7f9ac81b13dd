package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestProxiesClientAddrAndHTTPS(t *testing.T) {
	t.Parallel()
	proxies, err := ParseProxies([]string{"10.0.0.0/8", "::1", "::ffff:192.0.2.10"})
	require.NoError(t, err)
	for _, tt := range []struct {
		remote, xff, proto string
		client             string
		https              bool
	}{
		{"203.0.113.1:1", "", "", "203.0.113.1", false},
		{"203.0.113.1:1", "198.51.100.1", "https", "203.0.113.1", false}, // not a proxy
		{"10.0.0.1:1", "", "https", "10.0.0.1", true},
		{"10.0.0.1:1", "198.51.100.1", "http", "198.51.100.1", false},
		{"10.0.0.1:1", "198.51.100.1, 10.2.2.2", "https,http", "198.51.100.1", true},
		{"[::1]:1", "192.0.2.10, 10.0.0.5", "", "192.0.2.10", false}, // every hop a proxy: the farthest
		{"10.0.0.1:1", "garbage, 10.0.0.9", "", "10.0.0.9", false},
		{"10.0.0.1:1", "[2001:db8::1]:443", "", "10.0.0.1", false}, // not an address: stop at the proxy
		{"[::ffff:10.0.0.1]:1", "2001:db8::1", "HTTPS", "2001:db8::1", true},
		{"not-an-address", "198.51.100.1", "https", "invalid IP", false},
	} {
		r := httptest.NewRequestWithContext(context.Background(), http.MethodGet, "/", nil)
		r.RemoteAddr = tt.remote
		if tt.xff != "" {
			r.Header.Set("X-Forwarded-For", tt.xff)
		}
		if tt.proto != "" {
			r.Header.Set("X-Forwarded-Proto", tt.proto)
		}
		require.Equal(t, tt.client, proxies.ClientAddr(r).String(), "%+v", tt)
		require.Equal(t, tt.https, proxies.HTTPS(r), "%+v", tt)
	}

	for _, bad := range []string{"proxy.internal", "10.0.0.0/33", "10.0.0.1-10.0.0.9", ""} {
		_, err := ParseProxies([]string{bad})
		require.ErrorContains(t, err, strconv.Quote(bad))
	}
}
