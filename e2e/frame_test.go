package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"erp/app/apptest"
)

// frameRun is the JSON browser/frame.mjs prints.
type frameRun struct {
	OK      bool     `json:"ok"`
	Error   string   `json:"error"`
	Blocked []string `json:"blocked"`
	Console []string `json:"console"`
	Frames  []struct {
		ID       string `json:"id"`
		URL      string `json:"url"`
		Title    string `json:"title"`
		GraphiQL bool   `json:"graphiql"`
		Text     string `json:"text"`
	} `json:"frames"`
}

// TestBrowserRefusesToFrameThePages: a page on another loopback port
// frames /playground, /events and River UI's sign-in; Chromium shows none
// of them (frame-ancestors 'none', X-Frame-Options DENY), while it does
// show a page from a third port that sends neither header, so the test
// would see a frame that loaded.
func TestBrowserRefusesToFrameThePages(t *testing.T) {
	t.Parallel()
	node := requireBrowserTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	s := apptest.New(t)
	control := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>control</title><div id="graphiql">framed</div>`)
	}))
	t.Cleanup(control.Close)
	framed := map[string]string{
		"playground": s.URL + "/playground",
		"events":     s.URL + "/events",
		"riverui":    s.URL + "/riverui/login",
		"control":    control.URL + "/",
	}
	framer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>framer</title>`)
		for id, src := range framed {
			fmt.Fprintf(w, `<iframe id="%s" src="%s" width="600" height="400"></iframe>`, id, src)
		}
	}))
	t.Cleanup(framer.Close)

	cmd := exec.CommandContext(ctx, node, "browser/frame.mjs", framer.URL+"/")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	t.Logf("browser log:\n%s", stderr.String())
	require.NoError(t, runErr, "stdout %s", stdout.String())
	var run frameRun
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &run), "script output: %s", stdout.String())
	require.True(t, run.OK, "browser run failed: %s", run.Error)
	require.Empty(t, run.Blocked)
	for _, m := range run.Console {
		t.Logf("console: %s", m)
	}

	seen := map[string]bool{}
	for _, f := range run.Frames {
		seen[f.ID] = true
		t.Logf("frame %-10s url %s title %q graphiql %v", f.ID, f.URL, f.Title, f.GraphiQL)
		if f.ID == "control" {
			require.Equal(t, "control", f.Title, "a page without the headers is shown")
			require.True(t, f.GraphiQL)
			continue
		}
		require.NotEqual(t, framed[f.ID], f.URL, "%s: the frame navigated to the page", f.ID)
		require.True(t, strings.HasPrefix(f.URL, "chrome-error://"), "%s: want Chromium's error page, got %s", f.ID, f.URL)
		require.False(t, f.GraphiQL, "%s: the playground's root is in the frame", f.ID)
		require.NotContains(t, f.Title, "ERP", f.ID)
		require.NotContains(t, f.Text, "GraphiQL", f.ID)
	}
	for id := range framed {
		require.True(t, seen[id], "frame %s missing", id)
	}
	require.True(t, strings.Contains(strings.Join(run.Console, "\n"), "frame-ancestors 'none'"), "Chromium names the refusing directive")
}
