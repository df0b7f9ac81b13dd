package app_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"erp/app/apptest"
	"erp/app/config"
	"erp/jobs"
	"erp/jobs/natstest"
)

// natsMessages is every message stream holds, in stream order (none when
// the stream has none yet).
func natsMessages(t *testing.T, js jetstream.JetStream, stream string) []jetstream.Msg {
	t.Helper()
	ctx := t.Context()
	s, err := js.Stream(ctx, stream)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	if info.State.Msgs == 0 {
		return nil
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	batch, err := c.Fetch(int(info.State.Msgs), jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	var out []jetstream.Msg
	for m := range batch.Messages() {
		out = append(out, m)
	}
	return out
}

func subjectsOf(msgs []jetstream.Msg) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.Subject()
	}
	return out
}

func createNats(t *testing.T, s *apptest.Server, in map[string]any) string {
	t.Helper()
	return apptest.GQL[struct {
		CreateNatsSubscriber struct{ ID, Kind string }
	}](t, s, `mutation($in: NatsSubscriberInput!) { createNatsSubscriber(input: $in) { id kind } }`,
		map[string]any{"in": in}).CreateNatsSubscriber.ID
}

func createUser(t *testing.T, s *apptest.Server, login, role string) {
	t.Helper()
	apptest.GQL[map[string]any](t, s, `mutation($in: UserInput!) { createUser(input: $in) { id } }`,
		map[string]any{"in": map[string]any{"login": login, "displayName": login, "role": role}})
}

func TestNatsSubscribersFilterPauseAndReplay(t *testing.T) {
	t.Parallel()
	srv := natstest.New(t)
	js := srv.JetStream(t)
	s := apptest.New(t, func(c *config.Config) { c.NatsURL = srv.URL; c.RetryBase = 20 * time.Millisecond })

	createNats(t, s, map[string]any{"name": "by-type", "stream": "BYTYPE", "subjectPrefix": "t", "eventTypes": []string{"user.created"}})
	createNats(t, s, map[string]any{"name": "by-entity", "stream": "BYENTITY", "subjectPrefix": "e", "entities": []string{"subscribers"}})
	createNats(t, s, map[string]any{"name": "by-condition", "stream": "BYCOND", "subjectPrefix": "c",
		"condition": `event.type == "user.role_changed" && event.payload.role == "planner"`, "format": "CLOUDEVENTS"})
	paused := createNats(t, s, map[string]any{"name": "paused", "stream": "PAUSED", "subjectPrefix": "p", "eventTypes": []string{"user.created"}})
	apptest.GQL[map[string]any](t, s, `mutation($id: ID!) { pauseSubscriber(id: $id) { id } }`, map[string]any{"id": paused})

	createUser(t, s, "anna", "VIEWER")
	createUser(t, s, "boris", "VIEWER")
	apptest.GQL[map[string]any](t, s, `mutation { setUserRole(login: "anna", role: PLANNER) { id } }`, nil)
	apptest.GQL[map[string]any](t, s, `mutation { setUserRole(login: "boris", role: SALES) { id } }`, nil)
	apptest.WaitEventsProcessed(t, s)
	apptest.WaitFor(t, 30*time.Second, "the deliveries", func() bool {
		return len(natsMessages(t, js, "BYTYPE")) == 2 && len(natsMessages(t, js, "BYCOND")) == 1
	})

	byType := natsMessages(t, js, "BYTYPE")
	require.Regexp(t, `^t\.users\.\d+\.user\.created$`, byType[0].Subject())
	require.Equal(t, "user.created", byType[0].Headers().Get(jobs.NatsHeaderEventType))
	require.Equal(t, "application/json", byType[0].Headers().Get("Content-Type"))
	require.Regexp(t, `^dlv_\d+_\d+$`, byType[0].Headers().Get(jetstream.MsgIDHeader))
	require.Contains(t, string(byType[0].Data()), `"type":"user.created"`)

	require.Empty(t, natsMessages(t, js, "BYENTITY"), "no event about a subscriber yet")

	byCond := natsMessages(t, js, "BYCOND")
	require.Regexp(t, `^c\.users\.\d+\.user\.role_changed$`, byCond[0].Subject())
	require.Equal(t, "application/cloudevents+json", byCond[0].Headers().Get("Content-Type"))
	require.Contains(t, string(byCond[0].Data()), `"specversion":"1.0"`)
	require.Contains(t, string(byCond[0].Data()), `"dataschema":"`+s.URL+`/schemas/events/user.role_changed.json"`)

	time.Sleep(200 * time.Millisecond) // a paused subscriber holds: nothing may arrive meanwhile
	require.Empty(t, natsMessages(t, js, "PAUSED"), "a paused NATS subscriber publishes nothing")
	apptest.GQL[map[string]any](t, s, `mutation($id: ID!) { resumeSubscriber(id: $id) { id } }`, map[string]any{"id": paused})
	apptest.WaitFor(t, 30*time.Second, "the held deliveries", func() bool { return len(natsMessages(t, js, "PAUSED")) == 2 })

	// A replay publishes the history again under ids of its own, which the
	// stream stores beside the live ones.
	apptest.GQL[map[string]any](t, s, `mutation { replaySubscriber(subscriber: "by-type") { id } }`, nil)
	apptest.WaitFor(t, 30*time.Second, "the replay", func() bool { return len(natsMessages(t, js, "BYTYPE")) == 4 })
	all := natsMessages(t, js, "BYTYPE")
	require.ElementsMatch(t, subjectsOf(all[:2]), subjectsOf(all[2:]), "the same events again")
	for _, m := range all[2:] {
		require.Regexp(t, `^rpl_\d+_\d+_\d+$`, m.Headers().Get(jetstream.MsgIDHeader))
	}

	// The resume and the replay journaled subscriber.enabled and
	// subscriber.replay_started/finished: only they reach the entity filter.
	apptest.WaitFor(t, 30*time.Second, "the subscribers' events", func() bool { return len(natsMessages(t, js, "BYENTITY")) == 3 })
	for _, subj := range subjectsOf(natsMessages(t, js, "BYENTITY")) {
		require.Regexp(t, `^e\.subscribers\.\d+\.subscriber\.`, subj)
	}
}

func TestNatsSubscriberInputErrors(t *testing.T) {
	t.Parallel()
	noNats := apptest.New(t)
	create := `mutation($in: NatsSubscriberInput!) { createNatsSubscriber(input: $in) { id } }`
	e := apptest.GQLErr(t, noNats, create, map[string]any{"in": map[string]any{"name": "x", "stream": "S", "subjectPrefix": "erp"}})
	require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"])
	require.Contains(t, e.Message, "NATS_URL")

	srv := natstest.New(t)
	s := apptest.New(t, func(c *config.Config) { c.NatsURL = srv.URL })
	for _, tt := range []struct {
		in    map[string]any
		field string
	}{
		{map[string]any{"name": "x", "stream": "S", "subjectPrefix": "erp.>"}, "input.subjectPrefix"},
		{map[string]any{"name": "x", "stream": "a.b", "subjectPrefix": "erp"}, "input.stream"},
		{map[string]any{"name": "x", "stream": "S", "subjectPrefix": "erp", "eventTypes": []string{"no.such"}}, "input.eventTypes.0"},
		{map[string]any{"name": "x", "stream": "S", "subjectPrefix": "erp", "maxAttempts": 0}, "input.maxAttempts"},
		{map[string]any{"name": "x", "stream": "S", "subjectPrefix": "erp", "ratePerSecond": 1e-10}, "input.ratePerSecond"},
	} {
		e := apptest.GQLErr(t, s, create, map[string]any{"in": tt.in})
		require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"], tt.in)
		require.Equal(t, tt.field, e.Extensions["field"], tt.in)
	}
	id := createNats(t, s, map[string]any{"name": "ok", "stream": "S", "subjectPrefix": "erp"})
	e = apptest.GQLErr(t, s, `mutation($id: ID!) { updateWebhookSubscriber(id: $id, input: {name: "y"}) { id } }`, map[string]any{"id": id})
	require.Equal(t, "NOT_FOUND", e.Extensions["code"], "a NATS subscriber is not a webhook")
	e = apptest.GQLErr(t, s, `mutation($id: ID!) { updateNatsSubscriber(id: $id, input: {ratePerSecond: 1e-10}) { id } }`, map[string]any{"id": id})
	require.Equal(t, "input.ratePerSecond", e.Extensions["field"])
	got := apptest.GQL[struct {
		UpdateNatsSubscriber struct {
			Name, Stream, SubjectPrefix string
			MaxInFlight                 int
		}
	}](t, s, `mutation($id: ID!) { updateNatsSubscriber(id: $id, input: {name: "renamed", maxInFlight: 8}) { name stream subjectPrefix maxInFlight } }`,
		map[string]any{"id": id}).UpdateNatsSubscriber
	require.Equal(t, "renamed", got.Name)
	require.Equal(t, "S", got.Stream)
	require.Equal(t, "erp", got.SubjectPrefix)
	require.Equal(t, 8, got.MaxInFlight)
}

func TestNatsDownUpdateNeedsNoNatsCreateIsUnavailable(t *testing.T) {
	t.Parallel()
	srv := natstest.New(t)
	s := apptest.New(t, func(c *config.Config) { c.NatsURL = srv.URL })
	id := createNats(t, s, map[string]any{"name": "journal", "stream": "ERP", "subjectPrefix": "erp.journal"})
	srv.Stop()

	update := `mutation($id: ID!, $n: Int!) { updateNatsSubscriber(id: $id, input: {maxAttempts: $n}) { maxAttempts } }`
	got := apptest.GQL[struct{ UpdateNatsSubscriber struct{ MaxAttempts int } }](t, s, update, map[string]any{"id": id, "n": 9})
	require.Equal(t, 9, got.UpdateNatsSubscriber.MaxAttempts, "a shorter schedule needs no look at the stream")

	e := apptest.GQLErr(t, s, update, map[string]any{"id": id, "n": 12})
	require.Equal(t, "UNAVAILABLE", e.Extensions["code"], e.Message)
	require.Contains(t, e.Message, "NATS is not reachable: ")
	e = apptest.GQLErr(t, s, `mutation { createNatsSubscriber(input: {name: "other", stream: "OTHER", subjectPrefix: "other"}) { id } }`, nil)
	require.Equal(t, "UNAVAILABLE", e.Extensions["code"], e.Message)
	require.Contains(t, e.Message, "NATS is not reachable: ")
}
