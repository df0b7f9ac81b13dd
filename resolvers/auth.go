package resolvers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/transport"

	"erp/db"
	"erp/graph/model"
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
		if errors.Is(err, errUnauthenticated) {
			r.Logger.WarnContext(req.Context(), "authentication failed", slog.String("remote", req.RemoteAddr), slog.Bool("token_sent", req.Header.Get("Authorization") != ""))
		}
		if err != nil {
			w.Header().Set("Content-Type", "application/json")
			if !errors.Is(err, errUnauthenticated) {
				transport.SendError(w, http.StatusServiceUnavailable, internalError(req.Context(), r.Logger, "authenticate", err))
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="erp"`)
			transport.SendError(w, http.StatusUnauthorized, gqlErrorWithCode(err.Error(), codeUnauthenticated))
			return
		}
		noteUser(req.Context(), u.Login)
		next.ServeHTTP(w, req.WithContext(WithUser(req.Context(), u)))
	})
}

// WebsocketInit authenticates a websocket from its connection_init payload
// {"Authorization": "Bearer <token>"}; a bad token closes the socket with
// 4403 before any connection_ack.
func (r *Resolver) WebsocketInit(ctx context.Context, payload transport.InitPayload) (context.Context, *transport.InitPayload, error) {
	u, err := r.authenticate(ctx, payload.Authorization())
	if err != nil {
		if errors.Is(err, errUnauthenticated) {
			r.Logger.WarnContext(ctx, "websocket authentication failed", slog.Bool("token_sent", payload.Authorization() != ""))
		} else {
			r.Logger.ErrorContext(ctx, "authenticate websocket", "error", err)
		}
		ctx = transport.WithWebsocketCloseCode(ctx, CloseUnauthorized)
		ctx = transport.AppendCloseReason(ctx, "unauthorized")
		return ctx, nil, errUnauthenticated
	}
	noteUser(ctx, u.Login)
	return WithUser(ctx, u), nil, nil
}

var errForbidden = errors.New("your role may not do this")

// Allow implements the @allow(roles) directive, the one place where roles
// are checked: admins pass, the listed roles pass, everyone else gets
// FORBIDDEN before the resolver runs (so nothing is written). Refusals are
// logged for audit, not journaled.
func (r *Resolver) Allow(ctx context.Context, _ any, next graphql.Resolver, roles []model.Role) (any, error) {
	u, ok := UserFrom(ctx)
	if !ok {
		return nil, errUnauthenticated
	}
	if u.Role == db.RoleAdmin || slices.Contains(roles, model.Role(strings.ToUpper(u.Role))) {
		return next(ctx)
	}
	field := ""
	if fc := graphql.GetFieldContext(ctx); fc != nil {
		field = fc.Object + "." + fc.Field.Name
	}
	r.Logger.WarnContext(ctx, "permission refused", slog.String("user", u.Login), slog.String("role", u.Role), slog.String("field", field))
	return nil, fmt.Errorf("%s: %w", field, errForbidden)
}
