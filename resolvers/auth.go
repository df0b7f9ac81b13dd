package resolvers

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/99designs/gqlgen/graphql/handler/transport"

	"erp/db"
)

// CloseUnauthorized is the websocket close code for a missing or bad token
// in connection_init, sent before any connection_ack.
const CloseUnauthorized = 4403

var errUnauthenticated = errors.New("missing or invalid token: send Authorization: Bearer <token>")

type userKey struct{}

// WithUser returns ctx carrying the authenticated user.
func WithUser(ctx context.Context, u db.User) context.Context {
	return context.WithValue(ctx, userKey{}, u)
}

// UserFrom returns the authenticated user of ctx.
func UserFrom(ctx context.Context) (db.User, bool) {
	u, ok := ctx.Value(userKey{}).(db.User)
	return u, ok
}

// actorID is the journal actor of a request: the authenticated user's id.
func actorID(ctx context.Context) *int64 {
	if u, ok := UserFrom(ctx); ok {
		return &u.ID
	}
	return nil
}

func bearer(header string) string {
	const prefix = "bearer "
	if len(header) > len(prefix) && strings.EqualFold(header[:len(prefix)], prefix) {
		return strings.TrimSpace(header[len(prefix):])
	}
	return ""
}

func (r *Resolver) authenticate(ctx context.Context, header string) (db.User, error) {
	token := bearer(header)
	if token == "" {
		return db.User{}, errUnauthenticated
	}
	u, err := db.UserByToken(ctx, r.Pool, token)
	if errors.Is(err, db.ErrNotFound) {
		return db.User{}, errUnauthenticated
	}
	return u, err
}

// Authenticate is the HTTP middleware in front of /graphql: it resolves
// "Authorization: Bearer <token>" to a user, or answers 401 with a GraphQL
// error body (extensions.code UNAUTHENTICATED). Websocket upgrades pass
// through: their token comes in connection_init (WebsocketInit).
func (r *Resolver) Authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.EqualFold(req.Header.Get("Upgrade"), "websocket") {
			next.ServeHTTP(w, req)
			return
		}
		u, err := r.authenticate(req.Context(), req.Header.Get("Authorization"))
		if err != nil {
			status, code, msg := http.StatusUnauthorized, codeUnauthenticated, err.Error()
			if !errors.Is(err, errUnauthenticated) {
				status, code, msg = http.StatusServiceUnavailable, codeInternal, "internal error"
				r.Logger.ErrorContext(req.Context(), "authenticate", "error", err)
			} else {
				w.Header().Set("WWW-Authenticate", `Bearer realm="erp"`)
			}
			w.Header().Set("Content-Type", "application/json")
			transport.SendError(w, status, gqlErrorWithCode(msg, code))
			return
		}
		next.ServeHTTP(w, req.WithContext(WithUser(req.Context(), u)))
	})
}

// WebsocketInit authenticates a websocket from its connection_init payload
// {"Authorization": "Bearer <token>"}; a bad token closes the socket with
// 4403 before any connection_ack.
func (r *Resolver) WebsocketInit(ctx context.Context, payload transport.InitPayload) (context.Context, *transport.InitPayload, error) {
	u, err := r.authenticate(ctx, payload.Authorization())
	if err != nil {
		if !errors.Is(err, errUnauthenticated) {
			r.Logger.ErrorContext(ctx, "authenticate websocket", "error", err)
		}
		ctx = transport.WithWebsocketCloseCode(ctx, CloseUnauthorized)
		ctx = transport.AppendCloseReason(ctx, "unauthorized")
		return ctx, nil, errUnauthenticated
	}
	return WithUser(ctx, u), nil, nil
}
