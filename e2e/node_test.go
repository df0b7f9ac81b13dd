package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"erp/app/apptest"
)

// e2eEvent is an event as the node scripts print it.
type e2eEvent struct {
	ID, Type, EntityID, Cursor string
}

// e2eResult is what e2e/feed.mjs prints.
type e2eResult struct {
	Client            string
	Error             string
	StartCursor       string
	LiveOrders        []string
	Live              []e2eEvent
	OfflineOrders     []string
	Resumed           []e2eEvent
	AfterResumeOrders []string
	AfterResume       []e2eEvent
	Extra             int
	BadTokenClose     any
}

func entityIDs(events []e2eEvent) []string {
	out := make([]string, len(events))
	for i, ev := range events {
		out[i] = ev.EntityID
	}
	return out
}

// TestNodeRealClients drives the server with the npm clients graphql-ws
// (graphql-transport-ws), subscriptions-transport-ws (legacy graphql-ws)
// and graphql-sse (Server-Sent Events, distinct connections) through
// e2e/*.mjs: subscribing from a cursor, receiving what mutations produce,
// resuming after the connection is gone, a bad token refused (close code
// 4403 on a websocket, HTTP 401 for a stream).
// It needs Node.js and e2e/node_modules (npm ci --prefix e2e; make test
// runs it): without them it fails when CI=true, else skips.
func TestNodeRealClients(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		requireTool(t, "Node.js 20+ (node on PATH)", "Debian: apt-get install nodejs npm")
	}
	if _, err := os.Stat("node_modules"); err != nil {
		requireTool(t, "e2e/node_modules", "npm ci --prefix e2e (make test does it)")
	}

	refused := map[string]int{"graphql-ws": 4403, "subscriptions-transport-ws": 4403, "graphql-sse": 401}
	for _, client := range []string{"graphql-ws", "subscriptions-transport-ws", "graphql-sse"} {
		t.Run(client, func(t *testing.T) {
			t.Parallel()
			s := apptest.New(t)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			var stdout, stderr bytes.Buffer
			script := client + ".mjs"
			if client == "graphql-sse" {
				script = "sse.mjs"
			}
			cmd := exec.CommandContext(ctx, node, script, s.URL+"/graphql", s.Token)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			runErr := cmd.Run()
			var out e2eResult
			require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), "stdout: %s\nstderr: %s", stdout.String(), stderr.String())
			require.Empty(t, out.Error, "stderr: %s", stderr.String())
			require.NoError(t, runErr, "stderr: %s", stderr.String())
			require.Equal(t, client, out.Client)

			// What the mutations produced arrived, in each phase.
			sorted := func(s []string) []string { return slices.Sorted(slices.Values(s)) }
			require.Equal(t, sorted(out.LiveOrders), sorted(entityIDs(out.Live)), "live")
			require.Equal(t, sorted(out.OfflineOrders), sorted(entityIDs(out.Resumed)), "resumed with the last cursor")
			require.Equal(t, out.AfterResumeOrders, entityIDs(out.AfterResume), "live after the resume")
			require.Zero(t, out.Extra, "nothing more")
			require.EqualValues(t, refused[client], out.BadTokenClose, "a bad token is refused")

			// Together: every event after the start cursor, once, in feed
			// order.
			all := slices.Concat(out.Live, out.Resumed, out.AfterResume)
			ids := make([]string, len(all))
			prev := apptest.FeedSeq(t, out.StartCursor)
			for i, ev := range all {
				require.Equal(t, "doc.created", ev.Type)
				seq := apptest.FeedSeq(t, ev.Cursor)
				require.Greater(t, seq, prev, "event %s out of order", ev.ID)
				prev, ids[i] = seq, ev.ID
			}
			journal := apptest.JournalIDs(t, s.Pool, "doc.created")
			require.Equal(t, journal[1:], ids)
		})
	}
}

// TestNodeGraphQLHTTPAudit runs the graphql-http package's serverAudits
// (e2e/audit.mjs), the GraphQL-over-HTTP spec's own checks, against the
// server: every audit passes, warnings and notices included.
func TestNodeGraphQLHTTPAudit(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		requireTool(t, "Node.js 20+ (node on PATH)", "Debian: apt-get install nodejs npm")
	}
	if _, err := os.Stat("node_modules/graphql-http"); err != nil {
		requireTool(t, "e2e/node_modules/graphql-http", "npm ci --prefix e2e (make test does it)")
	}
	s := apptest.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, node, "audit.mjs", s.URL+"/graphql", s.Token)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stderr: %s", stderr.String())
	var out struct {
		Total   int
		Results []struct{ ID, Name, Status, Reason string }
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), "stdout: %s", stdout.String())
	require.Greater(t, out.Total, 50, "the audit ran its checks")
	require.Empty(t, out.Results, "audits that did not pass")
}

// TestNodeAsyncAPIParser validates GET /asyncapi.json with the AsyncAPI
// project's own parser (@asyncapi/parser, e2e/asyncapi.mjs): no diagnostic
// of severity error.
func TestNodeAsyncAPIParser(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		requireTool(t, "Node.js 20+ (node on PATH)", "Debian: apt-get install nodejs npm")
	}
	if _, err := os.Stat("node_modules/@asyncapi/parser"); err != nil {
		requireTool(t, "e2e/node_modules/@asyncapi/parser", "npm ci --prefix e2e (make test does it)")
	}
	s := apptest.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, node, "asyncapi.mjs", s.URL+"/asyncapi.json", s.Token)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stdout: %s\nstderr: %s", stdout.String(), stderr.String())
	var out struct {
		Parsed bool
		Errors int
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), "stdout: %s", stdout.String())
	require.True(t, out.Parsed)
	require.Zero(t, out.Errors)
}
