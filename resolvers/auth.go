package resolvers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

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
	key := db.TokenKey(token)
	if u, ok := r.tokens.get(key, time.Now()); ok {
		return u, nil
	}
	gen := r.tokens.generation()
	u, expires, err := db.UserByToken(ctx, r.Pool, token)
	if errors.Is(err, db.ErrNotFound) {
		return db.User{}, errUnauthenticated
	}
	if err != nil {
		return db.User{}, err
	}
	r.tokens.put(gen, key, u, expires, time.Now())
	return u, nil
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
			e := gqlErrorWithCode(err.Error(), codeUnauthenticated)
			if id := RequestID(req.Context()); id != "" {
				e.Extensions["requestId"] = id
			}
			transport.SendError(w, http.StatusUnauthorized, e)
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
	// The socket lives on the token: every operation re-checks it (Allow),
	// and revoking or expiring it closes the socket (WatchTokens).
	noteUser(ctx, u.Login)
	token := bearer(payload.Authorization())
	ctx = context.WithValue(WithUser(ctx, u), wsTokenKey{}, token)
	ctx, cancel := context.WithCancel(ctx)
	so := r.sockets.add(db.TokenKey(token), cancel)
	context.AfterFunc(ctx, func() { r.sockets.remove(db.TokenKey(token), so) })
	return ctx, nil, nil
}

type wsTokenKey struct{}

// sockets maps token keys to the websockets opened with them (each by
// the cancel of its connection context).
type sockets struct {
	mu sync.Mutex
	m  map[string]map[*socket]struct{}
}

type socket struct{ cancel context.CancelFunc }

func (s *sockets) add(key string, cancel context.CancelFunc) *socket {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]map[*socket]struct{}{}
	}
	if s.m[key] == nil {
		s.m[key] = map[*socket]struct{}{}
	}
	so := &socket{cancel: cancel}
	s.m[key][so] = struct{}{}
	return so
}

func (s *sockets) remove(key string, so *socket) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m[key], so)
	if len(s.m[key]) == 0 {
		delete(s.m, key)
	}
}

// closeAll cancels every socket opened with the token key.
func (s *sockets) closeAll(key string) int {
	s.mu.Lock()
	set := s.m[key]
	delete(s.m, key)
	s.mu.Unlock()
	for so := range set {
		so.cancel()
	}
	return len(set)
}

// tokenPoll is how often WatchTokens looks for revoked or expired tokens.
const tokenPoll = 2 * time.Second

// WatchTokens closes, within about two seconds, every websocket whose
// token was revoked or has expired, until ctx ends: one cheap query per
// poll for the whole process, not one per socket.
func (r *Resolver) WatchTokens(ctx context.Context) {
	since := time.Now()
	ticker := time.NewTicker(tokenPoll)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		keys, now, err := db.TokensEndedSince(ctx, r.Pool, since)
		if err != nil {
			if ctx.Err() == nil {
				r.Logger.WarnContext(ctx, "token watch", slog.String("error", err.Error()))
			}
			continue
		}
		since = now
		for _, k := range keys {
			if n := r.sockets.closeAll(k); n > 0 {
				r.Logger.InfoContext(ctx, "websockets closed: token revoked or expired", slog.Int("sockets", n))
			}
		}
	}
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
	if token, ok := ctx.Value(wsTokenKey{}).(string); ok {
		// A websocket authenticated once, at connection_init: check its
		// token again for every operation (revoked, expired, role changed).
		// Not cancelled by the client's own "complete" racing the start: the
		// operation then ends as cancelled, not as an auth error.
		fresh, err := r.authenticate(context.WithoutCancel(ctx), "Bearer "+token)
		if err != nil {
			return nil, err
		}
		u = fresh
		ctx = WithUser(ctx, u)
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

// RolesUpfront is a gqlgen extension that checks @allow on every root
// field of an operation before the first one runs. Root mutation fields
// run one after another, each in its own transaction; without this, a
// mutation whose second field is refused would already have committed its
// first, behind a reply of errors and data: null. The Allow directive
// still guards each field as it runs.
type RolesUpfront struct{}

var _ interface {
	graphql.HandlerExtension
	graphql.OperationContextMutator
} = RolesUpfront{}

// ExtensionName implements graphql.HandlerExtension.
func (RolesUpfront) ExtensionName() string { return "RolesUpfront" }

// Validate implements graphql.HandlerExtension.
func (RolesUpfront) Validate(graphql.ExecutableSchema) error { return nil }

// MutateOperationContext implements graphql.OperationContextMutator.
func (RolesUpfront) MutateOperationContext(ctx context.Context, opCtx *graphql.OperationContext) *gqlerror.Error {
	u, ok := UserFrom(ctx)
	if !ok || opCtx.Operation == nil || u.Role == db.RoleAdmin {
		return nil
	}
	for _, f := range graphql.CollectFields(opCtx, opCtx.Operation.SelectionSet, nil) {
		def := f.Field.Definition
		if def == nil || strings.HasPrefix(def.Name, "__") {
			continue
		}
		allow := def.Directives.ForName("allow")
		if allow == nil || !allowedRoles(allow).contains(u.Role) {
			e := gqlErrorWithCode(fmt.Sprintf("%s: %s", def.Name, errForbidden), codeForbidden)
			e.Path = ast.Path{ast.PathName(f.Alias)}
			return e
		}
	}
	return nil
}

type roleSet []string

func (s roleSet) contains(role string) bool { return slices.Contains(s, strings.ToUpper(role)) }

// allowedRoles reads the roles argument of an @allow directive.
func allowedRoles(d *ast.Directive) roleSet {
	arg := d.Arguments.ForName("roles")
	if arg == nil || arg.Value == nil {
		return nil
	}
	var out roleSet
	for _, c := range arg.Value.Children {
		out = append(out, c.Value.Raw)
	}
	return out
}
