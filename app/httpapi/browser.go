package httpapi

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// DenyFraming sets, on every response of next, the headers that keep a
// browser from showing it inside another page's frame (clickjacking):
// Content-Security-Policy "frame-ancestors 'none'" and, for browsers that
// predate it, X-Frame-Options DENY. A handler that sets a
// Content-Security-Policy of its own replaces the first, so its policy says
// frame-ancestors 'none' too (the events page's does); X-Frame-Options
// stays.
func DenyFraming(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "frame-ancestors 'none'")
		h.Set("X-Frame-Options", "DENY")
		next.ServeHTTP(w, r)
	})
}

// Proxies are the reverse proxies in front of the server whose forwarding
// headers are believed (TRUSTED_PROXIES): X-Forwarded-For names the client
// (ClientAddr), X-Forwarded-Proto whether it came over HTTPS (HTTPS). A
// request from any other address is taken as it comes: anyone can write
// those headers.
type Proxies []netip.Prefix

// ParseProxies reads TRUSTED_PROXIES' items: an IP address (one host) or a
// CIDR prefix each. The error names the first item that is neither.
func ParseProxies(items []string) (Proxies, error) {
	var out Proxies
	for _, s := range items {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("want IP addresses or CIDR prefixes like 10.0.0.0/8 or ::1, got %q", s)
		}
		a = a.Unmap().WithZone("")
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

func (p Proxies) trusts(a netip.Addr) bool {
	a = a.Unmap()
	for _, prefix := range p {
		if prefix.Contains(a) {
			return true
		}
	}
	return false
}

// remoteAddr is the address of the connection's peer (the zero Addr when
// RemoteAddr is not ip:port).
func remoteAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap().WithZone("")
}

// ClientAddr is the address r comes from: the connection's peer, or, when
// that is a trusted proxy, the rightmost address in X-Forwarded-For that is
// not a trusted proxy's. What lies further left was written by the client
// itself and is not believed; an entry that is not an address ends the
// walk at the last proxy.
func (p Proxies) ClientAddr(r *http.Request) netip.Addr {
	addr := remoteAddr(r)
	if !p.trusts(addr) {
		return addr
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			return addr
		}
		a = a.Unmap().WithZone("")
		if !p.trusts(a) {
			return a
		}
		addr = a
	}
	return addr
}

// HTTPS reports whether r's client reached the server over HTTPS: TLS on
// this connection, or a trusted proxy's X-Forwarded-Proto (its first value,
// what the outermost proxy saw) saying https.
func (p Proxies) HTTPS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	if !p.trusts(remoteAddr(r)) {
		return false
	}
	proto, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Proto"), ",")
	return strings.EqualFold(strings.TrimSpace(proto), "https")
}

// crossOrigin is net/http's check of a browser request's origin:
// Sec-Fetch-Site, else Origin against Host; safe methods always pass.
var crossOrigin = http.NewCrossOriginProtection()

// sameOrigin reports whether r, if it may change state (not GET, HEAD or
// OPTIONS), comes from the server's own pages: Sec-Fetch-Site same-origin
// (or none: typed by the user), or, from a browser that sends no
// Sec-Fetch-Site, an Origin whose host is the request's Host. Unlike
// net/http's CrossOriginProtection, a request with neither header is
// refused too: every browser sends one of them with such a request, and
// the pages this guards are for browsers only.
func sameOrigin(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	if r.Header.Get("Sec-Fetch-Site") == "" && r.Header.Get("Origin") == "" {
		return false
	}
	return crossOrigin.Check(r) == nil
}
