package app_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"erp/app/apptest"
	"erp/app/httpapi"
)

const createMove = `mutation($in: WarehouseMoveInput!) { createWarehouseMove(input: $in) { id number status lines { sku quantity } } }`

// receipt is createMove's variables: a posted receipt of qty A1 into MAIN.
func receipt(qty string) map[string]any {
	return map[string]any{"in": map[string]any{"kind": "RECEIPT", "toWarehouse": "MAIN",
		"lines": []any{map[string]any{"sku": "A1", "quantity": qty}}}}
}

// keyed posts query as token's user with Idempotency-Key key and returns
// the status, whether the answer was replayed, and the body.
func keyed(t *testing.T, s *apptest.Server, token, key, query string, vars map[string]any) (int, bool, apptest.Response) {
	t.Helper()
	status, header, res, err := s.PostWith(token, query, vars, http.Header{httpapi.IdempotencyKeyHeader: {key}})
	require.NoError(t, err)
	return status, header.Get(httpapi.ReplayedHeader) == "true", res
}

// moveCounts returns how many warehouse moves and stock postings s holds.
func moveCounts(t *testing.T, s *apptest.Server) (moves, postings int) {
	t.Helper()
	require.NoError(t, s.Pool.QueryRow(t.Context(),
		`SELECT (SELECT count(*) FROM wh_moves), (SELECT count(*) FROM stock_ledger)`).Scan(&moves, &postings))
	return moves, postings
}

// requireKeyError requires res to be refused with one error of code on
// the Idempotency-Key header whose message says want.
func requireKeyError(t *testing.T, res apptest.Response, code, want string) {
	t.Helper()
	require.Len(t, res.Errors, 1)
	require.Nil(t, res.Data, "a refused request has no data")
	e := res.Errors[0]
	require.Equal(t, code, e.Extensions["code"])
	require.Equal(t, httpapi.IdempotencyKeyHeader, e.Extensions["field"])
	require.Contains(t, e.Message, want)
}

func TestIdempotencyKeyRunsAMutationOnce(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)

	// A retry: one move, one stock posting, the same answer twice.
	status, replayed, first := keyed(t, s, s.Token, "move-1", createMove, receipt("5"))
	require.Equal(t, http.StatusOK, status)
	require.Empty(t, first.Errors)
	require.False(t, replayed)
	status, replayed, again := keyed(t, s, s.Token, "move-1", createMove, receipt("5"))
	require.Equal(t, http.StatusOK, status)
	require.True(t, replayed)
	require.Equal(t, first, again)
	moves, postings := moveCounts(t, s)
	require.Equal(t, 1, moves)
	require.Equal(t, 1, postings)

	// Another body with that key: CONFLICT naming the key, nothing written.
	status, _, res := keyed(t, s, s.Token, "move-1", createMove, receipt("6"))
	require.Equal(t, http.StatusUnprocessableEntity, status)
	requireKeyError(t, res, "CONFLICT", `"move-1"`)
	moves, postings = moveCounts(t, s)
	require.Equal(t, 1, moves)
	require.Equal(t, 1, postings)

	// 8 concurrent requests with one key: one document. Each of the others
	// gets its answer, or CONFLICT "in progress" while it runs.
	type answer struct {
		status   int
		replayed bool
		res      apptest.Response
		err      error
	}
	answers := make([]answer, 8)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() {
			status, header, res, err := s.PostWith(s.Token, createMove, receipt("1"), http.Header{httpapi.IdempotencyKeyHeader: {"move-2"}})
			answers[i] = answer{status, header.Get(httpapi.ReplayedHeader) == "true", res, err}
		})
	}
	wg.Wait()
	var ran []apptest.Response
	var answered []apptest.Response
	for _, a := range answers {
		require.NoError(t, a.err)
		switch a.status {
		case http.StatusOK:
			require.Empty(t, a.res.Errors)
			answered = append(answered, a.res)
			if !a.replayed {
				ran = append(ran, a.res)
			}
		case http.StatusConflict:
			requireKeyError(t, a.res, "CONFLICT", "in progress")
		default:
			t.Fatalf("got status %d, want 200 or 409: %+v", a.status, a.res)
		}
	}
	require.Len(t, ran, 1, "one request ran")
	for _, a := range answered {
		require.Equal(t, ran[0], a)
	}
	moves, postings = moveCounts(t, s)
	require.Equal(t, 2, moves)
	require.Equal(t, 2, postings)
	// Once answered, a retry gets the answer.
	status, replayed, res = keyed(t, s, s.Token, "move-2", createMove, receipt("1"))
	require.Equal(t, http.StatusOK, status)
	require.True(t, replayed)
	require.Equal(t, ran[0], res)
}

func TestIdempotencyKeyRules(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)

	t.Run("a query ignores it", func(t *testing.T) {
		const list = `{ warehouses { code } }`
		for _, key := range []string{"list-1", "not a valid key"} {
			status, replayed, res := keyed(t, s, s.Token, key, list, nil)
			require.Equal(t, http.StatusOK, status)
			require.Empty(t, res.Errors)
			require.False(t, replayed)
		}
		apptest.GQL[map[string]any](t, s, `mutation { createWarehouse(input: {code: "SPARE", name: "Запасной"}) { id } }`, nil)
		status, replayed, res := keyed(t, s, s.Token, "list-1", list, nil)
		require.Equal(t, http.StatusOK, status)
		require.False(t, replayed)
		require.Contains(t, string(res.Data), "SPARE", "the query ran again")
	})

	t.Run("an invalid key is refused", func(t *testing.T) {
		movesBefore, _ := moveCounts(t, s)
		for _, key := range [][]string{{""}, {"two words"}, {strings.Repeat("k", 256)}, {"ключ"}, {"a", "b"}} {
			status, header, res, err := s.PostWith(s.Token, createMove, receipt("1"), http.Header{httpapi.IdempotencyKeyHeader: key})
			require.NoError(t, err)
			require.Equal(t, http.StatusBadRequest, status, "key %q", key)
			require.Empty(t, header.Get(httpapi.ReplayedHeader))
			requireKeyError(t, res, "BAD_USER_INPUT", "visible ASCII")
		}
		moves, _ := moveCounts(t, s)
		require.Equal(t, movesBefore, moves, "nothing written")
		// 255 visible characters, quotes and all, are a key.
		status, _, res := keyed(t, s, s.Token, `"`+strings.Repeat("~", 253)+`"`, createMove, receipt("1"))
		require.Equal(t, http.StatusOK, status)
		require.Empty(t, res.Errors)
	})

	t.Run("each user has their own keys", func(t *testing.T) {
		tokens := []string{apptest.RoleToken(t, s, "wh1", "WAREHOUSE"), apptest.RoleToken(t, s, "wh2", "WAREHOUSE")}
		movesBefore, _ := moveCounts(t, s)
		var ids []string
		for _, token := range tokens {
			status, replayed, res := keyed(t, s, token, "shared", createMove, receipt("2"))
			require.Equal(t, http.StatusOK, status)
			require.Empty(t, res.Errors)
			require.False(t, replayed)
			ids = append(ids, string(res.Data))
		}
		require.NotEqual(t, ids[0], ids[1])
		status, replayed, res := keyed(t, s, tokens[0], "shared", createMove, receipt("2"))
		require.Equal(t, http.StatusOK, status)
		require.True(t, replayed)
		require.Equal(t, ids[0], string(res.Data))
		moves, _ := moveCounts(t, s)
		require.Equal(t, movesBefore+2, moves)
	})

	t.Run("a request that did not run leaves the key free; one that ran and failed keeps it", func(t *testing.T) {
		// Not valid: refused before anything ran.
		status, _, res := keyed(t, s, s.Token, "fixed", `mutation { createWarehouseMove(input: {kind: RECEIPT}) { id } }`, nil)
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, "GRAPHQL_VALIDATION_FAILED", res.Errors[0].Extensions["code"])
		status, replayed, res := keyed(t, s, s.Token, "fixed", createMove, receipt("1"))
		require.Equal(t, http.StatusOK, status)
		require.Empty(t, res.Errors)
		require.False(t, replayed)

		// Ran and failed (an unknown SKU): the same answer again.
		bad := map[string]any{"in": map[string]any{"kind": "RECEIPT", "toWarehouse": "MAIN", "lines": []any{map[string]any{"sku": "NOPE", "quantity": "1"}}}}
		status, replayed, first := keyed(t, s, s.Token, "unknown-sku", createMove, bad)
		require.Equal(t, http.StatusOK, status)
		require.NotEmpty(t, first.Errors)
		require.False(t, replayed)
		status, replayed, again := keyed(t, s, s.Token, "unknown-sku", createMove, bad)
		require.Equal(t, http.StatusOK, status)
		require.True(t, replayed)
		require.Equal(t, first, again)
	})

	t.Run("an unanswered claim is in progress until its lease ends", func(t *testing.T) {
		status, _, _ := keyed(t, s, s.Token, "crashed", createMove, receipt("1"))
		require.Equal(t, http.StatusOK, status)
		// As if its request were still running.
		_, err := s.Pool.Exec(t.Context(), `UPDATE idempotency_keys SET status = NULL, content_type = NULL, body = NULL,
			expires_at = now() + interval '1 minute' WHERE key = 'crashed'`)
		require.NoError(t, err)
		status, _, res := keyed(t, s, s.Token, "crashed", createMove, receipt("1"))
		require.Equal(t, http.StatusConflict, status)
		requireKeyError(t, res, "CONFLICT", "in progress")

		// Its request died: once the lease has ended, the key runs again.
		_, err = s.Pool.Exec(t.Context(), `UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE key = 'crashed'`)
		require.NoError(t, err)
		movesBefore, _ := moveCounts(t, s)
		status, replayed, res := keyed(t, s, s.Token, "crashed", createMove, receipt("1"))
		require.Equal(t, http.StatusOK, status)
		require.Empty(t, res.Errors)
		require.False(t, replayed)
		moves, _ := moveCounts(t, s)
		require.Equal(t, movesBefore+1, moves)
	})

	t.Run("expired keys are forgotten", func(t *testing.T) {
		_, err := s.Pool.Exec(t.Context(), `UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE key = 'shared'`)
		require.NoError(t, err)
		// Any answer stored prunes a few expired keys, of any user.
		status, _, _ := keyed(t, s, s.Token, "pruner", createMove, receipt("1"))
		require.Equal(t, http.StatusOK, status)
		var left int
		require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM idempotency_keys WHERE key = 'shared'`).Scan(&left))
		require.Zero(t, left)
	})
}
