package httpapi

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"html/template"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"erp/db"
	"erp/resolvers"
)

// SessionCookie names the cookie of an admin's browser session.
const SessionCookie = "erp_session"

// DefaultSessionTTL is how long a browser session lasts without a new
// sign-in.
const DefaultSessionTTL = 12 * time.Hour

// AdminSessions signs admins in to browser pages that cannot send an
// Authorization header (River UI): POST Login with the token in a form body
// sets an HttpOnly, SameSite=Strict cookie (Secure over HTTPS, see
// SecureCookie) holding a random session id; the token never appears in a
// URL or a cookie. Sessions live in this process's memory only: a restart
// or another instance means signing in again. Every request re-checks the
// token behind the session, so a revoked token or a changed role ends it at
// once. A request under Path that may change state (sign-in, sign-out, the
// UI's API) must come from the server's own pages (sameOrigin), else 403.
type AdminSessions struct {
	Auth *Auth
	// Path is where the cookie is sent and the pages live, e.g. "/riverui".
	Path string
	// TTL is a session's lifetime; 0 means DefaultSessionTTL.
	TTL time.Duration
	// SecureCookie marks the cookie Secure on every answer
	// (COOKIE_SECURE); otherwise it is Secure when the request came over
	// HTTPS as Proxies tell (TLS here or a trusted proxy's
	// X-Forwarded-Proto).
	SecureCookie bool
	Proxies      Proxies

	mu       sync.Mutex
	sessions map[string]adminSession
}

type adminSession struct {
	token   string
	expires time.Time
}

var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="ru"><head><meta charset="utf-8"><title>River UI — вход</title></head>
<body style="font-family: sans-serif; max-width: 28rem; margin: 4rem auto">
<h1>River UI</h1>
{{if .}}<p style="color: #b00">{{.}}</p>{{end}}
<form method="post">
<label>Admin token <input type="password" name="token" autocomplete="current-password" autofocus required style="width: 100%"></label>
<p><button type="submit">Sign in</button></p>
</form></body></html>
`))

func (s *AdminSessions) ttl() time.Duration {
	if s.TTL > 0 {
		return s.TTL
	}
	return DefaultSessionTTL
}

// Login serves the sign-in form (GET) and signs in (POST, form field
// "token"): an admin's token gets a session cookie and a redirect to Path;
// anything else the form again with 401.
func (s *AdminSessions) Login() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		switch r.Method {
		case http.MethodGet:
			_ = loginPage.Execute(w, "")
			return
		case http.MethodPost:
		default:
			w.Header().Set("Allow", "GET, POST")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if !sameOrigin(r) {
			refuseCrossOrigin(w)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
		token := r.PostFormValue("token")
		u, err := s.Auth.authenticate(r.Context(), "Bearer "+token)
		if err != nil || u.Role != db.RoleAdmin {
			if err != nil && !errors.Is(err, resolvers.ErrUnauthenticated) {
				s.Auth.Logger.ErrorContext(r.Context(), "browser sign-in", slog.String("error", err.Error()), slog.String("request_id", resolvers.RequestID(r.Context())))
			}
			s.Auth.Logger.WarnContext(r.Context(), "browser sign-in refused", slog.String("remote", r.RemoteAddr))
			w.WriteHeader(http.StatusUnauthorized)
			_ = loginPage.Execute(w, "Wrong token, or not an admin's.")
			return
		}
		id, err := newSessionID()
		if err != nil {
			http.Error(w, "internal error", http.StatusInternalServerError)
			return
		}
		now := time.Now()
		s.mu.Lock()
		if s.sessions == nil {
			s.sessions = map[string]adminSession{}
		}
		for k, v := range s.sessions {
			if now.After(v.expires) {
				delete(s.sessions, k)
			}
		}
		s.sessions[id] = adminSession{token: token, expires: now.Add(s.ttl())}
		s.mu.Unlock()
		noteUser(r.Context(), u.Login)
		http.SetCookie(w, s.cookie(r, id, int(s.ttl()/time.Second)))
		http.Redirect(w, r, s.Path+"/", http.StatusSeeOther)
	})
}

// Logout ends the session (POST) and clears the cookie.
func (s *AdminSessions) Logout() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !sameOrigin(r) {
			refuseCrossOrigin(w)
			return
		}
		if c, err := r.Cookie(SessionCookie); err == nil {
			s.mu.Lock()
			delete(s.sessions, c.Value)
			s.mu.Unlock()
		}
		http.SetCookie(w, s.cookie(r, "", -1))
		http.Redirect(w, r, s.Path+"/login", http.StatusSeeOther)
	})
}

func (s *AdminSessions) cookie(r *http.Request, value string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: SessionCookie, Value: value, Path: s.Path, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: s.SecureCookie || s.Proxies.HTTPS(r),
	}
}

// refuseCrossOrigin answers a state-changing request that did not come
// from the server's own pages.
func refuseCrossOrigin(w http.ResponseWriter) {
	http.Error(w, "cross-origin request refused: only the server's own pages may change state here", http.StatusForbidden)
}

// Require lets a request through to next only with the session cookie of
// a signed-in admin, and, when it may change state, from the server's own
// pages (else 403, before anything else); others are sent to the sign-in
// form (GET) or get 401.
func (s *AdminSessions) Require(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !sameOrigin(r) {
			refuseCrossOrigin(w)
			return
		}
		var token string
		if c, err := r.Cookie(SessionCookie); err == nil {
			s.mu.Lock()
			sess, ok := s.sessions[c.Value]
			if ok && time.Now().After(sess.expires) {
				delete(s.sessions, c.Value)
				ok = false
			}
			s.mu.Unlock()
			if ok {
				token = sess.token
			}
		}
		if token != "" {
			u, err := s.Auth.authenticate(r.Context(), "Bearer "+token)
			if err == nil && u.Role == db.RoleAdmin {
				noteUser(r.Context(), u.Login)
				next.ServeHTTP(w, r.WithContext(resolvers.WithUser(r.Context(), u)))
				return
			}
			if err != nil && !errors.Is(err, resolvers.ErrUnauthenticated) {
				http.Error(w, "service unavailable", http.StatusServiceUnavailable)
				return
			}
		}
		if (r.Method == http.MethodGet || r.Method == http.MethodHead) && !strings.HasPrefix(r.URL.Path, s.Path+"/api/") {
			http.Redirect(w, r, s.Path+"/login", http.StatusSeeOther)
			return
		}
		http.Error(w, "sign in at "+s.Path+"/login", http.StatusUnauthorized)
	})
}

func newSessionID() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}
