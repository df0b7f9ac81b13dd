package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"erp/app/apptest"
	"erp/db"
)

// The browser test drives Debian's Chromium with playwright-core (Node).
const (
	chromiumPath  = "/usr/bin/chromium"
	browserDir    = "browser"
	browserScript = "browser/events.mjs"
	// browserTimeout bounds the whole node run (Chromium start, both pages).
	browserTimeout = 3 * time.Minute
)

// browserRun is the JSON browser/events.mjs prints.
type browserRun struct {
	OK          bool     `json:"ok"`
	Error       string   `json:"error"`
	Blocked     []string `json:"blocked"`
	PageErrors  []string `json:"pageErrors"`
	Screenshots []string `json:"screenshots"`
	Steps       []struct {
		Name string `json:"name"`
		MS   int    `json:"ms"`
		// sign in
		RedirectedTo   string `json:"redirectedTo"`
		Refused        string `json:"refused"`
		TokenInSession bool   `json:"tokenInSession"`
		TokenElsewhere bool   `json:"tokenElsewhere"`
		// rows
		Header       []string     `json:"header"`
		RowCount     int          `json:"rowCount"`
		JournalCount int          `json:"journalCount"`
		FirstRows    []browserRow `json:"firstRows"`
		TopIDsMatch  bool         `json:"topIDsMatch"`
		TimeZone     string       `json:"timeZone"`
		// live order, network drop, playground subscription
		Order *struct {
			ID     string `json:"id"`
			Number string `json:"number"`
		} `json:"order"`
		Top              []browserRow `json:"top"`
		EventIDs         []string     `json:"eventIDs"`
		MissingWhileDown bool         `json:"missingWhileDown"`
		Duplicates       int          `json:"duplicates"`
		NewestFirst      bool         `json:"newestFirst"`
		// status history
		Reason      string           `json:"reason"`
		Summary     string           `json:"summary"`
		StatusShown string           `json:"statusShown"`
		History     []historyRow     `json:"history"`
		Journal     []historyJournal `json:"journal"`
		// dead delivery
		Shown string `json:"shown"`
		// payload
		Collapsed       bool `json:"collapsed"`
		ExpandedMatches bool `json:"expandedMatches"`
		// dead delivery: the subscribers panel's dead count of e2e-refuser
		LagDead string `json:"lagDead"`
		// filter
		URL         string   `json:"url"`
		Types       []string `json:"types"`
		IDsMatch    bool     `json:"idsMatch"`
		AfterReload bool     `json:"afterReload"`
		Selected    string   `json:"selected"`
		// open object
		Object    string `json:"object"`
		Want      string `json:"want"`
		Lines     int    `json:"lines"`
		WantLines int    `json:"wantLines"`
		// unprocessed
		Held            *browserRow `json:"held"`
		RowsWhilePaused int         `json:"rowsWhilePaused"`
		AllUnprocessed  bool        `json:"allUnprocessed"`
		// more
		FirstPage int `json:"firstPage"`
		Total     int `json:"total"`
		// playground
		HeaderHasToken      bool `json:"headerHasToken"`
		ResponseHasEvents   bool `json:"responseHasEvents"`
		ResponseHasOrder    bool `json:"responseHasOrder"`
		TokenInLocalStorage bool `json:"tokenInLocalStorage"`
	} `json:"steps"`
}

type browserRow struct {
	ID, Type, Object, Payload, Created, Processed, Actor string
	WaitsFor                                             string // pending deliveries of an unprocessed event
}

// historyRow is one row of the document dialog's "История статусов", as shown.
type historyRow struct{ ID, From, To, Reason, Actor, When string }

// historyJournal is one doc.created or doc.status_changed event of the
// document as the API lists it, oldest first; empty strings for what the
// payload lacks and for the system as actor.
type historyJournal struct{ ID, Type, From, To, Reason, Actor, CreatedAt string }

// requireBrowserTools fails (CI=true) or skips (otherwise) when Chromium,
// node or the script's npm packages are missing, saying how to get them.
func requireBrowserTools(t *testing.T) string {
	t.Helper()
	var missing []string
	if _, err := os.Stat(chromiumPath); err != nil {
		missing = append(missing, chromiumPath+" (Debian: apt-get install chromium)")
	}
	node, err := exec.LookPath("node")
	if err == nil {
		// playwright-core wants Node 20 or newer.
		out, verr := exec.Command(node, "-p", "process.versions.node.split('.')[0]").Output()
		if major, _ := strconv.Atoi(strings.TrimSpace(string(out))); verr != nil || major < 20 {
			err = fmt.Errorf("node %s is too old", strings.TrimSpace(string(out)))
		}
	}
	if err != nil {
		missing = append(missing, "Node.js 20+ with npm (Debian 13: apt-get install nodejs npm; older: nodesource.com)")
	}
	if _, err := os.Stat(filepath.Join(browserDir, "node_modules", "playwright-core", "package.json")); err != nil {
		missing = append(missing, "e2e/"+browserDir+"/node_modules (npm ci --prefix e2e/"+browserDir+"; make test does it)")
	}
	if len(missing) > 0 {
		requireTool(t, "what the browser test needs", strings.Join(missing, "; "))
	}
	return node
}

// TestBrowserEventsPage replays the demo day on a real server and
// database, then drives headless Chromium through the events page (sign
// in, seed columns, a live order, its cancellation and the order's status
// history, a network drop, filter, object details, more rows) and the playground with every non-localhost request blocked.
func TestBrowserEventsPage(t *testing.T) {
	t.Parallel()
	node := requireBrowserTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout+time.Minute)
	defer cancel()

	s := apptest.New(t)
	runDemo(t, ctx, s.URL+"/graphql", s.Token)
	// What the demo wrote: its journal, and one order.received per order
	// it sent that was not a duplicate.
	var demoEvents, demoOrders int
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE type = 'order.received') FROM events`).Scan(&demoEvents, &demoOrders))

	// The browser reaches the server through a switch the script can open
	// and close; the script's own API calls go straight to the server.
	sw := newNetSwitch(t, s.URL)
	shot := filepath.Join(os.TempDir(), "erp-events-page.png")

	runCtx, cancelRun := context.WithTimeout(ctx, browserTimeout)
	defer cancelRun()
	cmd := exec.CommandContext(runCtx, node, browserScript, sw.URL, s.Token, shot)
	cmd.Env = append(os.Environ(), "E2E_API_URL="+s.URL, "E2E_NET_CONTROL="+sw.controlURL)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	t.Logf("browser log:\n%s", stderr.String())
	require.NoError(t, runErr, "node %s: stdout %s", browserScript, stdout.String())

	var run browserRun
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &run), "script output: %s", stdout.String())
	for _, p := range run.Screenshots {
		t.Logf("screenshot: %s", p)
	}
	require.True(t, run.OK, "browser run failed: %s", run.Error)
	require.Empty(t, run.PageErrors, "uncaught errors in the page")
	require.Empty(t, run.Blocked, "the pages asked the internet for something")

	steps := map[string]int{}
	for i, st := range run.Steps {
		steps[st.Name] = i
		t.Logf("step %-26s %5d ms", st.Name, st.MS)
	}
	wantSteps := []string{"sign in", "rows", "live order", "status history", "dead delivery", "network drop", "payload", "filter order.received", "open object", "unprocessed", "more", "playground query", "playground subscription"}
	for _, name := range wantSteps {
		require.Contains(t, steps, name, "step %q did not run", name)
	}
	signIn := run.Steps[steps["sign in"]]
	require.Equal(t, "/events", signIn.RedirectedTo, "/ redirects to the page")
	require.Equal(t, "Токен не принят.", signIn.Refused, "a wrong token is refused")
	require.True(t, signIn.TokenInSession, "token kept in sessionStorage")
	require.False(t, signIn.TokenElsewhere, "token leaked into localStorage or a cookie")

	rows := run.Steps[steps["rows"]]
	require.Equal(t, []string{"№", "Событие", "Объект", "Данные", "Создано", "Обработано", "Кто"}, rows.Header)
	require.Equal(t, demoEvents, rows.JournalCount, "the demo's events are the journal")
	require.Equal(t, 50, rows.RowCount, "the first page")
	require.True(t, rows.TopIDsMatch, "newest first, as the API lists them")
	require.Equal(t, "Europe/Moscow", rows.TimeZone)
	seedTime := regexp.MustCompile(`^\d{2}\.\d{2}\.\d{4} \d{2}:\d{2}$`)
	moscow, err := time.LoadLocation("Europe/Moscow")
	require.NoError(t, err)
	for _, r := range rows.FirstRows {
		ev := apptest.GQL[struct {
			Event struct {
				CreatedAt   time.Time `json:"createdAt"`
				ProcessedAt time.Time `json:"processedAt"`
				Actor       *struct{ DisplayName string }
			} `json:"event"`
		}](t, s, `query($id: ID!) { event(id: $id) { createdAt processedAt actor { displayName } } }`, map[string]any{"id": r.ID})
		require.Equal(t, ev.Event.CreatedAt.In(moscow).Format("02.01.2006 15:04"), r.Created, "event %s created, Moscow time", r.ID)
		require.Equal(t, ev.Event.ProcessedAt.In(moscow).Format("02.01.2006 15:04"), r.Processed, "event %s processed, Moscow time", r.ID)
		require.Regexp(t, seedTime, r.Created)
		require.Regexp(t, seedTime, r.Processed)
		// The admin drove the demo; the planning chain (ПЗ, ВЦ) is the system's.
		wantActor := "—"
		if ev.Event.Actor != nil {
			wantActor = ev.Event.Actor.DisplayName
		}
		require.Equal(t, wantActor, r.Actor, "event %s actor", r.ID)
		require.Regexp(t, `^(sales_orders|plan_prod_orders|wh_moves|wh_purchase_orders) #\d+$`, r.Object)
		if r.Type == "doc.status_changed" {
			require.Regexp(t, `^[А-Я]{2}-\d{4}-\d{6}: \S.* → \S`, r.Payload, "a status change reads as number: from → to")
		} else {
			require.True(t, strings.HasPrefix(r.Payload, "{\"") && strings.Contains(r.Payload, `": `), "seed-style payload %q", r.Payload)
		}
	}

	live := run.Steps[steps["live order"]]
	require.NotNil(t, live.Order)
	// The order's events at the top, in the order they were processed
	// (different subscribers take them, so either may come first), with
	// order_acceptance's doc.status_changed when it is already processed.
	require.GreaterOrEqual(t, len(live.Top), 2)
	byType := map[string]string{}
	for _, r := range live.Top {
		require.Equal(t, "sales_orders #"+live.Order.ID, r.Object)
		byType[r.Type] = r.Payload
	}
	require.Contains(t, byType, "order.received")
	require.Contains(t, byType["doc.created"], live.Order.Number)

	// The live order was created and accepted, then cancelled by the admin:
	// its dialog lists exactly the journal's doc.created and
	// doc.status_changed of it, oldest first, in Russian, Moscow time.
	hist := run.Steps[steps["status history"]]
	require.Equal(t, live.Order.Number+": принят → отменён, причина: "+hist.Reason, hist.Summary, "the cancellation's Данные cell")
	require.Equal(t, "отменён", hist.StatusShown, "the dialog's status")
	require.Len(t, hist.Journal, 3, "doc.created, accepted, cancelled")
	require.Len(t, hist.History, len(hist.Journal), "one history row per journal event of the order")
	statusRU := map[string]string{"new": "новый", "accepted": "принят", "cancelled": "отменён"}
	for i, j := range hist.Journal {
		row := hist.History[i]
		require.Equal(t, j.ID, row.ID, "history row %d is journal event %s", i, j.ID)
		created, err := time.Parse(time.RFC3339Nano, j.CreatedAt)
		require.NoError(t, err)
		require.Equal(t, created.In(moscow).Format("02.01.2006 15:04"), row.When, "row %d time", i)
		wantActor, wantReason := j.Actor, j.Reason
		if wantActor == "" {
			wantActor = "—"
		}
		if wantReason == "" {
			wantReason = "—"
		}
		require.Equal(t, wantActor, row.Actor, "row %d actor", i)
		require.Equal(t, wantReason, row.Reason, "row %d reason", i)
		if i == 0 {
			require.Equal(t, "doc.created", j.Type)
			require.Equal(t, historyRow{ID: j.ID, From: "создан", To: "новый", Reason: "—", Actor: wantActor, When: row.When}, row,
				"creation first, in the status the first change left")
			continue
		}
		require.Equal(t, "doc.status_changed", j.Type)
		require.Equal(t, statusRU[j.From], row.From, "row %d from %s", i, j.From)
		require.Equal(t, statusRU[j.To], row.To, "row %d to %s", i, j.To)
	}
	require.Equal(t, historyRow{ID: hist.Journal[1].ID, From: "новый", To: "принят", Reason: "—", Actor: "—", When: hist.History[1].When},
		hist.History[1], "order_acceptance accepted it: the system")
	require.Equal(t, db.AdminDisplayName, hist.History[2].Actor, "the admin cancelled it")
	require.Equal(t, hist.Reason, hist.History[2].Reason)

	dead := run.Steps[steps["dead delivery"]]
	require.Regexp(t, `^e2e-refuser: не доставлено, попыток 1 — .*422`, dead.Shown, "a dead delivery shows on its event")
	require.Equal(t, "1", dead.LagDead, "the subscribers panel counts the dead letter")

	drop := run.Steps[steps["network drop"]]
	require.GreaterOrEqual(t, len(drop.EventIDs), 2, "the order's events (doc.created, order.received, and its acceptance once processed)")
	require.True(t, drop.MissingWhileDown, "the order was made while the browser was cut off")
	require.Zero(t, drop.Duplicates, "resumed without repeats")
	require.True(t, drop.NewestFirst)

	payload := run.Steps[steps["payload"]]
	require.True(t, payload.Collapsed, "payload starts collapsed")
	require.True(t, payload.ExpandedMatches, "expanded payload is the event's JSON")

	filter := run.Steps[steps["filter order.received"]]
	require.Contains(t, filter.URL, "/events?type=order.received")
	require.Equal(t, []string{"order.received"}, filter.Types)
	require.True(t, filter.IDsMatch, "exactly the API's order.received events")
	require.True(t, filter.AfterReload, "the filter lives in the URL")
	require.Equal(t, "order.received", filter.Selected)
	require.Equal(t, demoOrders+3, filter.RowCount, "the demo's orders and the three the browser test made")

	open := run.Steps[steps["open object"]]
	require.Equal(t, open.Want, open.Shown, "details show the document's number")
	require.Regexp(t, `^ЗК-\d{4}-\d{6}$`, open.Shown)
	require.Equal(t, open.WantLines, open.Lines)

	held := run.Steps[steps["unprocessed"]]
	require.NotNil(t, held.Held, "the held order.received is listed as unprocessed")
	require.Equal(t, "order.received", held.Held.Type)
	require.Equal(t, "—", held.Held.Processed, "an unprocessed event shows —")
	require.Regexp(t, seedTime, held.Held.Created)
	require.Equal(t, "order_acceptance: ждёт, попыток 0", held.Held.WaitsFor, "what an unprocessed event waits for")
	require.True(t, held.AllUnprocessed, "processed=false lists unprocessed events only")

	more := run.Steps[steps["more"]]
	require.Equal(t, 50, more.FirstPage)
	require.Equal(t, more.Total, more.RowCount, "scrolling loads every page")
	require.Zero(t, more.Duplicates)
	require.True(t, more.NewestFirst)

	require.True(t, run.Steps[steps["playground query"]].HeaderHasToken, "playground headers filled from the sign-in")
	require.True(t, run.Steps[steps["playground query"]].ResponseHasEvents)
	sub := run.Steps[steps["playground subscription"]]
	require.True(t, sub.ResponseHasOrder, "playground subscription result")
	require.False(t, sub.TokenInLocalStorage, "the playground must keep the token out of localStorage")
}

// netSwitch is a TCP proxy in front of a test server, with an HTTP control
// endpoint: POST /down closes every connection through it and refuses new
// ones, POST /up lets them through again — a network drop as a browser
// sees it.
type netSwitch struct {
	URL        string // base URL of the proxy, e.g. http://127.0.0.1:41235
	controlURL string

	target string // host:port
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]struct{}
}

func newNetSwitch(t *testing.T, targetURL string) *netSwitch {
	t.Helper()
	u, err := url.Parse(targetURL)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	sw := &netSwitch{URL: "http://" + ln.Addr().String(), target: u.Host, conns: map[net.Conn]struct{}{}}
	go sw.serve(ln)

	control := http.NewServeMux()
	control.HandleFunc("POST /down", func(w http.ResponseWriter, _ *http.Request) { sw.set(true) })
	control.HandleFunc("POST /up", func(w http.ResponseWriter, _ *http.Request) { sw.set(false) })
	ctl := httptest.NewServer(control)
	sw.controlURL = ctl.URL
	t.Cleanup(func() {
		ctl.Close()
		_ = ln.Close()
		sw.set(true)
	})
	return sw
}

func (sw *netSwitch) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		go sw.pipe(c)
	}
}

func (sw *netSwitch) pipe(client net.Conn) {
	if !sw.track(client) {
		_ = client.Close()
		return
	}
	defer sw.forget(client)
	server, err := net.Dial("tcp", sw.target)
	if err != nil {
		return
	}
	if !sw.track(server) {
		_ = server.Close()
		return
	}
	defer sw.forget(server)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(server, client); done <- struct{}{} }()
	go func() { _, _ = io.Copy(client, server); done <- struct{}{} }()
	<-done // either side ending ends both
}

// track registers c unless the switch is down.
func (sw *netSwitch) track(c net.Conn) bool {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.down {
		return false
	}
	sw.conns[c] = struct{}{}
	return true
}

func (sw *netSwitch) forget(c net.Conn) {
	sw.mu.Lock()
	delete(sw.conns, c)
	sw.mu.Unlock()
	_ = c.Close()
}

func (sw *netSwitch) set(down bool) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.down = down
	if down {
		for c := range sw.conns {
			_ = c.Close()
			delete(sw.conns, c)
		}
	}
}
