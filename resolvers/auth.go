package resolvers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/99designs/gqlgen/graphql"

	"erp/db"
	"erp/graph/model"
)

// ErrUnauthenticated is a missing, unknown, revoked or expired token
// (extensions.code UNAUTHENTICATED).
var ErrUnauthenticated = errors.New("missing or invalid token: send Authorization: Bearer <token>")

// ErrForbidden is a role that may not run a field (extensions.code
// FORBIDDEN).
var ErrForbidden = errors.New("your role may not do this")

// Tokens resolves bearer tokens to their owners; package httpapi's Auth
// implements it over a short cache.
type Tokens interface {
	// User returns the owner of token, ErrUnauthenticated when the token
	// is unknown, revoked or expired, or the database's error.
	User(ctx context.Context, token string) (db.User, error)
	// Forget drops every cached owner, after a token was revoked or a
	// role changed.
	Forget()
}

type (
	principalKey struct{}
	requestIDKey struct{}
)

// principal is who a context acts for: the user, and for a websocket or
// an SSE stream the token it authenticated with. One value for both: a
// websocket's context lives as long as the socket.
type principal struct {
	user        db.User
	socketToken string // "" outside a websocket or stream
	// subs: the socket's open subscriptions (guardSubscription), shared
	// by every principal of the socket; nil outside a websocket or stream.
	subs *socketSubscriptions
}

// WithUser returns ctx carrying the authenticated user.
func WithUser(ctx context.Context, u db.User) context.Context {
	return context.WithValue(ctx, principalKey{}, &principal{user: u})
}

// WithSocketUser returns ctx carrying the user a websocket authenticated
// as at connection_init, or an SSE stream with its request, and the token
// it used, which Allow checks again for every operation.
func WithSocketUser(ctx context.Context, u db.User, token string) context.Context {
	return context.WithValue(ctx, principalKey{}, &principal{user: u, socketToken: token, subs: &socketSubscriptions{}})
}

// UserFrom returns the authenticated user of ctx.
func UserFrom(ctx context.Context) (db.User, bool) {
	p, ok := ctx.Value(principalKey{}).(*principal)
	if !ok {
		return db.User{}, false
	}
	return p.user, true
}

// SocketToken returns the token of ctx's websocket or SSE stream
// (WithSocketUser); ok is false outside one.
func SocketToken(ctx context.Context) (token string, ok bool) {
	p, ok := ctx.Value(principalKey{}).(*principal)
	if !ok || p.socketToken == "" {
		return "", false
	}
	return p.socketToken, true
}

// WithRequestID returns ctx carrying the id of its HTTP request.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID returns the id of ctx's request ("" outside a request): it is
// in the X-Request-Id response header, the request's log line, GraphQL
// responses' extensions.requestId and the log of an internal error.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// actorID is the journal actor of a request: the authenticated user's id.
func actorID(ctx context.Context) *int64 {
	if u, ok := UserFrom(ctx); ok {
		return &u.ID
	}
	return nil
}

// mayReceive refuses, as FORBIDDEN naming the source, an order of source
// (sales_orders.source) from a caller that is not bound to it
// (db.User.Receives), before anything is looked up: so a duplicate's
// answer and a CONFLICT's text only ever speak of the caller's sources.
func mayReceive(ctx context.Context, source string) error {
	u, ok := UserFrom(ctx)
	switch {
	case !ok:
		return ErrUnauthenticated
	case u.Receives(source):
		return nil
	case len(u.Sources) == 0:
		return fmt.Errorf("source %s: integration account %s is bound to no source and receives nothing (an admin binds it with setUserSources): %w",
			strings.ToUpper(source), u.Login, ErrForbidden)
	}
	return fmt.Errorf("source %s: integration account %s receives orders of %s only: %w",
		strings.ToUpper(source), u.Login, strings.ToUpper(strings.Join(u.Sources, ", ")), ErrForbidden)
}

// Allow implements the @allow(roles) directive, the one place where roles
// are checked against fields and types: admins pass, the listed roles
// pass, everyone else gets FORBIDDEN before the resolver runs (so nothing
// is written). On a type it runs at every field that returns the type.
// Refusals are logged for audit, not journaled; one log line for a field
// refused in every row of a list.
func (r *Resolver) Allow(ctx context.Context, _ any, next graphql.Resolver, roles []model.Role) (any, error) {
	u, ok := UserFrom(ctx)
	if !ok {
		return nil, ErrUnauthenticated
	}
	if token, ok := SocketToken(ctx); ok {
		// A websocket authenticated once, at connection_init: check its
		// token again for every operation (revoked, expired, role changed).
		// Not cancelled by the client's own "complete" racing the start: the
		// operation then ends as cancelled, not as an auth error.
		fresh, err := r.Tokens.User(context.WithoutCancel(ctx), token)
		if err != nil {
			return nil, err
		}
		if !fresh.Same(u) {
			// A role, name or binding changed since connection_init. Unchanged,
			// the socket's value serves: a subscription keeps this
			// context for its life.
			u = fresh
			p := *ctx.Value(principalKey{}).(*principal)
			p.user = u
			ctx = context.WithValue(ctx, principalKey{}, &p)
		}
	}
	if u.Role == db.RoleAdmin || slices.Contains(roles, model.Role(strings.ToUpper(u.Role))) {
		return next(ctx)
	}
	field := ""
	fc := graphql.GetFieldContext(ctx)
	if fc != nil {
		field = fc.Object + "." + fc.Field.Name
	}
	if firstOfLists(fc) {
		r.Logger.WarnContext(ctx, "permission refused", slog.String("user", u.Login), slog.String("role", u.Role), slog.String("field", field))
	}
	return nil, fmt.Errorf("%s: %w", field, ErrForbidden)
}

// firstOfLists reports whether fc is in the first element of every list
// above it: a field refused in each row of a page is logged once.
func firstOfLists(fc *graphql.FieldContext) bool {
	for ; fc != nil; fc = fc.Parent {
		if fc.Index != nil && *fc.Index > 0 {
			return false
		}
	}
	return true
}

// adminOnlyEntities are the journal's tables (events.entity) whose events
// only admins read: users and their tokens (user.*, token.*).
var adminOnlyEntities = []string{db.EntityUsers}

// authorizeEventFilter is the rule of which journal events role (a
// db.Role* value) reads, for events, event, eventProcessed and the
// delivery lists: it returns f as role may read with it. An admin reads
// every event (f unchanged); any other role reads f without the events of
// adminOnlyEntities (HiddenEntities), and f naming one of those tables
// (f.Entity, normalized) is ErrForbidden. A subscription re-authorized
// for a new role must take the returned filter, or end on the error.
func authorizeEventFilter(role string, f db.EventFilter) (db.EventFilter, error) {
	if role == db.RoleAdmin {
		return f, nil
	}
	if f.Entity != nil && slices.Contains(adminOnlyEntities, *f.Entity) {
		return f, fmt.Errorf("filter.entity %s: events of users and tokens are for admins: %w", *f.Entity, ErrForbidden)
	}
	f.HiddenEntities = adminOnlyEntities
	return f, nil
}

// eventFilterOf is authorizeEventFilter for the user of ctx.
func eventFilterOf(ctx context.Context, f db.EventFilter) (db.EventFilter, error) {
	u, ok := UserFrom(ctx)
	if !ok {
		return f, ErrUnauthenticated
	}
	return authorizeEventFilter(u.Role, f)
}

// readableEvent is nil when the user of ctx may read ev
// (authorizeEventFilter), else ErrForbidden: for one event asked for by
// id, where a refusal leaks nothing a list would not.
func readableEvent(ctx context.Context, ev db.Event) error {
	f, err := eventFilterOf(ctx, db.EventFilter{})
	if err != nil {
		return err
	}
	if !f.Matches(ev) {
		return fmt.Errorf("event %d: events of %s are for admins: %w", ev.ID, ev.Entity, ErrForbidden)
	}
	return nil
}
