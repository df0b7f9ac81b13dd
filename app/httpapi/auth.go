// Package httpapi is what stands between an HTTP client and the
// resolvers: bearer-token authentication for requests and websockets
// (Auth), the limit on failed authentications per client (AuthLimit),
// browser sessions for River UI (AdminSessions), the frame and origin
// rules for browsers (DenyFraming, Proxies), the request log
// and request ids (RequestLog), body limits (LimitBody), and the gqlgen
// extensions that guard and observe every operation (ShapeLimit,
// RolesUpfront, Observer). Package app mounts them on its routes.
package httpapi

import (
	"context"
	"crypto/subtle"
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
	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"erp/db"
	"erp/graph/sse"
	"erp/graph/wsgorilla"
	"erp/resolvers"
)

// Auth authenticates every transport by bearer token: HTTP requests and
// SSE streams (Authenticate), websockets at connection_init
// (WebsocketInit); WatchTokens then watches sockets and streams. Browser
// sessions go through AdminSessions. It caches token owners for a second
// and implements resolvers.Tokens.
type Auth struct {
	Pool   *pgxpool.Pool
	Logger *slog.Logger
	// Limit counts the bad tokens of each client (Failed); nil: none.
	Limit *AuthLimit
	// MaxStreams caps the SSE streams one token holds open at once: one
	// more is refused with 429 (extensions.code TOO_MANY_OPERATIONS).
	// 0: no cap.
	MaxStreams int

	sockets sockets
	tokens  tokenCache
}

var _ resolvers.Tokens = (*Auth)(nil)

// User implements resolvers.Tokens.
func (a *Auth) User(ctx context.Context, token string) (db.User, error) {
	return a.authenticate(ctx, "Bearer "+token)
}

// Forget implements resolvers.Tokens.
func (a *Auth) Forget() { a.tokens.clear() }

// Websocket close codes of connection_init, sent before any
// connection_ack.
const (
	// CloseUnauthorized: a missing or bad token.
	CloseUnauthorized = 4403
	// CloseTryAgainLater (RFC 6455's 1013): the token could not be checked
	// (the database failed); the client reconnects.
	CloseTryAgainLater = 1013
)

func bearer(header string) string {
	const prefix = "bearer "
	if len(header) > len(prefix) && strings.EqualFold(header[:len(prefix)], prefix) {
		return strings.TrimSpace(header[len(prefix):])
	}
	return ""
}

func (a *Auth) authenticate(ctx context.Context, header string) (db.User, error) {
	token := bearer(header)
	if token == "" {
		return db.User{}, resolvers.ErrUnauthenticated
	}
	key := db.TokenKey(token)
	if u, ok := a.tokens.get(key, time.Now()); ok {
		return u, nil
	}
	gen := a.tokens.generation()
	u, expires, err := db.UserByToken(ctx, a.Pool, token)
	if errors.Is(err, db.ErrNotFound) {
		a.Limit.Failed(ctx)
		return db.User{}, resolvers.ErrUnauthenticated
	}
	if err != nil {
		return db.User{}, err
	}
	a.tokens.put(gen, key, u, expires, time.Now())
	return u, nil
}

// Authenticate is the HTTP middleware in front of /graphql: it resolves
// "Authorization: Bearer <token>" to a user, or answers 401 with a GraphQL
// error body (extensions.code UNAUTHENTICATED). Websocket upgrades pass
// through: their token comes in connection_init (WebsocketInit). An SSE
// stream (inside sse.Streams.Handler) lives on its token as a socket
// does (serveStream).
func (a *Auth) Authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.EqualFold(req.Header.Get("Upgrade"), "websocket") {
			next.ServeHTTP(w, req)
			return
		}
		gen := a.tokens.generation()
		u, err := a.authenticate(req.Context(), req.Header.Get("Authorization"))
		if errors.Is(err, resolvers.ErrUnauthenticated) {
			a.Logger.WarnContext(req.Context(), "authentication failed", slog.String("remote", req.RemoteAddr), slog.Bool("token_sent", req.Header.Get("Authorization") != ""))
		}
		if err != nil {
			w.Header().Set("Content-Type", "application/json")
			if !errors.Is(err, resolvers.ErrUnauthenticated) {
				writeErrors(w, http.StatusServiceUnavailable, gqlerror.List{resolvers.InternalError(req.Context(), a.Logger, "authenticate", err)})
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="erp"`)
			e := resolvers.CodedError(err.Error(), resolvers.CodeUnauthenticated)
			if id := resolvers.RequestID(req.Context()); id != "" {
				e.Extensions["requestId"] = id
			}
			writeErrors(w, http.StatusUnauthorized, gqlerror.List{e})
			return
		}
		noteUser(req.Context(), u.Login)
		if sse.In(req.Context()) {
			a.serveStream(w, req, u, gen, next)
			return
		}
		next.ServeHTTP(w, req.WithContext(resolvers.WithUser(req.Context(), u)))
	})
}

// serveStream serves the SSE stream of req, whose token is u's, looked up
// at token cache generation gen, the way WebsocketInit keeps a socket:
// every operation re-checks the token, WatchTokens cuts the stream when
// the token is revoked or expires and re-authorises its subscription when
// its user's role changes. A token already holding MaxStreams streams is
// refused with 429.
func (a *Auth) serveStream(w http.ResponseWriter, req *http.Request, u db.User, gen uint64, next http.Handler) {
	token := bearer(req.Header.Get("Authorization"))
	key := db.TokenKey(token)
	stream := resolvers.WithSocketUser(req.Context(), u, token)
	if !a.sockets.add(key, stream, true, a.MaxStreams) {
		w.Header().Set("Content-Type", "application/json")
		writeErrors(w, http.StatusTooManyRequests, gqlerror.List{resolvers.CodedError(
			fmt.Sprintf("this token holds %d SSE streams open already, the most it may: close one, or run many operations on one websocket", a.MaxStreams),
			CodeTooManyOperations)})
		return
	}
	defer a.sockets.remove(key, stream)
	// As in WebsocketInit: a watch that ran between the lookup and add
	// cleared the cache and may have missed this stream.
	if a.tokens.generation() != gen {
		if _, err := a.authenticate(req.Context(), req.Header.Get("Authorization")); err != nil {
			w.Header().Set("Content-Type", "application/json")
			writeErrors(w, http.StatusUnauthorized, gqlerror.List{resolvers.CodedError(resolvers.ErrUnauthenticated.Error(), resolvers.CodeUnauthenticated)})
			return
		}
	}
	next.ServeHTTP(w, req.WithContext(stream))
}

// CodeTooManyOperations is the extensions.code of an operation refused
// because its websocket runs, or its token streams, the most it may at
// once.
const CodeTooManyOperations = "TOO_MANY_OPERATIONS"

// WebsocketInit authenticates a websocket from its connection_init payload
// {"Authorization": "Bearer <token>"}; a bad token closes the socket with
// 4403 before any connection_ack, a failure to check it (the database)
// with 1013.
func (a *Auth) WebsocketInit(ctx context.Context, payload transport.InitPayload) (context.Context, *transport.InitPayload, error) {
	gen := a.tokens.generation()
	u, err := a.authenticate(ctx, payload.Authorization())
	if err == nil {
		// The socket lives on the token: every operation re-checks it
		// (resolvers' Allow, through User),
		// and revoking or expiring it closes the socket (WatchTokens).
		token := bearer(payload.Authorization())
		socket := resolvers.WithSocketUser(ctx, u, token)
		a.sockets.add(db.TokenKey(token), socket, false, 0)
		// WatchTokens clears the cache before it closes a token's
		// sockets: one that ran between the lookup and add may have
		// missed this socket, and a look past the cleared cache sees
		// what it saw.
		if a.tokens.generation() != gen {
			_, err = a.authenticate(ctx, payload.Authorization())
		}
		if err == nil {
			noteUser(ctx, u.Login)
			return socket, nil, nil
		}
		a.sockets.remove(db.TokenKey(token), socket)
	}
	if errors.Is(err, resolvers.ErrUnauthenticated) {
		a.Logger.WarnContext(ctx, "websocket authentication failed", slog.Bool("token_sent", payload.Authorization() != ""))
		return wsgorilla.WithCloseCode(ctx, CloseUnauthorized, "unauthorized"), nil, err
	}
	a.Logger.ErrorContext(ctx, "authenticate websocket", "error", err)
	return wsgorilla.WithCloseCode(ctx, CloseTryAgainLater, "try again later"), nil, errors.New("internal error")
}

// WebsocketClose is the websocket transport's OnClose: it forgets the
// socket of ctx, WebsocketInit's context, which WatchTokens would
// otherwise close when its token ends.
func (a *Auth) WebsocketClose(ctx context.Context) {
	if token, ok := resolvers.SocketToken(ctx); ok {
		a.sockets.remove(db.TokenKey(token), ctx)
	}
}

// WatchedSockets is the number of websockets and SSE streams WatchTokens
// watches: every open socket that passed WebsocketInit and every stream
// that passed Authenticate, until it closed.
func (a *Auth) WatchedSockets() int {
	a.sockets.mu.Lock()
	defer a.sockets.mu.Unlock()
	n := 0
	for _, set := range a.sockets.m {
		n += len(set)
	}
	return n
}

// sockets maps token keys to the websockets and SSE streams opened with
// them, each by its context (WebsocketInit's, serveStream's), through
// which wsgorilla.CloseSocket or sse.End reaches it, and whether it is a
// stream. A context, not a cancel function: an idle socket then needs no
// context of its own for this.
type sockets struct {
	mu sync.Mutex
	m  map[string]map[context.Context]bool
}

// add adds socket, a stream when stream is set, unless limit > 0 and the
// token holds limit streams already.
func (s *sockets) add(key string, socket context.Context, stream bool, limit int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]map[context.Context]bool{}
	}
	if s.m[key] == nil {
		s.m[key] = map[context.Context]bool{}
	}
	if stream && limit > 0 {
		n := 0
		for _, isStream := range s.m[key] {
			if isStream {
				n++
			}
		}
		if n >= limit {
			return false
		}
	}
	s.m[key][socket] = stream
	return true
}

func (s *sockets) remove(key string, socket context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m[key], socket)
	if len(s.m[key]) == 0 {
		delete(s.m, key)
	}
}

// closeAll closes every socket opened with the token key, with 1000 and
// a reason of its own: "terminated", what a client's connection_terminate
// gets, would not tell the client to get a new token. A stream is cut
// with that reason as an UNAUTHENTICATED error.
func (s *sockets) closeAll(key string) int {
	const reason = "token revoked or expired"
	s.mu.Lock()
	set := s.m[key]
	delete(s.m, key)
	s.mu.Unlock()
	for socket, stream := range set {
		if stream {
			sse.End(socket, resolvers.CodedError(reason, resolvers.CodeUnauthenticated))
		} else {
			wsgorilla.CloseSocket(socket, websocket.CloseNormalClosure, reason)
		}
	}
	return len(set)
}

// socketsOf returns the sockets of the users in roles, each with its
// user's role there.
func (s *sockets) socketsOf(roles map[int64]string) map[context.Context]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[context.Context]string{}
	for _, set := range s.m {
		for socket := range set {
			if u, ok := resolvers.UserFrom(socket); ok {
				if role, changed := roles[u.ID]; changed {
					out[socket] = role
				}
			}
		}
	}
	return out
}

// TokenPoll is how often WatchTokens reads what changed. A revocation or a
// role change made on any instance takes effect on every other one within
// TokenPoll plus the time of the one query that reads it, however late its
// transaction commits; an expiry, within TokenPoll of its instant.
const TokenPoll = 2 * time.Second

// WatchTokens acts on every revocation, role change and expiry, until ctx
// ends: it closes each websocket whose token was revoked or expired (1000,
// "token revoked or expired") and cuts each such SSE stream (sse.End, an
// UNAUTHENTICATED error), ends each open subscription that its user's
// new role may not run (resolvers.Reauthorize) and clears the token cache.
// One query per TokenPoll for the whole process, not one per socket, read
// by commit-ordered position (db.AuthChangesAfter). It starts from the
// first change recorded (auth_changes), so nothing committed before it
// started, while sockets may already have opened, is missed.
func (a *Auth) WatchTokens(ctx context.Context) {
	var pos db.AuthPosition
	ticker := time.NewTicker(TokenPoll)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		changes, err := db.AuthChangesAfter(ctx, a.Pool, pos)
		if err != nil {
			if ctx.Err() == nil {
				a.Logger.WarnContext(ctx, "token watch", slog.String("error", err.Error()))
			}
			continue
		}
		pos = changes.Next
		if len(changes.EndedTokens) == 0 && len(changes.Roles) == 0 {
			continue
		}
		a.tokens.clear()
		for _, k := range changes.EndedTokens {
			if n := a.sockets.closeAll(k); n > 0 {
				a.Logger.InfoContext(ctx, "websockets and streams closed: token revoked or expired", slog.Int("sockets", n))
			}
		}
		for socket, role := range a.sockets.socketsOf(changes.Roles) {
			if n := resolvers.Reauthorize(socket, role); n > 0 {
				u, _ := resolvers.UserFrom(socket)
				a.Logger.InfoContext(ctx, "subscriptions ended: role changed", slog.String("user", u.Login), slog.String("role", role), slog.Int("subscriptions", n))
			}
		}
	}
}

// RolesUpfront is a gqlgen extension that checks @allow, on a field or on
// the type it returns (Subscriber.url, DeliveryAttempt), on every field of
// a mutation or a subscription before the first one runs. Root mutation
// fields run one after another, each in its own transaction; without
// this, a mutation whose second field is refused would already have
// committed its first, behind a reply of errors and data: null; a
// subscription would carry a refusal in every event for as long as it
// runs. A query is left to the Allow directive, which refuses a field at
// its path and keeps the rest of the answer. Schema is the executable
// schema's, where the types' directives are.
type RolesUpfront struct {
	Schema *ast.Schema
}

var _ interface {
	graphql.HandlerExtension
	graphql.OperationContextMutator
} = RolesUpfront{}

// ExtensionName implements graphql.HandlerExtension.
func (RolesUpfront) ExtensionName() string { return "RolesUpfront" }

// Validate implements graphql.HandlerExtension.
func (RolesUpfront) Validate(graphql.ExecutableSchema) error { return nil }

// MutateOperationContext implements graphql.OperationContextMutator.
func (ru RolesUpfront) MutateOperationContext(ctx context.Context, opCtx *graphql.OperationContext) *gqlerror.Error {
	u, ok := resolvers.UserFrom(ctx)
	if !ok || opCtx.Operation == nil || opCtx.Operation.Operation == ast.Query || u.Role == db.RoleAdmin {
		return nil
	}
	memo := map[*ast.FragmentDefinition]*ast.Field{}
	for _, f := range graphql.CollectFields(opCtx, opCtx.Operation.SelectionSet, nil) {
		def := f.Definition
		if def == nil || strings.HasPrefix(def.Name, "__") {
			continue
		}
		name := def.Name
		if ru.allows(def, u.Role) {
			below := ru.refusedBelow(f.Selections, u.Role, opCtx.Variables, memo)
			if below == nil {
				continue
			}
			name = below.ObjectDefinition.Name + "." + below.Name
		}
		e := resolvers.CodedError(fmt.Sprintf("%s: %s", name, resolvers.ErrForbidden), resolvers.CodeForbidden)
		e.Path = ast.Path{ast.PathName(f.Alias)}
		return e
	}
	return nil
}

// allows reports whether role passes the @allow of field def and of the
// type it returns; what carries none is open to whoever may call the root
// field above it.
func (ru RolesUpfront) allows(def *ast.FieldDefinition, role string) bool {
	if d := def.Directives.ForName("allow"); d != nil && !allowedRoles(d).contains(role) {
		return false
	}
	if ru.Schema == nil || def.Type == nil {
		return true
	}
	if t := ru.Schema.Types[def.Type.Name()]; t != nil {
		if d := t.Directives.ForName("allow"); d != nil && !allowedRoles(d).contains(role) {
			return false
		}
	}
	return true
}

// refusedBelow returns the first field of set, at any depth, that role
// may not read (allows), or nil. What @skip or @include leaves out is not
// asked for, so not checked. memo keeps fragments spread many times
// linear; validation has already refused cycles.
func (ru RolesUpfront) refusedBelow(set ast.SelectionSet, role string, vars map[string]any, memo map[*ast.FragmentDefinition]*ast.Field) *ast.Field {
	for _, sel := range set {
		var found *ast.Field
		switch s := sel.(type) {
		case *ast.Field:
			if !included(s.Directives, vars) {
				continue
			}
			if s.Definition != nil && !ru.allows(s.Definition, role) {
				return s
			}
			found = ru.refusedBelow(s.SelectionSet, role, vars, memo)
		case *ast.InlineFragment:
			if included(s.Directives, vars) {
				found = ru.refusedBelow(s.SelectionSet, role, vars, memo)
			}
		case *ast.FragmentSpread:
			if s.Definition == nil || !included(s.Directives, vars) {
				continue
			}
			var ok bool
			if found, ok = memo[s.Definition]; !ok {
				found = ru.refusedBelow(s.Definition.SelectionSet, role, vars, memo)
				memo[s.Definition] = found
			}
		}
		if found != nil {
			return found
		}
	}
	return nil
}

// included reports whether a selection with directives ds is asked for:
// not @skip(if: true), not @include(if: false).
func included(ds ast.DirectiveList, vars map[string]any) bool {
	if d := ds.ForName("skip"); d != nil {
		if skip, _ := d.ArgumentMap(vars)["if"].(bool); skip {
			return false
		}
	}
	if d := ds.ForName("include"); d != nil {
		if include, _ := d.ArgumentMap(vars)["if"].(bool); !include {
			return false
		}
	}
	return true
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

// RequireToken passes to next only the requests that carry
// "Authorization: Bearer <token>"; others get 401 with WWW-Authenticate.
// It guards endpoints that belong to one client rather than to users
// (/metrics with METRICS_TOKEN). An empty token requires nothing.
func RequireToken(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(bearer(r.Header.Get("Authorization"))), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="erp"`)
			http.Error(w, "unauthorized: this endpoint needs its bearer token", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
