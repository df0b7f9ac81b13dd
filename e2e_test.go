package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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

// TestE2ERealClients drives the server with the npm clients graphql-ws
// (graphql-transport-ws) and subscriptions-transport-ws (legacy graphql-ws)
// through e2e/*.mjs: subscribing from a cursor, receiving what mutations
// produce, resuming after the connection is gone, a bad token refused.
// It needs Node.js and e2e/node_modules (npm ci --prefix e2e; make test
// runs it), and fails without them rather than skipping.
func TestE2ERealClients(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	require.NoError(t, err, "the end-to-end tests need Node.js (20 or later) on PATH")
	_, err = os.Stat(filepath.Join("e2e", "node_modules"))
	require.NoError(t, err, "e2e/node_modules is missing: run `npm ci --prefix e2e` (make test does it for you)")

	for _, client := range []string{"graphql-ws", "subscriptions-transport-ws"} {
		t.Run(client, func(t *testing.T) {
			t.Parallel()
			s := newTestServer(t, serverOpts{})
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			var stdout, stderr bytes.Buffer
			cmd := exec.CommandContext(ctx, node, filepath.Join("e2e", client+".mjs"), s.URL+"/graphql", s.Token)
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
			require.EqualValues(t, 4403, out.BadTokenClose, "a bad token is closed with 4403")

			// Together: every event after the start cursor, once, in feed
			// order.
			all := slices.Concat(out.Live, out.Resumed, out.AfterResume)
			ids := make([]string, len(all))
			prev := feedSeq(t, out.StartCursor)
			for i, ev := range all {
				require.Equal(t, "doc.created", ev.Type)
				seq := feedSeq(t, ev.Cursor)
				require.Greater(t, seq, prev, "event %s out of order", ev.ID)
				prev, ids[i] = seq, ev.ID
			}
			journal := journalIDs(t, s.Pool, "doc.created")
			require.Equal(t, journal[1:], ids)
		})
	}
}
