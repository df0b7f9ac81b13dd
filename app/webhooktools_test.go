package app_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"erp/app/apptest"
)

// verdict is whether one request verified with the old and with the new
// secret, each checked by the Standard Webhooks library.
type verdict struct{ old, new bool }

// rotationReceiver stands for two receivers on one URL: one that still
// holds the old secret and one that has switched to the new.
type rotationReceiver struct {
	mu       sync.Mutex
	old, new *standardwebhooks.Webhook
	verdicts []verdict
}

func newRotationReceiver(t *testing.T, oldSecret string) (*rotationReceiver, string) {
	t.Helper()
	old, err := standardwebhooks.NewWebhook(oldSecret)
	require.NoError(t, err)
	r := &rotationReceiver{old: old}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		v := verdict{old: r.old.Verify(body, req.Header) == nil}
		if r.new != nil {
			v.new = r.new.Verify(body, req.Header) == nil
		}
		r.verdicts = append(r.verdicts, v)
	}))
	t.Cleanup(srv.Close)
	return r, srv.URL
}

func (r *rotationReceiver) setNew(t *testing.T, secret string) {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.new = wh
}

// next creates a sales order and returns the verdict of the request it
// causes.
func (r *rotationReceiver) next(t *testing.T, s *apptest.Server) verdict {
	t.Helper()
	r.mu.Lock()
	n := len(r.verdicts)
	r.mu.Unlock()
	apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": "rotation"})
	apptest.WaitFor(t, 10*time.Second, "the webhook request", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.verdicts) > n
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.verdicts[n]
}

type rotation struct {
	RotateWebhookSecret struct {
		Secret                   string
		PreviousSecretValidUntil *time.Time
		Subscriber               struct{ Name string }
	} `json:"rotateWebhookSecret"`
}

const rotate = `mutation($id: ID!, $grace: Int) { rotateWebhookSecret(id: $id, graceSeconds: $grace) {
	secret previousSecretValidUntil subscriber { name } } }`

func TestRotateWebhookSecretGracePeriod(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	oldSecret := newSecret(t)
	rcv, url := newRotationReceiver(t, oldSecret)
	hook := apptest.CreateWebhook(t, s, "rotating", url, oldSecret, []string{"doc.created"})
	require.Equal(t, verdict{old: true}, rcv.next(t, s))

	before := time.Now()
	rot := apptest.GQL[rotation](t, s, rotate, map[string]any{"id": hook, "grace": 3600}).RotateWebhookSecret
	require.Equal(t, "rotating", rot.Subscriber.Name)
	require.NotEqual(t, oldSecret, rot.Secret)
	require.NotNil(t, rot.PreviousSecretValidUntil)
	require.WithinDuration(t, before.Add(time.Hour), *rot.PreviousSecretValidUntil, time.Minute)
	rcv.setNew(t, rot.Secret)

	// In the grace period both receivers verify every request, retries
	// and redeliveries included (they are signed at each attempt).
	require.Equal(t, verdict{old: true, new: true}, rcv.next(t, s))
	require.Equal(t, verdict{old: true, new: true}, rcv.next(t, s))

	// The grace period ends (set in the database rather than waited for):
	// only the new secret verifies.
	_, err := s.Pool.Exec(t.Context(), `UPDATE subscribers SET previous_secret_until = now() - interval '1 second' WHERE name = 'rotating'`)
	require.NoError(t, err)
	require.Equal(t, verdict{new: true}, rcv.next(t, s))

	// Journaled, without a secret.
	var payload string
	require.NoError(t, s.Pool.QueryRow(t.Context(),
		`SELECT payload::text FROM events WHERE type = 'subscriber.secret_rotated' AND entity = 'subscribers'`).Scan(&payload))
	require.Contains(t, payload, `"subscriber": "rotating"`)
	require.Contains(t, payload, `"previous_valid_until"`)
	require.NotContains(t, payload, "whsec_")
}

func TestRotateWebhookSecretWithoutGrace(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	oldSecret := newSecret(t)
	rcv, url := newRotationReceiver(t, oldSecret)
	hook := apptest.CreateWebhook(t, s, "rotating", url, oldSecret, []string{"doc.created"})

	rot := apptest.GQL[rotation](t, s, rotate, map[string]any{"id": hook, "grace": 0}).RotateWebhookSecret
	require.Nil(t, rot.PreviousSecretValidUntil, "no grace: the old secret ends at once")
	rcv.setNew(t, rot.Secret)
	require.Equal(t, verdict{new: true}, rcv.next(t, s))
}

func TestRotateWebhookSecretRefusals(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	oldSecret := newSecret(t)
	rcv, url := newRotationReceiver(t, oldSecret)
	hook := apptest.CreateWebhook(t, s, "rotating", url, oldSecret, []string{"doc.created"})

	for _, grace := range []int{-1, 2592001} {
		e := apptest.GQLErr(t, s, rotate, map[string]any{"id": hook, "grace": grace})
		require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"], grace)
		require.Equal(t, "graceSeconds", e.Extensions["field"], grace)
		require.Contains(t, e.Message, "2592000", grace)
		require.Contains(t, e.Message, fmt.Sprintf("not %d", grace), "the number as sent, not 2.592001e+06")
	}
	e := apptest.GQLErr(t, s, rotate, map[string]any{"id": "999999", "grace": 60})
	require.Equal(t, "NOT_FOUND", e.Extensions["code"])
	// A built-in subscriber has no secret to rotate.
	var builtin string
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT id::text FROM subscribers WHERE kind = 'builtin' LIMIT 1`).Scan(&builtin))
	e = apptest.GQLErr(t, s, rotate, map[string]any{"id": builtin, "grace": 60})
	require.Equal(t, "NOT_FOUND", e.Extensions["code"])
	require.Contains(t, e.Message, "is built in")

	// Nothing changed: the old secret alone still signs, nothing journaled.
	require.Equal(t, verdict{old: true}, rcv.next(t, s))
	require.Empty(t, apptest.JournalIDs(t, s.Pool, "subscriber.secret_rotated"))
}

type conditionTest struct {
	TestCondition struct {
		Matches bool
		Error   *string
	} `json:"testCondition"`
}

const testCondition = `query($c: String!, $id: ID!) { testCondition(condition: $c, eventId: $id) { matches error } }`

func TestTestCondition(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	apptest.GQL[map[string]any](t, s, apptest.CreateSalesOrder, map[string]any{"customer": "Ромашка"})
	apptest.WaitEventsProcessed(t, s)
	ids := apptest.JournalIDs(t, s.Pool, "doc.created")
	require.NotEmpty(t, ids)
	ev := ids[len(ids)-1]
	viewer := apptest.RoleToken(t, s, "viewer", "VIEWER")
	apptest.WaitAllProcessed(t, s)
	var subscribers, events int
	count := func() (int, int) {
		var subs, evs int
		require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM subscribers), (SELECT count(*) FROM events)`).Scan(&subs, &evs))
		return subs, evs
	}
	subscribers, events = count()

	for _, tt := range []struct {
		cond    string
		matches bool
		err     string
	}{
		{`event.type == "doc.created" && event.payload.entity == "sales_order"`, true, ""},
		{`event.payload.entity == "prod_order"`, false, ""},
		{`event.payload.nosuchkey == 1`, false, "nosuchkey"},
	} {
		got := apptest.GQL[conditionTest](t, s, testCondition, map[string]any{"c": tt.cond, "id": ev}).TestCondition
		require.Equal(t, tt.matches, got.Matches, tt.cond)
		if tt.err == "" {
			require.Nil(t, got.Error, tt.cond)
		} else {
			require.NotNil(t, got.Error, tt.cond)
			require.Contains(t, *got.Error, tt.err, tt.cond)
		}
	}

	// A broken condition: its place in the text, as createWebhookSubscriber gives it.
	e := apptest.GQLErr(t, s, testCondition, map[string]any{"c": "event.type == \"doc.created\" &&\n  event.nosuch == 1", "id": ev})
	require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"])
	require.Equal(t, "condition", e.Extensions["field"])
	require.Equal(t, 2.0, e.Extensions["line"])
	require.Equal(t, 8.0, e.Extensions["column"])
	e = apptest.GQLErr(t, s, testCondition, map[string]any{"c": "  ", "id": ev})
	require.Equal(t, "BAD_USER_INPUT", e.Extensions["code"])
	require.Contains(t, e.Message, "blank")
	e = apptest.GQLErr(t, s, testCondition, map[string]any{"c": "true", "id": "999999"})
	require.Equal(t, "NOT_FOUND", e.Extensions["code"])

	// Admins only.
	_, res := s.Do(t, viewer, testCondition, map[string]any{"c": "true", "id": ev})
	require.NotEmpty(t, res.Errors)
	require.Equal(t, "FORBIDDEN", res.Errors[0].Extensions["code"])

	subs, evs := count()
	require.Equal(t, subscribers, subs, "testCondition creates no subscriber")
	require.Equal(t, events, evs, "testCondition journals nothing")
}
