package app_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"erp/app"
	"erp/app/apptest"
	"erp/app/config"
)

func TestUserSubcommandBootstrapsAnIntegration(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	url := s.Pool.Config().ConnString()
	var out strings.Builder
	cfg := config.Default()
	cfg.DatabaseURL = url
	cfg.User = config.User{Login: "shop", Name: "Интернет-магазин", Role: "integration", Sources: "shop", TokenName: "prod"}
	require.NoError(t, app.CreateUser(t.Context(), cfg, apptest.Logger(t), &out))
	fields := strings.Fields(out.String())
	token := fields[len(fields)-1]
	require.True(t, strings.HasPrefix(token, "erp_"), out.String())

	// The integration account is the actor of the orders it sends.
	_, res := s.Do(t, token, `mutation { receiveOrder(input: {source: SHOP, externalId: "shop-cli", customer: "X", lines: [{sku: "A1", quantity: "1"}]}) { duplicate } }`, nil)
	require.Empty(t, res.Errors)
	type journal struct {
		Events struct {
			Edges []struct{ Node apptest.FeedEvent }
		} `json:"events"`
	}
	j := apptest.GQL[journal](t, s, `{ events(filter: {types: ["order.received"]}) { edges { node { actor { displayName } } } } }`, nil)
	require.Equal(t, "Интернет-магазин", j.Events.Edges[0].Node.Actor.DisplayName)
	// It can do nothing else: not even receive the CRM's orders.
	_, res = s.Do(t, token, `{ items { id } }`, nil)
	require.Equal(t, "FORBIDDEN", res.Errors[0].Extensions["code"])
	_, res = s.Do(t, token, `mutation { receiveOrder(input: {source: CRM, externalId: "7", customer: "X", lines: [{sku: "A1", quantity: "1"}]}) { duplicate } }`, nil)
	require.Equal(t, "FORBIDDEN", res.Errors[0].Extensions["code"])

	// Run again with other sources, it binds the existing account to them:
	// the server sees it once its token cache (1 s) forgets the account.
	cfg.User.Sources = "shop,crm"
	require.NoError(t, app.CreateUser(t.Context(), cfg, apptest.Logger(t), &out))
	apptest.WaitFor(t, 10*time.Second, "the CRM order taken", func() bool {
		_, res = s.Do(t, token, `mutation { receiveOrder(input: {source: CRM, externalId: "7", customer: "X", lines: [{sku: "A1", quantity: "1"}]}) { duplicate } }`, nil)
		return len(res.Errors) == 0
	})
}
