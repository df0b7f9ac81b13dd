package db

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// AdminLogin and AdminDisplayName name the user bootstrapped at start.
const (
	AdminLogin       = "admin"
	AdminDisplayName = "Администратор"
	tokenPrefix      = "erp_"
	// bootstrapTokenName names the admin token EnsureAdmin stores.
	bootstrapTokenName = "bootstrap"
)

// Roles, as stored in users.role. RoleAdmin may do everything.
const (
	RoleAdmin       = "admin"
	RoleSales       = "sales"
	RoleWarehouse   = "warehouse"
	RolePlanner     = "planner"
	RoleIntegration = "integration"
	RoleViewer      = "viewer"
)

// Roles lists every role.
var Roles = []string{RoleAdmin, RoleSales, RoleWarehouse, RolePlanner, RoleIntegration, RoleViewer}

// Event types about users and tokens (entity users).
const (
	EventUserCreated     = "user.created"
	EventUserRoleChanged = "user.role_changed"
	// EventUserSourcesChanged: an integration account's sources were set
	// (payload: sources, e.g. ["shop"]).
	EventUserSourcesChanged = "user.sources_changed"
	EventTokenIssued        = "token.issued"
	EventTokenRevoked       = "token.revoked"
)

// UserEventTypes are the event types of entity users: every other type is
// about another entity.
var UserEventTypes = []string{EventUserCreated, EventUserRoleChanged, EventUserSourcesChanged, EventTokenIssued, EventTokenRevoked}

// User is a row of users: a person or an integration account.
type User struct {
	ID          int64
	Login       string
	DisplayName string
	Role        string
	// Sources are the order sources (SourceShop, SourceCRM) an integration
	// account receives orders for, sorted; empty for every other role.
	Sources []string
}

// Same reports whether u and o are the same user with the same name, role
// and sources.
func (u User) Same(o User) bool {
	return u.ID == o.ID && u.Login == o.Login && u.DisplayName == o.DisplayName && u.Role == o.Role &&
		slices.Equal(u.Sources, o.Sources)
}

// Receives reports whether u may receive orders of source (receiveOrder):
// an integration account for its sources only, everyone else for any.
func (u User) Receives(source string) bool {
	return u.Role != RoleIntegration || slices.Contains(u.Sources, source)
}

// APIToken is a row of api_tokens, without the hash.
type APIToken struct {
	ID         int64
	UserID     int64
	Name       string
	CreatedAt  time.Time
	ExpiresAt  *time.Time
	RevokedAt  *time.Time
	LastUsedAt *time.Time
}

// NewToken returns a fresh random API token ("erp_" + 43 base64url chars,
// 256 bits). Only its SHA-256 is stored.
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random token: %w", err)
	}
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

func hashToken(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// EnsureAdmin creates the admin user (login "admin", display name
// "Администратор", role admin) if missing and, when token is not empty,
// makes token one of its API tokens. It returns the admin's id. Safe to run
// at every start and from several instances at once.
func EnsureAdmin(ctx context.Context, tx pgx.Tx, token string) (int64, error) {
	id, err := queries.UserUpsertRole(ctx, tx, AdminLogin, AdminDisplayName, RoleAdmin)
	if err != nil {
		return 0, fmt.Errorf("ensure admin user: %w", translate(err))
	}
	if token == "" {
		return id, nil
	}
	if err := queries.APITokenInsertIfAbsent(ctx, tx, id, hashToken(token), bootstrapTokenName); err != nil {
		return 0, fmt.Errorf("store admin token: %w", translate(err))
	}
	return id, nil
}

// LockAdmin creates the admin user if missing (as EnsureAdmin does), locks
// its row until tx ends and reports whether it has ever had an API token
// (revoked and expired ones count). A start that would make the admin's
// first token calls it first: of several instances starting at once on an
// empty database, one makes the token (EnsureAdmin) and the others, waiting
// on the lock, then see it and make none.
func LockAdmin(ctx context.Context, tx pgx.Tx) (hasToken bool, err error) {
	id, err := EnsureAdmin(ctx, tx, "") // the upsert locks the row
	if err != nil {
		return false, err
	}
	has, err := queries.APITokenExistsForUser(ctx, tx, id)
	if err != nil {
		return false, fmt.Errorf("look up admin tokens: %w", translate(err))
	}
	return has, nil
}

// UserByToken returns the user owning a valid API token (not revoked, not
// expired) and when the token expires (nil: never), or ErrNotFound, and
// notes the token's use (at most one write a minute per token).
func UserByToken(ctx context.Context, q Querier, token string) (User, *time.Time, error) {
	o, err := queries.APITokenGetOwner(ctx, q, hashToken(token))
	if err != nil {
		return User{}, nil, fmt.Errorf("find token owner: %w", translate(err))
	}
	return User{ID: o.ID, Login: o.Login, DisplayName: o.DisplayName, Role: o.Role, Sources: o.Sources}, o.ExpiresAt, nil
}

// UserInput creates a user. Sources are required for RoleIntegration and
// refused for every other role.
type UserInput struct {
	Login       string
	DisplayName string
	Role        string
	Sources     []string
}

func validRole(field, role string) error {
	if !slices.Contains(Roles, role) {
		return inputErr(field, "unknown role %q", role)
	}
	return nil
}

// CreateUser inserts a user and journals user.created (login, role,
// sources) by actorID. Errors: *InputError (bad login, empty name, an
// integration account without sources or another role with some; a taken
// login also matches ErrConflict).
func CreateUser(ctx context.Context, tx pgx.Tx, actorID *int64, in UserInput) (User, []Event, error) {
	if !validSubscriberName(in.Login) {
		return User{}, nil, inputErr("login", "1 to 64 lowercase letters, digits, '_', '.', '-', starting with a letter or digit")
	}
	name, err := requireText("displayName", in.DisplayName)
	if err != nil {
		return User{}, nil, err
	}
	if err := validRole("role", in.Role); err != nil {
		return User{}, nil, err
	}
	sources, err := validSources(in.Role, in.Sources)
	if err != nil {
		return User{}, nil, err
	}
	if in.Role == RoleIntegration && len(sources) == 0 {
		return User{}, nil, inputErr("sources", "an integration account needs the sources it receives orders for (shop, crm)")
	}
	row, err := queries.UserInsert(ctx, tx, in.Login, name, in.Role, sources)
	switch err = translate(err); {
	case errors.Is(err, ErrConflict):
		return User{}, nil, conflictOn("login", "user %q exists", in.Login)
	case err != nil:
		return User{}, nil, fmt.Errorf("insert user %s: %w", in.Login, err)
	}
	u := User(row)
	ev, err := appendEvent(ctx, tx, actorID, EventUserCreated, EntityUsers, u.ID,
		map[string]any{"login": u.Login, "role": u.Role, "sources": u.Sources})
	if err != nil {
		return User{}, nil, err
	}
	return u, []Event{ev}, nil
}

// UserByLogin returns the user with login, or ErrNotFound.
func UserByLogin(ctx context.Context, q Querier, login string) (User, error) {
	u, err := queries.UserGetByLogin(ctx, q, login)
	if err != nil {
		return User{}, fmt.Errorf("get user %s: %w", login, translate(err))
	}
	return User(u), nil
}

// UserByID returns user id, or ErrNotFound.
func UserByID(ctx context.Context, q Querier, id int64) (User, error) {
	u, err := queries.UserGetByID(ctx, q, id)
	if err != nil {
		return User{}, fmt.Errorf("get user %d: %w", id, translate(err))
	}
	return User(u), nil
}

// Users lists every user by login.
func Users(ctx context.Context, q Querier) ([]User, error) {
	rows, err := queries.UserList(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("list users: %w", translate(err))
	}
	us := make([]User, len(rows))
	for i, r := range rows {
		us[i] = User(r)
	}
	return us, nil
}

// SetUserRole changes login's role and journals user.role_changed (role,
// and sources: what the user is left with). A user that stops being an
// integration account loses its sources; one that becomes one has none
// until SetUserSources. ErrNotFound for an unknown login.
func SetUserRole(ctx context.Context, tx pgx.Tx, actorID *int64, login, role string) (User, []Event, error) {
	if err := validRole("role", role); err != nil {
		return User{}, nil, err
	}
	if login == AdminLogin && role != RoleAdmin {
		// The bootstrap admin is how the system is recovered; start-up
		// would make it admin again anyway.
		return User{}, nil, inputErr("login", "the bootstrap admin keeps the admin role")
	}
	row, err := queries.UserSetRole(ctx, tx, role, login)
	if err != nil {
		return User{}, nil, fmt.Errorf("set role of %s: %w", login, translate(err))
	}
	u := User(row)
	ev, err := appendEvent(ctx, tx, actorID, EventUserRoleChanged, EntityUsers, u.ID, map[string]any{"role": role, "sources": u.Sources})
	if err != nil {
		return User{}, nil, err
	}
	return u, []Event{ev}, nil
}

// SetUserSources binds integration account login to sources (SourceShop,
// SourceCRM; none: it receives nothing) and journals user.sources_changed.
// Errors: *InputError (an unknown source, a user that is not an
// integration account), ErrNotFound for an unknown login.
func SetUserSources(ctx context.Context, tx pgx.Tx, actorID *int64, login string, sources []string) (User, []Event, error) {
	row, err := queries.UserLockByLogin(ctx, tx, login)
	if err != nil {
		return User{}, nil, fmt.Errorf("get user %s: %w", login, translate(err))
	}
	if row.Role != RoleIntegration {
		return User{}, nil, inputErr("login", "user %s is %s, not integration: only an integration account is bound to sources", login, row.Role)
	}
	sources, err = validSources(row.Role, sources)
	if err != nil {
		return User{}, nil, err
	}
	set, err := queries.UserSetSources(ctx, tx, sources, login)
	if err != nil {
		return User{}, nil, fmt.Errorf("set sources of %s: %w", login, translate(err))
	}
	u := User(set)
	ev, err := appendEvent(ctx, tx, actorID, EventUserSourcesChanged, EntityUsers, u.ID, map[string]any{"sources": u.Sources})
	if err != nil {
		return User{}, nil, err
	}
	return u, []Event{ev}, nil
}

// validSources returns sources sorted without repeats, or an *InputError
// on field sources: an unknown source, or sources for a role other than
// integration (which receive for every source or none).
func validSources(role string, sources []string) ([]string, error) {
	if len(sources) > 0 && role != RoleIntegration {
		return nil, inputErr("sources", "only an integration account is bound to sources; a %s user has none", role)
	}
	for i, s := range sources {
		if s != SourceShop && s != SourceCRM {
			return nil, inputErr(fmt.Sprintf("sources.%d", i), "unknown order source %q: shop or crm", s)
		}
	}
	out := append([]string{}, sources...) // not nil: NULL is no binding
	slices.Sort(out)
	return slices.Compact(out), nil
}

// IssueToken creates an API token for login, optionally expiring at
// expiresAt (which must be in the future), and journals token.issued (id,
// name and expiry, never the token). It returns the token, shown once.
func IssueToken(ctx context.Context, tx pgx.Tx, actorID *int64, login, name string, expiresAt *time.Time) (string, APIToken, []Event, error) {
	if len(name) > 100 {
		return "", APIToken{}, nil, inputErr("name", "at most 100 characters")
	}
	if expiresAt != nil && !expiresAt.After(time.Now()) {
		return "", APIToken{}, nil, inputErr("expiresAt", "must be in the future")
	}
	// Locked: token.issued is journaled about the user.
	row, err := queries.UserLockByLogin(ctx, tx, login)
	if err != nil {
		return "", APIToken{}, nil, fmt.Errorf("get user %s: %w", login, translate(err))
	}
	u := User(row)
	token, err := NewToken()
	if err != nil {
		return "", APIToken{}, nil, err
	}
	inserted, err := queries.APITokenInsert(ctx, tx, u.ID, hashToken(token), name, expiresAt)
	if err != nil {
		return "", APIToken{}, nil, fmt.Errorf("insert token for %s: %w", login, translate(err))
	}
	t := APIToken(inserted)
	ev, err := appendEvent(ctx, tx, actorID, EventTokenIssued, EntityUsers, u.ID,
		map[string]any{"token_id": t.ID, "name": t.Name, "expires_at": t.ExpiresAt})
	if err != nil {
		return "", APIToken{}, nil, err
	}
	return token, t, []Event{ev}, nil
}

// RevokeToken revokes token id at once and journals token.revoked; a
// repeat is a no-op that journals nothing. ErrNotFound for an unknown id.
func RevokeToken(ctx context.Context, tx pgx.Tx, actorID *int64, id int64) (APIToken, []Event, error) {
	row, err := queries.APITokenRevoke(ctx, tx, id)
	switch err = translate(err); {
	case errors.Is(err, ErrNotFound):
		// Revoked already (a no-op), or no such token.
		row, err := queries.APITokenGetByID(ctx, tx, id)
		if err != nil {
			return APIToken{}, nil, fmt.Errorf("revoke token %d: %w", id, translate(err))
		}
		return APIToken(row), nil, nil
	case err != nil:
		return APIToken{}, nil, fmt.Errorf("revoke token %d: %w", id, err)
	}
	t := APIToken(row)
	// token.revoked is journaled about the user: lock it, after the token.
	if err := lockEntities(ctx, tx, []entityRef{{EntityUsers, t.UserID}}); err != nil {
		return APIToken{}, nil, err
	}
	ev, err := appendEvent(ctx, tx, actorID, EventTokenRevoked, EntityUsers, t.UserID, map[string]any{"token_id": t.ID})
	if err != nil {
		return APIToken{}, nil, err
	}
	return t, []Event{ev}, nil
}

// Tokens lists API tokens, newest first, of login's user when login is not
// nil (ErrNotFound for an unknown login).
func Tokens(ctx context.Context, q Querier, login *string) ([]APIToken, error) {
	var userID *int64
	if login != nil {
		u, err := UserByLogin(ctx, q, *login)
		if err != nil {
			return nil, err
		}
		userID = &u.ID
	}
	rows, err := queries.APITokenList(ctx, q, userID)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", translate(err))
	}
	ts := make([]APIToken, len(rows))
	for i, r := range rows {
		ts[i] = APIToken(r)
	}
	return ts, nil
}

// TokenKey identifies a token in memory without keeping the token: its
// SHA-256, hex.
func TokenKey(token string) string { return hex.EncodeToString(hashToken(token)) }

// AuthPosition is where a reader of auth changes stands: Seq, the
// position of the last revocation or role change read (auth_changes.seq,
// assigned in commit order), and At, the database's time of the read,
// from which token expiries are read on.
type AuthPosition struct {
	Seq int64
	At  time.Time
}

// AuthChanges is what changed past an AuthPosition: the keys (TokenKey) of
// the tokens revoked or expired since, and the users whose role changed,
// each with its role now. Next is the position to read on from.
type AuthChanges struct {
	EndedTokens []string
	Roles       map[int64]string
	Next        AuthPosition
}

// AuthNow returns the position of the last revocation or role change
// committed so far and the database's now: a reader starting there reads
// every later one.
func AuthNow(ctx context.Context, q Querier) (AuthPosition, error) {
	r, err := queries.AuthChangePosition(ctx, q)
	if err != nil {
		return AuthPosition{}, fmt.Errorf("read auth change position: %w", translate(err))
	}
	return AuthPosition{Seq: r.LastSeq, At: r.Now}, nil
}

// AuthChangesAfter returns, in one query, the tokens revoked and the roles
// changed after pos.Seq, and the tokens expired after pos.At. A
// revocation's position is taken at its commit, in commit order, so a
// reader never passes one that commits after it read, however long the
// revoking transaction ran.
func AuthChangesAfter(ctx context.Context, q Querier, pos AuthPosition) (AuthChanges, error) {
	r, err := queries.AuthChangeListAfter(ctx, q, pos.Seq, pos.At)
	if err != nil {
		return AuthChanges{}, fmt.Errorf("list auth changes after %d: %w", pos.Seq, translate(err))
	}
	c := AuthChanges{EndedTokens: r.EndedKeys, Next: AuthPosition{Seq: r.LastSeq, At: r.Now}}
	if len(r.UserIds) > 0 {
		c.Roles = make(map[int64]string, len(r.UserIds))
		for i, id := range r.UserIds {
			c.Roles[id] = r.Roles[i]
		}
	}
	return c, nil
}

// PruneAuthChanges deletes up to limit auth changes (revocations, role
// changes) recorded before before, oldest first, and returns how many it
// deleted. A change is recorded at the start of its transaction (a short
// mutation's) and read by every instance's token watch within seconds of
// its commit; a reader's position (seq) stays valid once the rows it read
// are gone.
func PruneAuthChanges(ctx context.Context, q Querier, before time.Time, limit int) (int64, error) {
	n, err := queries.AuthChangeDeleteOld(ctx, q, before, int32(limit))
	if err != nil {
		return 0, fmt.Errorf("prune auth changes recorded before %s: %w", before.Format(time.RFC3339), translate(err))
	}
	return n, nil
}
