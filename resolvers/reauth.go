package resolvers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"erp/db"
	"erp/graph/model"
)

// A role checked once, when a subscription starts, would let it run on
// after its user lost the right to it: every open subscription of a
// websocket or an SSE stream keeps a hook that says whether a role may still run it, and
// Reauthorize, called when the user's role changed (httpapi.Auth's token
// watch), ends those the new role may not run.

// reauthorizable is an open subscription that a role change may end.
type reauthorizable interface {
	// refuse ends the subscription with err, as its operation's error
	// message; a socket and its other operations stay open, a stream is
	// cut (its one operation is this).
	refuse(err *gqlerror.Error)
}

// socketSubscriptions holds the re-authorisation hook of every open
// subscription of one websocket: a slice, not a map, since a socket
// holds a few and each costs its bytes for as long as it is open.
type socketSubscriptions struct {
	mu   sync.Mutex
	subs []guarded
}

type guarded struct {
	sub     reauthorizable
	allowed func(role string) error
}

// guardSubscription registers sub, whose hook allowed says whether a role
// may run it, with the websocket or SSE stream of ctx (WithSocketUser's),
// until forgetSubscription. Elsewhere it does nothing: only a socket or a
// stream outlives a role change.
func guardSubscription(ctx context.Context, sub reauthorizable, allowed func(role string) error) {
	if p, ok := ctx.Value(principalKey{}).(*principal); ok && p.subs != nil {
		p.subs.mu.Lock()
		p.subs.subs = append(p.subs.subs, guarded{sub, allowed})
		p.subs.mu.Unlock()
	}
}

// forgetSubscription undoes guardSubscription once sub ended.
func forgetSubscription(ctx context.Context, sub reauthorizable) {
	if p, ok := ctx.Value(principalKey{}).(*principal); ok && p.subs != nil {
		p.subs.mu.Lock()
		p.subs.subs = slices.DeleteFunc(p.subs.subs, func(g guarded) bool { return g.sub == sub })
		p.subs.mu.Unlock()
	}
}

// Reauthorize checks every open subscription of the websocket or SSE
// stream whose context is socket (WithSocketUser's) against role, its
// user's role now (db.Role*), and ends each one role may no longer run
// with an error message for that operation (extensions.code FORBIDDEN); a
// socket and its other operations stay open, a stream is cut after that
// error (sse.End). It returns how many it ended.
func Reauthorize(socket context.Context, role string) int {
	p, ok := socket.Value(principalKey{}).(*principal)
	if !ok || p.subs == nil {
		return 0
	}
	type refusal struct {
		sub reauthorizable
		err error
	}
	var refused []refusal
	p.subs.mu.Lock()
	p.subs.subs = slices.DeleteFunc(p.subs.subs, func(g guarded) bool {
		err := g.allowed(role)
		if err != nil {
			refused = append(refused, refusal{g.sub, err})
		}
		return err != nil
	})
	p.subs.mu.Unlock()
	for _, r := range refused {
		r.sub.refuse(CodedError(r.err.Error(), CodeForbidden))
	}
	return len(refused)
}

// authorizeNow asks allowed about the role of ctx's user now: a
// websocket's or stream's is read again by its token, not taken from the start of the
// operation, which may predate the last role change seen.
func (r *Resolver) authorizeNow(ctx context.Context, allowed func(role string) error) error {
	u, ok := UserFrom(ctx)
	if !ok {
		return ErrUnauthenticated
	}
	if token, ok := SocketToken(ctx); ok {
		fresh, err := r.Tokens.User(context.WithoutCancel(ctx), token)
		if err != nil {
			return err
		}
		u = fresh
	}
	return allowed(u.Role)
}

// eventProcessedAllowed is the re-authorisation hook of an eventProcessed
// subscription with filter f, as authorizeEventFilter gave it to the role
// it started with; asked when it starts and again whenever its user's
// role changes: may role run it? roles are the root field's @allow (ADMIN
// always may); authorizeEventFilter says what the filter may reach, and a
// stream that may carry events the role may not read (an admin's, now a
// viewer's) ends: its filter was fixed when it started. Its error wraps
// ErrForbidden.
func eventProcessedAllowed(roles []model.Role, f db.EventFilter) func(role string) error {
	return func(role string) error {
		if role != db.RoleAdmin && !slices.Contains(roles, model.Role(strings.ToUpper(role))) {
			return fmt.Errorf("Subscription.eventProcessed: %w", ErrForbidden)
		}
		g, err := authorizeEventFilter(role, f)
		if err != nil {
			return fmt.Errorf("Subscription.eventProcessed: %w", err)
		}
		for _, e := range g.HiddenEntities {
			if !slices.Contains(f.HiddenEntities, e) && (f.Entity == nil || *f.Entity == e) && mayCarry(f.Types, e) {
				return fmt.Errorf("Subscription.eventProcessed: events of %s: %w", e, ErrForbidden)
			}
		}
		return nil
	}
}

// mayCarry reports whether a stream filtered to types (none: every type)
// can carry events of entity: a stream of other types' events never can.
func mayCarry(types []string, entity string) bool {
	if len(types) == 0 || entity != db.EntityUsers {
		return true
	}
	for _, t := range types {
		if slices.Contains(db.UserEventTypes, t) {
			return true
		}
	}
	return false
}

// allowedRoles returns the roles of the @allow directive on the field
// being resolved in ctx; none when it has no such directive.
func allowedRoles(ctx context.Context) []model.Role {
	fc := graphql.GetFieldContext(ctx)
	if fc == nil || fc.Field.Definition == nil {
		return nil
	}
	d := fc.Field.Definition.Directives.ForName("allow")
	if d == nil {
		return nil
	}
	arg := d.Arguments.ForName("roles")
	if arg == nil || arg.Value == nil {
		return nil
	}
	roles := make([]model.Role, 0, len(arg.Value.Children))
	for _, c := range arg.Value.Children {
		roles = append(roles, model.Role(c.Value.Raw))
	}
	return roles
}
