package httpapi_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"erp/app/apptest"
	"erp/app/httpapi"
	"erp/db"
)

// revocationBound is how soon after its commit a revocation or role change
// must take effect on another instance: httpapi.TokenPoll and one query,
// with room for a loaded test machine.
const revocationBound = 2*httpapi.TokenPoll + time.Second

// Two instances on one database, 300 tokens each with a socket on one of
// them, 300 revocations each in a transaction held open across a poll of
// both instances, committing late as a revocation on a busy database does.
// Every socket is closed within the bound of its commit, and the tokens
// are refused by both instances afterwards.
func TestRevocationsRacingAnotherInstancesPollAreSeen(t *testing.T) {
	t.Parallel()
	a := apptest.New(t)
	b := apptest.NewOn(t, a.Pool)
	ctx := t.Context()
	const n = 300
	tokens, ids := make([]string, n), make([]int64, n)
	require.NoError(t, pgx.BeginFunc(ctx, a.Pool, func(tx pgx.Tx) error {
		for i := range n {
			// A user each: a revocation locks its token's user, which
			// would queue revocations of one user behind each other.
			login := fmt.Sprintf("watcher%d", i)
			if _, _, err := db.CreateUser(ctx, tx, nil, db.UserInput{Login: login, DisplayName: login, Role: db.RoleViewer}); err != nil {
				return err
			}
			token, info, _, err := db.IssueToken(ctx, tx, nil, login, "", nil)
			if err != nil {
				return err
			}
			tokens[i], ids[i] = token, info.ID
		}
		return nil
	}))
	instance := func(i int) *apptest.Server { return []*apptest.Server{a, b}[i%2] }

	closedAt, codes := make([]time.Time, n), make([]int, n)
	var readers sync.WaitGroup
	for i := range n {
		c := apptest.DialWS(t, instance(i), apptest.ProtoTransportWS)
		c.Init(tokens[i])
		readers.Go(func() {
			_ = c.Conn.SetReadDeadline(time.Now().Add(time.Minute))
			for {
				if _, _, err := c.Conn.ReadMessage(); err != nil {
					closedAt[i] = time.Now()
					var ce *websocket.CloseError
					if errors.As(err, &ce) {
						codes[i] = ce.Code
					}
					return
				}
			}
		})
	}

	// The revokers' own pool: each revocation holds a connection while
	// its transaction stays open.
	const revokers = 30
	cfg := a.Pool.Config().Copy()
	cfg.MaxConns = revokers
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	committedAt := make([]time.Time, n)
	jobs := make(chan int)
	var workers sync.WaitGroup
	for range revokers {
		workers.Go(func() {
			for i := range jobs {
				// From half a poll to a little over one: most straddle a
				// poll of each instance, many every poll's start.
				hold := httpapi.TokenPoll/2 + rand.N(httpapi.TokenPoll*6/10)
				if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if _, _, err := db.RevokeToken(ctx, tx, nil, ids[i]); err != nil {
						return err
					}
					time.Sleep(hold)
					return nil
				}); err != nil {
					t.Errorf("revoke token %d: %v", ids[i], err)
				}
				committedAt[i] = time.Now()
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	workers.Wait()
	readers.Wait()

	lags := make([]time.Duration, n)
	for i := range n {
		require.Equal(t, websocket.CloseNormalClosure, codes[i], "socket %d closed with 1000", i)
		lags[i] = closedAt[i].Sub(committedAt[i])
		require.LessOrEqual(t, lags[i], revocationBound, "socket %d closed %s after its revocation committed", i, lags[i])
	}
	slices.Sort(lags)
	t.Logf("commit to socket closed: median %s, max %s (poll %s)", lags[n/2], lags[n-1], httpapi.TokenPoll)
	// A sample: past ten failures a minute the client itself is refused
	// (AuthLimit).
	for i := 0; i < n; i += n / 8 {
		for _, s := range []*apptest.Server{a, b} {
			status, _ := s.Do(t, tokens[i], `{ me { login } }`, nil)
			require.Equal(t, http.StatusUnauthorized, status, "token %d refused", i)
		}
	}
}

// A user whose role is lowered from ADMIN to VIEWER, on another instance,
// loses, within the bound, the open subscription the new role may not run
// (events of users): on either subprotocol an error message (FORBIDDEN)
// ends that operation. The socket and its other subscription stay open and
// keep streaming; a new subscription of users' events is refused at once,
// as a result with that error.
func TestRoleLoweredEndsTheSubscriptionsItMayNoLongerRun(t *testing.T) {
	t.Parallel()
	a := apptest.New(t)
	b := apptest.NewOn(t, a.Pool)
	apptest.SeedItem(t, a)
	token := apptest.RoleToken(t, a, "auditor", "ADMIN")
	users := map[string]any{"filter": map[string]any{"entity": "users"}}
	orders := map[string]any{"filter": map[string]any{"entity": "sales_orders"}}
	protos := []string{apptest.ProtoTransportWS, apptest.ProtoLegacyWS}
	sockets := map[string]*apptest.WS{}
	for _, proto := range protos {
		c := apptest.DialWS(t, b, proto)
		c.Init(token)
		c.Subscribe("users", apptest.FeedSubscription, users)
		c.Subscribe("orders", apptest.FeedSubscription, orders)
		sockets[proto] = c
	}
	apptest.WaitFor(t, 5*time.Second, "four subscriptions", func() bool { return b.App.Feed().Subscribers() == 4 })
	apptest.GQL[map[string]any](t, a, `mutation { createUser(input: {login: "clerk", displayName: "Клерк", role: SALES}) { id } }`, nil)
	for _, proto := range protos {
		for sockets[proto].NextEvent("users").Type != "user.created" { // auditor's token.issued may come first
		}
	}

	apptest.GQL[map[string]any](t, a, `mutation { setUserRole(login: "auditor", role: VIEWER) { id } }`, nil)
	changed := time.Now()
	for _, proto := range protos {
		c := sockets[proto]
		for {
			m, err := c.Read(revocationBound)
			require.NoError(t, err, "%s: the users subscription is still open %s after the role change", proto, time.Since(changed))
			if m.Type == "next" || m.Type == "data" {
				require.Equal(t, "users", m.ID, "%s: %s", proto, m.Payload) // user.role_changed, until the change is seen
				continue
			}
			require.Equal(t, "error", m.Type, "%s: %s", proto, m.Payload)
			require.Equal(t, "users", m.ID, proto)
			var errs []apptest.Error
			require.NoError(t, json.Unmarshal(m.Payload, &errs))
			require.Len(t, errs, 1, proto)
			require.Equal(t, "FORBIDDEN", errs[0].Extensions["code"], proto)
			break
		}
		t.Logf("%s: ended %s after the role change", proto, time.Since(changed))
	}
	apptest.WaitFor(t, 5*time.Second, "the users subscriptions gone", func() bool { return b.App.Feed().Subscribers() == 2 })

	apptest.GQL[map[string]any](t, a, apptest.CreateSalesOrder, map[string]any{"customer": "ООО Ромашка"})
	for _, proto := range protos {
		c := sockets[proto]
		require.Equal(t, "doc.created", c.NextEvent("orders").Type, "%s: the socket and its other subscription stay", proto)
		c.Subscribe("users again", apptest.FeedSubscription, users)
		m, err := c.Read(5 * time.Second)
		require.NoError(t, err)
		require.Contains(t, []string{"next", "data"}, m.Type, "%s: %s", proto, m.Payload)
		require.Equal(t, "users again", m.ID, proto)
		require.Contains(t, string(m.Payload), `"code":"FORBIDDEN"`, proto)
	}
}

// A token that expires closes its sockets, on every instance, within the
// bound of its expiry, as a revoked one does.
func TestExpiryClosesSocketsOnEveryInstance(t *testing.T) {
	t.Parallel()
	a := apptest.New(t)
	b := apptest.NewOn(t, a.Pool)
	apptest.GQL[map[string]any](t, a, `mutation { createUser(input: {login: "temp", displayName: "Временный", role: VIEWER}) { id } }`, nil)
	expires := time.Now().Add(1500 * time.Millisecond)
	res := apptest.GQL[struct {
		IssueToken struct{ Token string } `json:"issueToken"`
	}](t, a, `mutation($exp: DateTime) { issueToken(login: "temp", expiresAt: $exp) { token } }`,
		map[string]any{"exp": expires.Format(time.RFC3339Nano)})
	var sockets []*apptest.WS
	for _, s := range []*apptest.Server{a, b} {
		c := apptest.DialWS(t, s, apptest.ProtoTransportWS)
		c.Init(res.IssueToken.Token)
		c.Subscribe("live", apptest.FeedSubscription, nil)
		sockets = append(sockets, c)
	}
	for _, c := range sockets {
		require.Equal(t, websocket.CloseNormalClosure, c.CloseCode(time.Until(expires)+revocationBound, false))
		require.False(t, time.Now().Before(expires), "closed before it expired")
	}
}
