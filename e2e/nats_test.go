package e2e

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"erp/app/apptest"
	"erp/db/pgtest"
	"erp/jobs/natstest"
)

// A server killed -9 after its publish reached the stream and before it
// recorded the acknowledgement: the restarted server publishes again under
// the same Nats-Msg-Id, the stream acknowledges it as a duplicate, and the
// event is stored once.
func TestProcessKillAfterNatsPublishIsDeduplicatedByTheStream(t *testing.T) {
	t.Parallel()
	nats := natstest.New(t)
	js := nats.JetStream(t)
	proxy := nats.Proxy(t)
	url := pgtest.NewDB(t)
	token := adminToken(t)
	env := []string{"DISPATCH_INTERVAL=1s", "NATS_URL=" + proxy.URL}
	a := startChild(t, url, token, env...)
	api := clientFor(a, token)

	apptest.GQL[map[string]any](t, api, `mutation($in: NatsSubscriberInput!) { createNatsSubscriber(input: $in) { id } }`,
		map[string]any{"in": map[string]any{"name": "journal", "stream": "ERP", "subjectPrefix": "erp", "eventTypes": []string{"user.created"},
			"timeoutMs": 1000}})
	proxy.HoldReplies.Store(true)
	apptest.GQL[map[string]any](t, api, `mutation($in: UserInput!) { createUser(input: $in) { id } }`,
		map[string]any{"in": map[string]any{"login": "kasse", "displayName": "Касса", "role": "VIEWER"}})

	stream, err := js.Stream(t.Context(), "ERP")
	require.NoError(t, err)
	stored := func() uint64 {
		info, err := stream.Info(t.Context())
		require.NoError(t, err)
		return info.State.Msgs
	}
	apptest.WaitFor(t, 30*time.Second, "the publish stored", func() bool { return stored() == 1 })
	a.kill()
	proxy.HoldReplies.Store(false)
	require.Equal(t, 0, countRows(t, url, `SELECT count(*) FROM deliveries d JOIN subscribers s ON s.id = d.subscriber_id
		WHERE s.name = 'journal' AND d.status = 'delivered'`), "killed before the record")

	startChild(t, url, token, env...)
	// The lease (1 s + its margin) runs out, then the sweep attempts again.
	apptest.WaitFor(t, 60*time.Second, "the delivery recorded", func() bool {
		return countRows(t, url, `SELECT count(*) FROM deliveries d JOIN subscribers s ON s.id = d.subscriber_id
			WHERE s.name = 'journal' AND d.status = 'delivered'`) == 1
	})
	require.Equal(t, uint64(1), stored(), "stored once")
	require.Equal(t, 1, countRows(t, url, `SELECT count(*) FROM delivery_attempts a JOIN subscribers s ON s.id = a.subscriber_id
		WHERE s.name = 'journal' AND a.response_body LIKE '%(duplicate: stored before)'`), "the retry was the stream's duplicate")
	c, err := stream.OrderedConsumer(t.Context(), jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
	require.NoError(t, err)
	require.Regexp(t, `^dlv_\d+_\d+$`, m.Headers().Get(jetstream.MsgIDHeader))
}
