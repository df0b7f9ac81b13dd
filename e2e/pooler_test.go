package e2e

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"erp/app/apptest"
	"erp/db/pgtest"
)

// TestProcessThroughPgBouncer runs the backbone with DATABASE_URL at
// PgBouncer in transaction-pooling mode, two instances, without and with
// DATABASE_DIRECT_URL, and over TLS (sslmode=verify-full against the
// pooler's CA): every mutation answers, every event is dispatched, and a
// websocket subscriber on the other instance receives each once, in feed
// order. /readyz names the mode.
func TestProcessThroughPgBouncer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, mode  string
		direct, tls bool
	}{
		{"polling", "transaction pooler, polling", false, false},
		{"sessions on DATABASE_DIRECT_URL", "transaction pooler, sessions on DATABASE_DIRECT_URL", true, false},
		{"TLS verify-full", "transaction pooler, polling", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := pgtest.NewDB(t)
			var bouncer string
			if tc.tls {
				bouncer, _ = pgtest.PgBouncerTLS(t, url)
			} else {
				bouncer = pgtest.PgBouncer(t, url)
			}
			token := adminToken(t)
			var env []string
			if tc.direct {
				env = append(env, "DATABASE_DIRECT_URL="+url)
			}
			a := startChild(t, bouncer, token, env...)
			b := startChild(t, bouncer, token, env...)
			for _, c := range []*child{a, b} {
				res, err := http.Get(c.URL + "/readyz")
				require.NoError(t, err)
				body, _ := io.ReadAll(res.Body)
				_ = res.Body.Close()
				require.Equal(t, http.StatusOK, res.StatusCode, "%s", body)
				require.Contains(t, string(body), "database: "+tc.mode)
			}

			sa, sb := clientFor(a, token), clientFor(b, token)
			ws := apptest.DialWS(t, sb, apptest.ProtoTransportWS)
			ws.Init(token)
			ws.Subscribe("1", apptest.FeedSubscription, map[string]any{"filter": map[string]any{"types": []string{"order.received"}}})

			apptest.GQL[map[string]any](t, sa, `mutation { createItem(input: {sku: "A1", name: "Стол", unit: "шт"}) { id } }`, nil)
			// Numeric, JSON and array parameters on every statement the
			// mutations and the dispatch run, on both instances at once.
			const orders = 30
			var wg sync.WaitGroup
			for i := range orders {
				s := sa
				if i%2 == 1 {
					s = sb
				}
				wg.Go(func() {
					apptest.GQL[map[string]any](t, s, `mutation($id: String!) { receiveOrder(input: {source: CRM, externalId: $id, customer: "X", lines: [{sku: "A1", quantity: "1.250"}]}) { order { id number } } }`,
						map[string]any{"id": fmt.Sprint(90000 + i)})
				})
			}
			wg.Wait()

			seen := map[string]bool{}
			var last int64
			for range orders {
				ev := ws.NextEvent("1")
				require.False(t, seen[ev.ID], "event %s twice", ev.ID)
				seen[ev.ID] = true
				seq := apptest.FeedSeq(t, ev.Cursor)
				require.Greater(t, seq, last, "feed order")
				last = seq
			}
			// order_acceptance's doc.status_changed events come after.
			waitDBProcessed(t, url)
			require.Equal(t, orders, countRows(t, url, `SELECT count(*) FROM deliveries WHERE subscriber_id = (SELECT id FROM subscribers WHERE name = 'order_acceptance') AND status = 'delivered'`))
			require.Equal(t, orders, countRows(t, url, `SELECT count(*) FROM sales_orders WHERE status = 'accepted'`))
		})
	}
}
