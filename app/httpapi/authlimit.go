package httpapi

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/vektah/gqlparser/v2/gqlerror"

	"erp/resolvers"
)

// The failed-authentication limit's defaults: AuthFailures bad tokens from
// one client within AuthFailureWindow of its first, and the client gets 429
// until that window ends.
const (
	AuthFailures      = 10
	AuthFailureWindow = time.Minute
	// authLimitAddrs bounds the clients tracked at once (about 100 bytes
	// each); while it is full, a new client's failures are not counted.
	authLimitAddrs = 10000
)

// CodeTooManyRequests is the extensions.code of a 429 from AuthLimit.
const CodeTooManyRequests = "TOO_MANY_REQUESTS"

// AuthLimit limits failed authentications per client address (Proxies'
// ClientAddr; an IPv6 client by its /64, which one host usually has whole):
// after Failures bad tokens within Window of the first, every request of
// that client through Guard is answered 429, with Retry-After, until the
// window ends. A failure is a token sent that is not valid (unknown,
// revoked, expired), on any transport (Auth.authenticate calls Failed);
// a request without a token is not one. The counts live in this process's
// memory, bounded (authLimitAddrs). A nil *AuthLimit limits nothing.
type AuthLimit struct {
	Proxies Proxies
	// Failures and Window; zero: AuthFailures and AuthFailureWindow.
	Failures int
	Window   time.Duration
	// Logger notes each client that reaches the limit; nil: none.
	Logger *slog.Logger

	now   func() time.Time // time.Now; a test's clock
	mu    sync.Mutex
	addrs map[netip.Prefix]*authFailures
}

// authFailures counts one client's failures since its window began.
type authFailures struct {
	since time.Time
	n     int
}

// clientKey is the context key of the client Guard identified.
type clientKey struct{}

func (l *AuthLimit) limits() (int, time.Duration, time.Time) {
	failures, window, now := l.Failures, l.Window, time.Now()
	if failures <= 0 {
		failures = AuthFailures
	}
	if window <= 0 {
		window = AuthFailureWindow
	}
	if l.now != nil {
		now = l.now()
	}
	return failures, window, now
}

// clientOf is the key a client's failures are counted under.
func clientOf(a netip.Addr) netip.Prefix {
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p
	}
	return netip.PrefixFrom(a, a.BitLen()) // also the zero Addr: one key for every unknown peer
}

// Guard answers a client that reached the limit with 429 (a GraphQL error
// body, code TOO_MANY_REQUESTS, and Retry-After in seconds) and passes
// other requests on with the client in their context, where Failed finds
// it (a websocket's operations keep its request's context).
func (l *AuthLimit) Guard(next http.Handler) http.Handler {
	if l == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client := clientOf(l.Proxies.ClientAddr(r))
		if wait := l.blocked(client); wait > 0 {
			secs := int((wait + time.Second - 1) / time.Second)
			w.Header().Set("Retry-After", strconv.Itoa(secs))
			w.Header().Set("Content-Type", "application/json")
			e := resolvers.CodedError(fmt.Sprintf("too many failed authentications from this address: retry in %d s", secs), CodeTooManyRequests)
			if id := resolvers.RequestID(r.Context()); id != "" {
				e.Extensions["requestId"] = id
			}
			writeErrors(w, http.StatusTooManyRequests, gqlerror.List{e})
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), clientKey{}, client)))
	})
}

// blocked returns how long client is still refused (0: it is not).
func (l *AuthLimit) blocked(client netip.Prefix) time.Duration {
	failures, window, now := l.limits()
	l.mu.Lock()
	defer l.mu.Unlock()
	f, ok := l.addrs[client]
	if !ok || f.n < failures {
		return 0
	}
	return max(f.since.Add(window).Sub(now), 0)
}

// Failed counts a failed authentication against the client of ctx (Guard's);
// a context that did not come through Guard counts against no one.
func (l *AuthLimit) Failed(ctx context.Context) {
	if l == nil {
		return
	}
	client, ok := ctx.Value(clientKey{}).(netip.Prefix)
	if !ok {
		return
	}
	failures, window, now := l.limits()
	l.mu.Lock()
	f, ok := l.addrs[client]
	if ok && now.Sub(f.since) >= window {
		f.since, f.n = now, 0
	}
	if !ok {
		if l.addrs == nil {
			l.addrs = map[netip.Prefix]*authFailures{}
		}
		if len(l.addrs) >= authLimitAddrs {
			for k, v := range l.addrs {
				if now.Sub(v.since) >= window {
					delete(l.addrs, k)
				}
			}
		}
		if len(l.addrs) >= authLimitAddrs {
			l.mu.Unlock()
			return
		}
		f = &authFailures{since: now}
		l.addrs[client] = f
	}
	f.n++
	reached := f.n == failures
	l.mu.Unlock()
	if reached && l.Logger != nil {
		l.Logger.WarnContext(ctx, "too many failed authentications: client refused until its window ends",
			slog.String("client", client.String()), slog.Int("failures", failures), slog.Duration("window", window))
	}
}
