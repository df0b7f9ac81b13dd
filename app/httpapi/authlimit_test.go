package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// limitBundle is an AuthLimit on a clock the test moves, and a handler
// behind its Guard that fails authentication when asked to.
type limitBundle struct {
	limit *AuthLimit
	now   time.Time
	h     http.Handler
}

func setupLimit(t *testing.T, failures int, proxies Proxies) *limitBundle {
	t.Helper()
	b := &limitBundle{now: time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)}
	b.limit = &AuthLimit{Proxies: proxies, Failures: failures, Window: time.Minute}
	b.limit.now = func() time.Time { return b.now }
	b.h = b.limit.Guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer bad" {
			b.limit.Failed(r.Context())
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	return b
}

// do sends a request from remote (ip:port) with an optional bad token and
// X-Forwarded-For, and returns the status and Retry-After.
func (b *limitBundle) do(remote string, bad bool, xff string) (int, string) {
	r := httptest.NewRequestWithContext(context.Background(), http.MethodPost, "/graphql", nil)
	r.RemoteAddr = remote
	if bad {
		r.Header.Set("Authorization", "Bearer bad")
	}
	if xff != "" {
		r.Header.Set("X-Forwarded-For", xff)
	}
	w := httptest.NewRecorder()
	b.h.ServeHTTP(w, r)
	return w.Code, w.Header().Get("Retry-After")
}

func TestAuthLimitRefusesUntilTheWindowEnds(t *testing.T) {
	t.Parallel()
	b := setupLimit(t, 3, nil)
	const a, other = "203.0.113.7:5000", "198.51.100.1:5000"
	for range 3 {
		code, _ := b.do(a, true, "")
		require.Equal(t, http.StatusUnauthorized, code)
		b.now = b.now.Add(10 * time.Second)
	}
	// 30 s after the first failure: refused for the 30 s left, good token or not.
	code, retry := b.do(a, false, "")
	require.Equal(t, http.StatusTooManyRequests, code)
	require.Equal(t, "30", retry)
	b.now = b.now.Add(29500 * time.Millisecond)
	code, retry = b.do(a, true, "")
	require.Equal(t, http.StatusTooManyRequests, code)
	require.Equal(t, "1", retry, "rounded up")
	// Another address is not affected.
	code, _ = b.do(other, false, "")
	require.Equal(t, http.StatusOK, code)

	// The window has ended: a new one starts with the next failure.
	b.now = b.now.Add(time.Second)
	code, _ = b.do(a, false, "")
	require.Equal(t, http.StatusOK, code)
	for range 2 {
		code, _ = b.do(a, true, "")
		require.Equal(t, http.StatusUnauthorized, code)
	}
	code, _ = b.do(a, false, "")
	require.Equal(t, http.StatusOK, code, "two failures of three")

	// Requests without a bad token never count.
	for range 10 {
		code, _ = b.do(other, false, "")
		require.Equal(t, http.StatusOK, code)
	}
}

func TestAuthLimitCountsIPv6ByPrefix(t *testing.T) {
	t.Parallel()
	b := setupLimit(t, 2, nil)
	b.do("[2001:db8:1:2::1]:443", true, "")
	b.do("[2001:db8:1:2:ffff::9]:443", true, "")
	code, _ := b.do("[2001:db8:1:2::abcd]:443", false, "")
	require.Equal(t, http.StatusTooManyRequests, code, "one /64, one client")
	code, _ = b.do("[2001:db8:1:3::1]:443", false, "")
	require.Equal(t, http.StatusOK, code, "the next /64 is another")
	// An IPv4-mapped peer is its IPv4 address.
	b.do("[::ffff:192.0.2.1]:443", true, "")
	b.do("192.0.2.1:443", true, "")
	code, _ = b.do("192.0.2.1:80", false, "")
	require.Equal(t, http.StatusTooManyRequests, code)
}

func TestAuthLimitBehindTrustedProxies(t *testing.T) {
	t.Parallel()
	proxies, err := ParseProxies([]string{"10.0.0.0/8", "192.0.2.10"})
	require.NoError(t, err)
	b := setupLimit(t, 2, proxies)
	const proxy = "10.1.1.1:3000"
	// Two clients behind the proxy are told apart by X-Forwarded-For; what
	// a client wrote itself further left is not believed.
	b.do(proxy, true, "198.51.100.7, 192.0.2.10")
	b.do(proxy, true, "1.2.3.4, 198.51.100.7")
	code, _ := b.do(proxy, false, "5.6.7.8, 198.51.100.7")
	require.Equal(t, http.StatusTooManyRequests, code)
	code, _ = b.do(proxy, false, "198.51.100.8")
	require.Equal(t, http.StatusOK, code)
	// An untrusted peer's X-Forwarded-For is ignored: it is the client.
	b.do("203.0.113.9:1", true, "198.51.100.99")
	b.do("203.0.113.9:1", true, "198.51.100.98")
	code, _ = b.do("203.0.113.9:1", false, "198.51.100.97")
	require.Equal(t, http.StatusTooManyRequests, code)
	code, _ = b.do(proxy, false, "198.51.100.99")
	require.Equal(t, http.StatusOK, code)
}

func TestAuthLimitMapIsBounded(t *testing.T) {
	t.Parallel()
	b := setupLimit(t, 1, nil)
	for i := range authLimitAddrs {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		b.do(netip.AddrPortFrom(a, 1).String(), true, "")
	}
	require.Len(t, b.limit.addrs, authLimitAddrs)
	code, _ := b.do("10.255.0.1:1", true, "")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = b.do("10.255.0.1:1", false, "")
	require.Equal(t, http.StatusOK, code, "full: a new client is not tracked")
	require.Len(t, b.limit.addrs, authLimitAddrs)
	// Once the window has passed, the expired entries make room.
	b.now = b.now.Add(time.Minute)
	b.do("10.255.0.1:1", true, "")
	require.Len(t, b.limit.addrs, 1)
	code, _ = b.do("10.255.0.1:1", false, "")
	require.Equal(t, http.StatusTooManyRequests, code)
}

func TestAuthLimitNil(t *testing.T) {
	t.Parallel()
	var l *AuthLimit
	h := http.NotFoundHandler()
	require.NotNil(t, l.Guard(h))
	l.Failed(context.Background()) // no panic
	(&AuthLimit{}).Failed(context.Background())
}
