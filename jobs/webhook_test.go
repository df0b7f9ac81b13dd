package jobs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"
)

// The receivers below are real HTTP servers (httptest): the receiver is a
// third party, the only thing these tests fake.

// testSecret is a Standard Webhooks secret: whsec_ + base64 of 32 bytes.
const testSecret = "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="

// webhookClock is the fixed "now" of senders and receivers in these tests.
var webhookClock = time.Date(2026, 3, 2, 9, 30, 0, 0, time.UTC)

func newTestSender() *WebhookSender {
	s := NewWebhookSender()
	s.now = func() time.Time { return webhookClock }
	return s
}

type receivedWebhook struct {
	method string
	header http.Header
	body   []byte
}

// webhookReceiver records every request, then answers it with handle.
type webhookReceiver struct {
	srv      *httptest.Server
	mu       sync.Mutex
	requests []receivedWebhook
}

func newWebhookReceiver(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, body []byte)) *webhookReceiver {
	t.Helper()
	rec := &webhookReceiver{}
	rec.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rec.mu.Lock()
		rec.requests = append(rec.requests, receivedWebhook{method: r.Method, header: r.Header.Clone(), body: body})
		rec.mu.Unlock()
		handle(w, r, body)
	}))
	t.Cleanup(rec.srv.Close)
	return rec
}

func (rec *webhookReceiver) received() []receivedWebhook {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]receivedWebhook(nil), rec.requests...)
}

// host is how errors name the receiver: "127.0.0.1:port".
func (rec *webhookReceiver) host() string { return rec.srv.Listener.Addr().String() }

func TestWebhookSendDelivers(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("0123456789abcdef", 320) // 5120 bytes
	cutRune := strings.Repeat("a", MaxWebhookBody-1) + "жж"
	tests := []struct {
		name     string
		status   int
		answer   string
		secret   string
		wantBody string
	}{
		{name: "200 with body", status: 200, answer: `{"ok":true}`, secret: testSecret, wantBody: `{"ok":true}`},
		{name: "201 unsigned", status: 201, answer: "created", wantBody: "created"},
		{name: "204 no body", status: 204, secret: testSecret, wantBody: ""},
		{name: "body capped", status: 200, answer: long, wantBody: long[:MaxWebhookBody]},
		{name: "cap cuts a character", status: 202, answer: cutRune, wantBody: cutRune[:MaxWebhookBody-1]},
		{name: "invalid utf-8", status: 200, answer: "ok\xff\xfe", wantBody: "ok\uFFFD\uFFFD"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := newWebhookReceiver(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.answer)
			})
			payload := []byte(`{"id":46,"no":"ВЦ-2026-000045","entity":"wh_move"}`)
			res := newTestSender().Send(t.Context(), WebhookConfig{URL: rec.srv.URL + "/hooks/erp?x=1", Secret: tt.secret}, 46, payload)

			require.NoError(t, res.Err)
			require.False(t, res.Permanent)
			require.Equal(t, tt.status, res.Status)
			require.Equal(t, tt.wantBody, res.Body)
			require.LessOrEqual(t, len(res.Body), MaxWebhookBody)
			require.True(t, utf8.ValidString(res.Body))
			require.Zero(t, res.RetryAfter)
			require.Positive(t, res.Duration)

			got := rec.received()
			require.Len(t, got, 1)
			require.Equal(t, http.MethodPost, got[0].method)
			require.Equal(t, payload, got[0].body)
			h := got[0].header
			require.Equal(t, "application/json", h.Get("Content-Type"))
			require.Equal(t, "erp-webhook/1", h.Get("User-Agent"))
			require.Equal(t, "46", h.Get(HeaderEventID))
			require.Equal(t, strconv.FormatInt(webhookClock.Unix(), 10), h.Get(HeaderWebhookTimestamp))
			if tt.secret == "" {
				require.Empty(t, h.Values(HeaderWebhookSignature), "no secret, no signature")
			} else {
				wh, err := standardwebhooks.NewWebhook(tt.secret)
				require.NoError(t, err)
				require.NoError(t, wh.VerifyIgnoringTimestamp(payload, h))
			}
		})
	}
}

func TestWebhookReceiverDeduplicatesByEventID(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	processed := map[string]int{} // event id → times the receiver acted on it
	rec := newWebhookReceiver(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		id := r.Header.Get(HeaderEventID)
		mu.Lock()
		defer mu.Unlock()
		if _, seen := processed[id]; seen {
			_, _ = io.WriteString(w, "duplicate") // acknowledged, not acted on again
			return
		}
		processed[id]++
		_, _ = io.WriteString(w, "processed")
	})
	sender := newTestSender()
	cfg := WebhookConfig{URL: rec.srv.URL, Secret: "s"}
	payload := []byte(`{"id":46}`)

	first := sender.Send(t.Context(), cfg, 46, payload)
	retry := sender.Send(t.Context(), cfg, 46, payload) // e.g. our record of the first was lost
	require.NoError(t, first.Err)
	require.NoError(t, retry.Err)
	require.Equal(t, "processed", first.Body)
	require.Equal(t, "duplicate", retry.Body)

	got := rec.received()
	require.Len(t, got, 2)
	require.Equal(t, got[0].header.Get(HeaderEventID), got[1].header.Get(HeaderEventID))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]int{"46": 1}, processed)
}

func TestWebhookStatusClassification(t *testing.T) {
	t.Parallel()
	rec := newWebhookReceiver(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		code, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		w.WriteHeader(code)
		if code != 418 {
			_, _ = fmt.Fprintf(w, "receiver\n  says %d", code)
		}
	})
	tests := []struct {
		status    int
		permanent bool
	}{
		{400, true}, {401, true}, {403, true}, {404, true}, {410, true}, {413, true}, {422, true},
		{408, false}, {429, false},
		{500, false}, {502, false}, {503, false}, {504, false},
		{418, true}, // no body: the status text stands in
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.status), func(t *testing.T) {
			t.Parallel()
			res := newTestSender().Send(t.Context(), WebhookConfig{URL: fmt.Sprintf("%s/%d", rec.srv.URL, tt.status)}, 1, []byte(`{}`))
			require.Equal(t, tt.status, res.Status)
			require.Equal(t, tt.permanent, res.Permanent)
			want := fmt.Sprintf("webhook %s answered %d: receiver says %d", rec.host(), tt.status, tt.status)
			if tt.status == 418 {
				want = fmt.Sprintf("webhook %s answered 418: i'm a teapot", rec.host())
			}
			require.EqualError(t, res.Err, want)
		})
	}
}

func TestWebhookRetryAfter(t *testing.T) {
	t.Parallel()
	rec := newWebhookReceiver(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		code, _ := strconv.Atoi(r.URL.Query().Get("status"))
		if v := r.URL.Query().Get("retry_after"); v != "" {
			w.Header().Set("Retry-After", v)
		}
		w.WriteHeader(code)
	})
	date := func(d time.Duration) string { return webhookClock.Add(d).Format(http.TimeFormat) }
	tests := []struct {
		name       string
		status     int
		retryAfter string
		want       time.Duration
	}{
		{name: "429 seconds", status: 429, retryAfter: "7", want: 7 * time.Second},
		{name: "503 seconds", status: 503, retryAfter: "120", want: 2 * time.Minute},
		{name: "429 zero", status: 429, retryAfter: "0", want: 0},
		{name: "429 http-date", status: 429, retryAfter: date(90 * time.Second), want: 90 * time.Second},
		{name: "503 rfc850 date", status: 503, retryAfter: webhookClock.Add(time.Minute).Format(time.RFC850), want: time.Minute},
		{name: "503 date in the past", status: 503, retryAfter: date(-time.Minute), want: 0},
		{name: "429 date capped", status: 429, retryAfter: date(48 * time.Hour), want: time.Hour},
		{name: "503 seconds capped", status: 503, retryAfter: "86400", want: time.Hour},
		{name: "429 seconds overflow", status: 429, retryAfter: "99999999999999999999999", want: time.Hour},
		{name: "429 negative", status: 429, retryAfter: "-5", want: 0},
		{name: "429 fraction", status: 429, retryAfter: "1.5", want: 0},
		{name: "429 garbage", status: 429, retryAfter: "soon", want: 0},
		{name: "429 absent", status: 429, want: 0},
		{name: "500 ignored", status: 500, retryAfter: "7", want: 0},
		{name: "404 ignored", status: 404, retryAfter: "7", want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			target := fmt.Sprintf("%s/?status=%d&retry_after=%s", rec.srv.URL, tt.status, url.QueryEscape(tt.retryAfter))
			res := newTestSender().Send(t.Context(), WebhookConfig{URL: target}, 1, nil)
			require.Equal(t, tt.status, res.Status)
			require.Error(t, res.Err)
			require.Equal(t, tt.want, res.RetryAfter)
		})
	}
}

func TestWebhookRedirectsAreNotFollowed(t *testing.T) {
	t.Parallel()
	internal := newWebhookReceiver(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {})
	tests := []struct {
		status int
		to     string // "" = a loop onto itself
	}{
		{status: 301}, {status: 302}, {status: 303}, {status: 307}, {status: 308},
		{status: 302, to: internal.srv.URL + "/admin?token=secret"},
	}
	t.Run("statuses", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%d to %q", tt.status, tt.to), func(t *testing.T) {
				t.Parallel()
				var rec *webhookReceiver
				rec = newWebhookReceiver(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
					to := tt.to
					if to == "" {
						to = rec.srv.URL + r.URL.Path
					}
					http.Redirect(w, r, to, tt.status)
				})
				res := newTestSender().Send(t.Context(), WebhookConfig{URL: rec.srv.URL + "/hook"}, 1, []byte(`{}`))
				require.Equal(t, tt.status, res.Status)
				require.True(t, res.Permanent)
				require.ErrorContains(t, res.Err, fmt.Sprintf("webhook %s answered %d: redirects are not followed", rec.host(), tt.status))
				require.NotContains(t, res.Err.Error(), "token", "the target's path and query are not quoted")
				require.Len(t, rec.received(), 1)
			})
		}
	})
	require.Empty(t, internal.received(), "a redirect target must never be requested")
}

func TestWebhookUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now

	res := newTestSender().Send(t.Context(), WebhookConfig{URL: "http://" + addr + "/hook"}, 1, []byte(`{}`))
	require.Zero(t, res.Status)
	require.False(t, res.Permanent)
	require.EqualError(t, res.Err, "webhook "+addr+" unreachable: connection refused")
	require.ErrorIs(t, res.Err, syscall.ECONNREFUSED)
}

func TestWebhookTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 200 * time.Millisecond
	tests := []struct {
		name       string
		status     int    // 0 = no answer at all
		wantStatus int    // what Send reports
		wantBody   string // what Send reports
		wantErr    string // "" = success; %s = host
	}{
		{name: "no answer", wantErr: "webhook %s timed out after 200ms"},
		{name: "500 then body stalls", status: 500, wantStatus: 500, wantBody: "partial", wantErr: "webhook %s answered 500: partial"},
		{name: "200 then body stalls", status: 200, wantStatus: 200, wantBody: "partial"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			release := make(chan struct{})
			rec := newWebhookReceiver(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
				if tt.status != 0 {
					w.WriteHeader(tt.status)
					_, _ = io.WriteString(w, "partial")
					w.(http.Flusher).Flush()
				}
				select { // a receiver that hangs until the sender gives up
				case <-r.Context().Done():
				case <-release:
				}
			})
			t.Cleanup(func() { close(release) }) // runs before the server's Close

			res := newTestSender().Send(t.Context(), WebhookConfig{URL: rec.srv.URL, Timeout: timeout}, 1, []byte(`{}`))
			require.Equal(t, tt.wantStatus, res.Status)
			require.Equal(t, tt.wantBody, res.Body)
			require.False(t, res.Permanent)
			require.GreaterOrEqual(t, res.Duration, timeout)
			if tt.wantErr == "" {
				require.NoError(t, res.Err, "the receiver answered 2xx: the stalled body does not undo that")
				return
			}
			require.EqualError(t, res.Err, fmt.Sprintf(tt.wantErr, rec.host()))
			if tt.status == 0 {
				require.ErrorIs(t, res.Err, context.DeadlineExceeded)
			}
		})
	}
}

func TestWebhookCallerContextEnded(t *testing.T) {
	t.Parallel()
	rec := newWebhookReceiver(t, func(http.ResponseWriter, *http.Request, []byte) {})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	res := newTestSender().Send(ctx, WebhookConfig{URL: rec.srv.URL, Timeout: time.Second}, 1, nil)
	require.ErrorIs(t, res.Err, context.Canceled)
	require.EqualError(t, res.Err, fmt.Sprintf("webhook %s interrupted: context canceled", rec.host()))
	require.False(t, res.Permanent)
	require.NotContains(t, res.Err.Error(), "timed out", "the caller stopped it; the receiver was not slow")
}

// TestWebhookLargeResponseIsNotReadWhole is not parallel: it measures the
// process's allocations, which other tests running alongside would inflate.
func TestWebhookLargeResponseIsNotReadWhole(t *testing.T) {
	const size = 10 << 20
	chunk := bytes.Repeat([]byte("x"), 32<<10)
	written := make(chan int, 1)
	rec := newWebhookReceiver(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		n := 0
		for n < size {
			m, err := w.Write(chunk)
			n += m
			if err != nil {
				break // the sender hung up
			}
			w.(http.Flusher).Flush()
		}
		written <- n
	})
	cfg := WebhookConfig{URL: rec.srv.URL, Timeout: 10 * time.Second}
	sender := newTestSender()

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res := sender.Send(t.Context(), cfg, 1, []byte(`{}`))
	runtime.ReadMemStats(&after)

	require.NoError(t, res.Err)
	require.Equal(t, http.StatusOK, res.Status)
	require.Len(t, res.Body, MaxWebhookBody)
	require.Less(t, res.Duration, cfg.Timeout, "the rest of the body must not be waited for")
	allocated := after.TotalAlloc - before.TotalAlloc
	require.Less(t, allocated, uint64(2<<20), "Send (and the receiver) allocated %d bytes for a %d-byte answer", allocated, size)
	select {
	case n := <-written:
		require.Less(t, n, size, "the receiver could send the whole body: the sender kept reading")
	case <-time.After(10 * time.Second):
		t.Fatal("the receiver is still writing: the sender did not close the connection")
	}
}

func TestWebhookInvalidURLIsPermanentWithoutRequest(t *testing.T) {
	t.Parallel()
	rec := newWebhookReceiver(t, func(http.ResponseWriter, *http.Request, []byte) {})
	addr := rec.host()
	tests := []struct {
		url     string
		wantErr string
	}{
		{"ftp://" + addr + "/hook", `webhook url scheme "ftp" is not allowed: only http and https`},
		{"file:///etc/passwd", `webhook url scheme "file" is not allowed`},
		{"javascript:alert(1)", `webhook url scheme "javascript" is not allowed`},
		{"gopher://" + addr, `webhook url scheme "gopher" is not allowed`},
		{"//" + addr + "/hook", "webhook url must be absolute"},
		{addr + "/hook", "webhook url is invalid: first path segment in URL cannot contain colon"},
		{"http://user:hunter2@" + addr + "/hook", "webhook url for 127.0.0.1 must not contain credentials"},
		{"", "webhook url is empty"},
	}
	t.Run("urls", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.url, func(t *testing.T) {
				t.Parallel()
				res := newTestSender().Send(t.Context(), WebhookConfig{URL: tt.url, Secret: "s"}, 1, []byte(`{}`))
				require.True(t, res.Permanent)
				require.Zero(t, res.Status)
				require.ErrorContains(t, res.Err, tt.wantErr)
				require.NotContains(t, res.Err.Error(), "hunter2", "credentials are not echoed")
			})
		}
	})
	require.Empty(t, rec.received(), "no request may be made for an invalid URL")
}

func TestValidateWebhookURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url     string
		wantErr string // "" = valid
	}{
		{url: "http://example.com/hook"},
		{url: "https://example.com"},
		{url: "https://example.com:8443/a/b?token=x"},
		{url: "https://example.com:8443/a/b?token=x#frag", wantErr: "webhook url has a #fragment, which is never sent"},
		{url: "https://example.com/#", wantErr: "#fragment"},
		{url: "HTTPS://Example.COM/hook"},
		{url: "http://127.0.0.1:1234/"},
		{url: "http://[::1]:8080/hook"},
		{url: "https://пример.рф/hook"},
		{url: "", wantErr: "webhook url is empty"},
		{url: "/hook", wantErr: "webhook url must be absolute"},
		{url: "example.com/hook", wantErr: "webhook url must be absolute"},
		{url: "//example.com/hook", wantErr: "webhook url must be absolute"},
		{url: "ftp://example.com/hook", wantErr: `scheme "ftp" is not allowed: only http and https`},
		{url: "file:///etc/passwd", wantErr: `scheme "file" is not allowed`},
		{url: "javascript:alert(1)", wantErr: `scheme "javascript" is not allowed`},
		{url: "mailto:ops@example.com", wantErr: `scheme "mailto" is not allowed`},
		{url: "localhost:8080", wantErr: `scheme "localhost" is not allowed`},
		{url: "http://", wantErr: "webhook url has no host"},
		{url: "http:///hook", wantErr: "webhook url has no host"},
		{url: "http://:8080/hook", wantErr: "webhook url has no host"},
		{url: "http:example.com", wantErr: "webhook url has no host"},
		{url: "http://user:hunter2@example.com/hook", wantErr: "webhook url for example.com must not contain credentials"},
		{url: "http://hunter2@example.com/hook", wantErr: "must not contain credentials"},
		{url: "http://example.com:0/", wantErr: `webhook url port "0" is not in 1-65535`},
		{url: "http://example.com:99999/", wantErr: `webhook url port "99999" is not in 1-65535`},
		{url: "http://example.com:http/", wantErr: "webhook url is invalid: invalid port"},
		{url: "http://exa mple.com/", wantErr: "webhook url contains whitespace"},
		{url: "http://example.com/\n", wantErr: "webhook url contains whitespace"},
		{url: " http://example.com/", wantErr: "webhook url contains whitespace"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			t.Parallel()
			err := ValidateWebhookURL(tt.url)
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
			require.NotContains(t, err.Error(), "hunter2", "credentials are not echoed")
		})
	}
}

func TestWebhookSendNeverPanics(t *testing.T) {
	t.Parallel()
	rec := newWebhookReceiver(t, func(http.ResponseWriter, *http.Request, []byte) {})
	var nilCtx context.Context
	tests := []struct {
		name    string
		sender  *WebhookSender
		ctx     context.Context
		cfg     WebhookConfig
		wantErr string // "" = success
	}{
		{name: "nil sender", sender: nil, ctx: t.Context(), cfg: WebhookConfig{URL: rec.srv.URL}, wantErr: "not created by NewWebhookSender"},
		{name: "zero sender", sender: &WebhookSender{}, ctx: t.Context(), cfg: WebhookConfig{URL: rec.srv.URL}, wantErr: "not created by NewWebhookSender"},
		{name: "nil context", sender: NewWebhookSender(), ctx: nilCtx, cfg: WebhookConfig{URL: rec.srv.URL}, wantErr: "nil context"},
		{name: "negative timeout", sender: NewWebhookSender(), ctx: t.Context(), cfg: WebhookConfig{URL: rec.srv.URL, Timeout: -time.Second}},
		{name: "huge timeout", sender: NewWebhookSender(), ctx: t.Context(), cfg: WebhookConfig{URL: rec.srv.URL, Timeout: 1<<63 - 1}},
		{name: "percent garbage", sender: NewWebhookSender(), ctx: t.Context(), cfg: WebhookConfig{URL: "http://%zz"}, wantErr: "webhook url is invalid"},
		{name: "fragment stored before they were refused", sender: NewWebhookSender(), ctx: t.Context(), cfg: WebhookConfig{URL: rec.srv.URL + "/#old"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var res WebhookResult
			require.NotPanics(t, func() { res = tt.sender.Send(tt.ctx, tt.cfg, -1, nil) })
			if tt.wantErr == "" {
				require.NoError(t, res.Err)
				return
			}
			require.ErrorContains(t, res.Err, tt.wantErr)
		})
	}
}

func TestWebhookBodyText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		in    string
		limit int
		want  string
	}{
		{name: "ascii", in: "hello", limit: 8, want: "hello"},
		{name: "exactly the limit", in: "12345678", limit: 8, want: "12345678"},
		{name: "over the limit", in: "123456789", limit: 8, want: "12345678"},
		{name: "cyrillic fits", in: "ЗК-01", limit: 8, want: "ЗК-01"},
		{name: "character cut by the limit", in: "1234567ж", limit: 8, want: "1234567"},
		{name: "4-byte character cut", in: "12345😀", limit: 8, want: "12345"},
		{name: "invalid byte replaced", in: "a\xffb", limit: 8, want: "a\uFFFDb"},
		{name: "replacement stops at the limit", in: "\xff\xff\xff", limit: 8, want: "\uFFFD\uFFFD"},
		{name: "truncated rune before the end", in: "a\xe2\x82b", limit: 8, want: "a\uFFFD\uFFFDb"},
		{name: "empty", in: "", limit: 8, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := []byte(tt.in)
			if len(in) > tt.limit {
				in = in[:tt.limit] // as io.LimitReader hands it over
			}
			got := webhookBodyText(in, tt.limit)
			require.Equal(t, tt.want, got)
		})
	}
}

func FuzzWebhookBodyText(f *testing.F) {
	for _, seed := range []string{"", "ok", "1234567ж", "\xff\xfe", "a\xe2\x82", strings.Repeat("ж", 3000)} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > MaxWebhookBody {
			b = b[:MaxWebhookBody]
		}
		got := webhookBodyText(b, MaxWebhookBody)
		if !utf8.ValidString(got) || len(got) > MaxWebhookBody {
			t.Fatalf("webhookBodyText(%q) = %q: invalid or %d bytes", b, got, len(got))
		}
		if utf8.Valid(b) && got != string(b) {
			t.Fatalf("valid input %q changed to %q", b, got)
		}
	})
}

func FuzzValidateWebhookURL(f *testing.F) {
	for _, seed := range []string{"http://example.com", "ftp://x", "http://u:p@h", "http://[::1", "http://h:99999", "javascript:x", "%"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if ValidateWebhookURL(raw) != nil {
			return
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil {
			t.Fatalf("accepted %q", raw)
		}
	})
}
