package docs_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/stretchr/testify/require"

	"erp/app/apptest"
	"erp/app/config"
	"erp/db/catalog"
	"erp/db/pgtest"
	"erp/demo"
	"erp/jobs/natstest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// documents are the Markdown files whose examples and links are checked,
// relative to this directory.
func documents(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.md")
	require.NoError(t, err)
	return append([]string{"../README.md"}, files...)
}

// block is one fenced code block of a Markdown file.
type block struct {
	line      int    // of the opening fence, 1-based
	lang      string // the fence's info string: graphql, sh, …
	body      string
	directive string // the text of a <!-- doctest: … --> comment on the line before the fence
}

// blocks returns the fenced code blocks of the Markdown text src.
func blocks(src string) []block {
	var out []block
	var cur *block
	var body []string
	prev := ""
	sc := bufio.NewScanner(strings.NewReader(src))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		fence := strings.HasPrefix(strings.TrimSpace(line), "```")
		switch {
		case cur == nil && fence:
			cur = &block{line: n, lang: strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "```"))}
			if d, ok := strings.CutPrefix(prev, "<!-- doctest:"); ok {
				cur.directive = strings.TrimSpace(strings.TrimSuffix(d, "-->"))
			}
			body = nil
		case cur != nil && fence:
			cur.body = strings.Join(body, "\n")
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			body = append(body, line)
		}
		if strings.TrimSpace(line) != "" {
			prev = strings.TrimSpace(line)
		}
	}
	return out
}

// operationStart is a line that begins an operation of a GraphQL block
// holding several (at the left margin, as the docs write them).
var operationStart = regexp.MustCompile(`^(query|mutation|subscription)\b|^\{`)

// operations splits a GraphQL block into its operations, one request each.
func operations(body string) []string {
	var ops []string
	for _, line := range strings.Split(body, "\n") {
		if operationStart.MatchString(line) || len(ops) == 0 {
			ops = append(ops, "")
		}
		ops[len(ops)-1] += line + "\n"
	}
	return ops
}

// receiverHost is how the docs name a webhook receiver: any host under
// .example (RFC 2606), replaced by a local receiver in the test.
var receiverHost = regexp.MustCompile(`https://[a-z0-9.-]+\.example`)

// TestExamples runs every shell and GraphQL example of the README and
// docs/ against a fresh server, one server per file and its blocks in the
// file's order, since a block may use what an earlier one wrote:
//
//   - a graphql block as the admin, each operation of it in turn; queries
//     and mutations must answer 200 without errors, a subscription must be
//     taken by the live feed;
//   - a sh block that is `make demo` replays the demo (package demo);
//     any other must be curl against localhost:8080, run by bash with the
//     server's address for localhost:8080 and .data/admin-token holding
//     the admin's token: it must exit 0, curl failing on a status >= 400,
//     and print no GraphQL errors.
//
// A comment on the line before a block changes that:
// <!-- doctest: skip: <why> --> (a block that cannot run in a test: make
// run, a second process, kill), <!-- doctest: demo --> (replay the demo
// first, once per file) and <!-- doctest: expect=CODE --> (the block shows
// an error: it must fail with extensions.code CODE). URLs on a host under
// .example reach a local receiver that answers 204.
func TestExamples(t *testing.T) {
	t.Parallel()
	for _, file := range documents(t) {
		src, err := os.ReadFile(file)
		require.NoError(t, err)
		bs := blocks(string(src))
		t.Run(filepath.Base(file), func(t *testing.T) {
			t.Parallel()
			runnable := false
			for _, b := range bs {
				runnable = runnable || isExample(b.lang) && !strings.HasPrefix(b.directive, "skip")
			}
			if !runnable {
				return
			}
			r := &runner{t: t, file: file}
			// Every server has a NATS server to publish to: nats.md's
			// examples make a NATS subscriber.
			nats := natstest.New(t)
			r.s = apptest.New(t, func(c *config.Config) { c.NatsURL = nats.URL })
			receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusNoContent)
			}))
			t.Cleanup(receiver.Close)
			r.receiver = receiver.URL
			for _, b := range bs {
				if !isExample(b.lang) {
					continue
				}
				r.run(b)
			}
		})
	}
}

// isExample reports whether a block of language lang is run.
func isExample(lang string) bool {
	switch lang {
	case "graphql", "sh", "bash", "shell":
		return true
	}
	return false
}

// runner runs one file's blocks on one server.
type runner struct {
	t        *testing.T
	file     string
	s        *apptest.Server
	receiver string // base URL standing for https://*.example
	demoDone bool
	ws       *apptest.WS // for the file's subscriptions, opened by the first
	subs     int
}

func (r *runner) errorf(b block, format string, args ...any) {
	r.t.Helper()
	r.t.Errorf("%s:%d: %s", r.file, b.line, fmt.Sprintf(format, args...))
}

func (r *runner) run(b block) {
	r.t.Helper()
	directive := b.directive
	if reason, ok := strings.CutPrefix(directive, "skip"); ok {
		if strings.TrimSpace(strings.TrimPrefix(reason, ":")) == "" {
			r.errorf(b, "doctest: skip needs a reason (<!-- doctest: skip: why -->)")
		}
		return
	}
	expect := ""
	for _, d := range strings.Fields(directive) {
		switch {
		case d == "demo":
			r.demo(b)
		case strings.HasPrefix(d, "expect="):
			expect = strings.TrimPrefix(d, "expect=")
		default:
			r.errorf(b, "unknown doctest directive %q (skip: why, demo, expect=CODE)", d)
			return
		}
	}
	if b.lang == "graphql" {
		for _, op := range operations(b.body) {
			r.graphql(b, receiverHost.ReplaceAllString(op, r.receiver), expect)
		}
		return
	}
	if strings.TrimSpace(b.body) == "make demo" {
		r.demo(b)
		return
	}
	r.shell(b)
}

// demo replays the seed's day once on the file's server.
func (r *runner) demo(b block) {
	if r.demoDone {
		return
	}
	r.demoDone = true
	if _, err := demo.Replay(r.t.Context(), r.s.URL+"/graphql", r.s.Token, io.Discard); err != nil {
		r.errorf(b, "make demo: %v", err)
	}
}

func (r *runner) graphql(b block, op, expect string) {
	r.t.Helper()
	if strings.HasPrefix(op, "subscription") {
		r.subscribe(b, op)
		return
	}
	status, res := r.s.Do(r.t, r.s.Token, op, nil)
	if expect != "" {
		if len(res.Errors) == 0 || res.Errors[0].Extensions["code"] != expect {
			r.errorf(b, "want error %s, got status %d, errors %v", expect, status, res.Errors)
		}
		return
	}
	if status != http.StatusOK || len(res.Errors) > 0 {
		r.errorf(b, "status %d, errors %v", status, res.Errors)
	}
}

// subscribe starts op on the file's websocket and waits until the live
// feed has taken it; a subscription the server refuses never gets there,
// and its error message is reported.
func (r *runner) subscribe(b block, op string) {
	r.t.Helper()
	if r.ws == nil {
		r.ws = apptest.DialWS(r.t, r.s, apptest.ProtoTransportWS)
		r.ws.Init(r.s.Token)
	}
	before := r.s.App.Feed().Subscribers()
	r.subs++
	r.ws.Subscribe(fmt.Sprint(r.subs), op, nil)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if r.s.App.Feed().Subscribers() > before {
			return
		}
	}
	m, err := r.ws.Read(time.Second)
	r.errorf(b, "the subscription was not taken by the live feed: %s %s (%v)", m.Type, m.Payload, err)
}

// shell runs a curl block with bash.
func (r *runner) shell(b block) {
	r.t.Helper()
	if !strings.Contains(b.body, "curl") || !strings.Contains(b.body, "localhost:8080") {
		r.errorf(b, "a shell block runs only as curl against localhost:8080; mark others <!-- doctest: skip: why -->")
		return
	}
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("CI") == "true" {
			r.t.Fatalf("%s:%d: curl is missing: install it (apt-get install curl)", r.file, b.line)
		}
		r.t.Skipf("%s:%d: curl is missing, so the curl examples are not run: install it (apt-get install curl)", r.file, b.line)
	}
	dir := r.t.TempDir()
	require.NoError(r.t, os.MkdirAll(filepath.Join(dir, ".data"), 0o700))
	require.NoError(r.t, os.WriteFile(filepath.Join(dir, ".data", "admin-token"), []byte(r.s.Token+"\n"), 0o600))
	script := "set -eo pipefail\ncurl() { command curl --fail-with-body \"$@\"; }\n" +
		strings.ReplaceAll(b.body, "localhost:8080", strings.TrimPrefix(r.s.URL, "http://"))
	cmd := exec.CommandContext(r.t.Context(), "bash", "-c", script)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		r.errorf(b, "%v: %s%s", err, stdout.Bytes(), stderr.Bytes())
		return
	}
	var res struct {
		Errors []any `json:"errors"`
	}
	if json.Unmarshal(stdout.Bytes(), &res) == nil && len(res.Errors) > 0 {
		r.errorf(b, "GraphQL errors: %s", stdout.Bytes())
	}
}

// typeRow is a row of events.md's table of event types: | `type` | … |.
var typeRow = regexp.MustCompile("^\\| `([a-z_.]+)` \\|")

// TestEventTypesTable: events.md's table of event types lists the
// catalog's types, each once, so that a new type cannot go undocumented.
func TestEventTypesTable(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("events.md")
	require.NoError(t, err)
	_, types, ok := strings.Cut(string(src), "\n## Types\n")
	require.True(t, ok, "events.md has a ## Types section")
	types, _, _ = strings.Cut(types, "\n## ")
	var listed []string
	for _, line := range strings.Split(types, "\n") {
		if m := typeRow.FindStringSubmatch(line); m != nil {
			listed = append(listed, m[1])
		}
	}
	slices.Sort(listed)
	require.Equal(t, catalog.Names(), listed)
}

// link is a Markdown link's target: [text](target).
var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestLinks: every relative link of the README and docs/ names a file of
// the repository, and a #fragment one of its headings.
func TestLinks(t *testing.T) {
	t.Parallel()
	for _, file := range documents(t) {
		src, err := os.ReadFile(file)
		require.NoError(t, err)
		for n, line := range strings.Split(string(src), "\n") {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, fragment, _ := strings.Cut(target, "#")
				if path == "" {
					path = file
				} else {
					path = filepath.Join(filepath.Dir(file), path)
				}
				got, err := os.ReadFile(path)
				if err != nil {
					t.Errorf("%s:%d: link %s: %v", file, n+1, target, err)
					continue
				}
				if fragment != "" && strings.HasSuffix(path, ".md") && !anchors(string(got))[fragment] {
					t.Errorf("%s:%d: link %s: %s has no heading #%s", file, n+1, target, path, fragment)
				}
			}
		}
	}
}

// anchors are the fragments GitHub gives the headings of Markdown text:
// lower case, punctuation dropped, spaces as hyphens.
func anchors(src string) map[string]bool {
	out := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(src, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
		}
		heading, ok := strings.CutPrefix(line, "#")
		if inFence || !ok {
			continue
		}
		heading = strings.TrimSpace(strings.TrimLeft(heading, "#"))
		var slug strings.Builder
		for _, c := range strings.ToLower(heading) {
			switch {
			case c == ' ':
				slug.WriteRune('-')
			case c == '-' || c == '_' || unicode.IsLetter(c) || unicode.IsDigit(c):
				slug.WriteRune(c)
			}
		}
		out[slug.String()] = true
	}
	return out
}
