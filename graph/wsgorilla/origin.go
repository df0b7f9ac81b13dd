package wsgorilla

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// AllowOrigins returns a CheckOrigin for Implementation that allows a
// handshake without an Origin header (a non-browser client: browsers
// always send one), a same-origin one (Origin's host equals the request's
// Host) and one from any of origins, given as "scheme://host[:port]" like
// "https://erp.example.com"; the entry "*" allows every origin. An entry
// that is no such origin is an error. Comparison ignores case and default
// ports.
func AllowOrigins(origins []string) (func(r *http.Request) bool, error) {
	allowed := make(map[string]bool, len(origins))
	all := false
	for _, o := range origins {
		o = strings.TrimSpace(o)
		if o == "" {
			continue
		}
		if o == "*" {
			all = true
			continue
		}
		norm, ok := normalizeOrigin(o)
		if !ok {
			return nil, fmt.Errorf("allowed origin %q: want scheme://host[:port], e.g. https://erp.example.com, or *", o)
		}
		allowed[norm] = true
	}
	return func(r *http.Request) bool {
		if all || sameOriginOrNone(r) {
			return true
		}
		norm, ok := normalizeOrigin(r.Header.Get("Origin"))
		return ok && allowed[norm]
	}, nil
}

// sameOriginOrNone allows a request without Origin, or whose Origin's host
// is the request's Host.
func sameOriginOrNone(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
}

// normalizeOrigin lower-cases an origin and drops a default port; ok is
// false for anything but scheme://host[:port] with scheme http or https.
func normalizeOrigin(s string) (string, bool) {
	u, err := url.Parse(strings.ToLower(s))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", false
	}
	host := u.Host
	if (u.Scheme == "http" && strings.HasSuffix(host, ":80")) || (u.Scheme == "https" && strings.HasSuffix(host, ":443")) {
		host = host[:strings.LastIndexByte(host, ':')]
	}
	return u.Scheme + "://" + host, true
}
