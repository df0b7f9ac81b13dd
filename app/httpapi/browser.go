package httpapi

import "net/http"

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
