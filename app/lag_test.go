package app_test

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"erp/app/apptest"
	"erp/metrics"
)

type lagView struct {
	Pending         int
	OldestPendingAt *time.Time
	Failing         int
	Dead            int
	LastDeliveredAt *time.Time
}

type lagSubscriber struct {
	Name string
	Lag  lagView
}

// subscriberLags reads every subscriber's lag through the list (one
// batched query), by name.
func subscriberLags(t *testing.T, s *apptest.Server) map[string]lagView {
	t.Helper()
	res := apptest.GQL[struct{ Subscribers []lagSubscriber }](t, s,
		`{ subscribers { name lag { pending oldestPendingAt failing dead lastDeliveredAt } } }`, nil)
	out := map[string]lagView{}
	for _, sub := range res.Subscribers {
		out[sub.Name] = sub.Lag
	}
	return out
}

type recordView struct {
	Status    string
	CreatedAt time.Time
}

// records lists subscriber's delivery records.
func records(t *testing.T, s *apptest.Server, subscriber string) []recordView {
	t.Helper()
	res := apptest.GQL[struct {
		Deliveries struct{ Edges []struct{ Node recordView } }
	}](t, s, `query($s: String!) { deliveries(filter: {subscriber: $s}, first: 500) { edges { node { status createdAt } } } }`,
		map[string]any{"s": subscriber})
	out := make([]recordView, 0, len(res.Deliveries.Edges))
	for _, e := range res.Deliveries.Edges {
		out = append(out, e.Node)
	}
	return out
}

// lagOfRecords is the lag the records imply (without lastDeliveredAt).
func lagOfRecords(recs []recordView) lagView {
	var l lagView
	for _, r := range recs {
		switch r.Status {
		case "PENDING", "FAILED":
			l.Pending++
			if r.Status == "FAILED" {
				l.Failing++
			}
			if l.OldestPendingAt == nil || r.CreatedAt.Before(*l.OldestPendingAt) {
				l.OldestPendingAt = &r.CreatedAt
			}
		case "DEAD":
			l.Dead++
		}
	}
	return l
}

// subscriberGauges reads erp_subscriber_pending and
// erp_subscriber_oldest_pending_seconds of subscriber from /metrics.
func subscriberGauges(t *testing.T, s *apptest.Server, subscriber string) (pending, oldest float64, ok bool) {
	t.Helper()
	res, err := http.Get(s.URL + "/metrics")
	require.NoError(t, err)
	defer func() { _ = res.Body.Close() }()
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(res.Body)
		t.Fatalf("GET /metrics: %d %s", res.StatusCode, body)
	}
	label := `{subscriber="` + subscriber + `"} `
	var seen int
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		for name, dst := range map[string]*float64{"erp_subscriber_pending": &pending, "erp_subscriber_oldest_pending_seconds": &oldest} {
			if v, found := strings.CutPrefix(line, name+label); found {
				f, err := strconv.ParseFloat(v, 64)
				require.NoError(t, err, "line %q", line)
				*dst = f
				seen++
			}
		}
	}
	require.NoError(t, sc.Err())
	return pending, oldest, seen == 2
}

// A webhook that answers 503 falls behind: its lag (GraphQL and /metrics)
// is what its delivery records say; once it answers again the retries
// deliver and the lag goes back to zero. A webhook with one attempt goes
// dead instead, and its dead letters are counted.
func TestSubscriberLagWhileWebhookDown(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	var down atomic.Bool
	down.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if down.Load() {
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	for name, attempts := range map[string]int{"mes": 10, "once": 1} {
		apptest.GQL[map[string]any](t, s, `mutation($in: WebhookSubscriberInput!) { createWebhookSubscriber(input: $in) { id } }`,
			map[string]any{"in": map[string]any{"name": name, "url": srv.URL, "eventTypes": []string{"doc.created"},
				"maxAttempts": attempts, "timeoutMs": 2000}})
	}
	before := subscriberLags(t, s)
	require.Equal(t, lagView{}, before["mes"], "a new webhook has no lag")

	const orders = 3
	for _, c := range []string{"А", "Б", "В"}[:orders] {
		apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": c})
	}
	apptest.WaitFor(t, 20*time.Second, "every delivery to mes failed once, every one to once dead", func() bool {
		lags := subscriberLags(t, s)
		return lags["mes"].Failing == orders && lags["once"].Dead == orders
	})
	// Retries keep failing while it is down: the figures hold still.
	lags := subscriberLags(t, s)
	mes, once := lags["mes"], lags["once"]
	require.Equal(t, lagOfRecords(records(t, s, "mes")), mes)
	require.Equal(t, lagView{Dead: orders}, once)
	require.Equal(t, orders, mes.Pending)
	require.NotNil(t, mes.OldestPendingAt)
	pending, oldest, ok := subscriberGauges(t, s, "mes")
	require.True(t, ok, "/metrics has both gauges of mes")
	require.Equal(t, float64(orders), pending)
	require.Positive(t, oldest)
	require.Less(t, oldest, time.Since(*mes.OldestPendingAt).Seconds()+5, "the age is the oldest record's")
	pending, oldest, ok = subscriberGauges(t, s, "once")
	require.True(t, ok)
	require.Zero(t, pending, "dead letters are not pending")
	require.Zero(t, oldest)

	down.Store(false)
	apptest.WaitFor(t, 30*time.Second, "the retries to mes delivered", func() bool {
		return subscriberLags(t, s)["mes"].Pending == 0
	})
	mes = subscriberLags(t, s)["mes"]
	require.Zero(t, mes.Failing)
	require.Zero(t, mes.Dead)
	require.Nil(t, mes.OldestPendingAt)
	require.NotNil(t, mes.LastDeliveredAt)
	require.Equal(t, lagOfRecords(records(t, s, "mes")), lagView{}, "the records agree: all delivered")
	// The gauges follow within metrics.ScrapeCache.
	apptest.WaitFor(t, 2*metrics.ScrapeCache, "/metrics says mes caught up", func() bool {
		pending, oldest, ok = subscriberGauges(t, s, "mes")
		return ok && pending == 0 && oldest == 0
	})
}
