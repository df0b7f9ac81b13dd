package jobs

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"
)

// MaxWebhookBody is how many bytes (4 KiB) of a receiver's response body Send
// reads and keeps; the rest is never read: the connection is closed instead.
const MaxWebhookBody = 4096

// Headers of every webhook request besides the Standard Webhooks ones
// (HeaderWebhookID, HeaderWebhookTimestamp, HeaderWebhookSignature), which
// are how a receiver de-duplicates and authenticates a request.
const (
	// HeaderEventID is the journal event id, in decimal; a retry carries the
	// same one.
	HeaderEventID = "X-Erp-Event-Id"
	// HeaderTest is "true" on a catalog example sent by sendExampleEvent
	// (its HeaderEventID is 0): no journal event stands behind it.
	HeaderTest = "X-Erp-Test"
)

const (
	// defaultWebhookTimeout is used when WebhookConfig.Timeout is not positive.
	defaultWebhookTimeout = 10 * time.Second
	// maxWebhookTimeout caps WebhookConfig.Timeout. It is also the
	// transport's ResponseHeaderTimeout, so the per-request deadline
	// (cfg.Timeout, never longer) is always the one that bounds the wait.
	maxWebhookTimeout = 2 * time.Minute
	// maxRetryAfter caps WebhookResult.RetryAfter: a receiver cannot park a
	// subscriber for days with one header.
	maxRetryAfter = time.Hour
	// webhookErrorBody is how many bytes of the response body an error quotes.
	webhookErrorBody = 200

	webhookUserAgent = "erp-webhook/1"
)

// errWebhookTimeout is the cause of a request context whose own deadline
// (cfg.Timeout) passed, telling it apart from the caller's context ending.
// It wraps context.DeadlineExceeded, so callers can test for that.
var errWebhookTimeout = fmt.Errorf("webhook timeout: %w", context.DeadlineExceeded)

// WebhookConfig is one webhook subscriber's endpoint.
type WebhookConfig struct {
	// URL is an absolute http or https URL with a host and no user:password@
	// (see ValidateWebhookURL).
	URL string
	// Secret signs the request (HeaderWebhookSignature); when empty the
	// request is not signed. It should be
	// of the whsec_<base64> form (ValidateWebhookSecret); any other secret
	// signs with its raw bytes.
	Secret string
	// PreviousSecret, when set with Secret, signs the request too: during a
	// rotation's grace period HeaderWebhookSignature carries both
	// signatures, space-separated (new first), so a receiver still holding
	// the old secret verifies it as well as one holding the new.
	PreviousSecret string
	// MessageID is HeaderWebhookID and the CloudEvents id: the delivery's
	// stable id, the same at every attempt (WebhookMessageID). Empty means
	// "evt_<event id>".
	MessageID string
	// Format is the body's shape; empty means WebhookFormatStandard.
	Format WebhookFormat
	// Event names the event for envelopes that carry it (CloudEvents:
	// type, subject, time, dataschema); the standard format does not use
	// it, but for Event.Example (HeaderTest).
	Event WebhookEvent
	// Timeout bounds the whole request: connecting, sending, waiting for the
	// answer and reading the capped body. Zero or negative means 10 s; more
	// than 2 min is cut to 2 min.
	Timeout time.Duration
}

// WebhookResult is the outcome of one POST.
type WebhookResult struct {
	// Status is the HTTP status code; 0 when no response arrived.
	Status int
	// Body is the first MaxWebhookBody bytes of the response body as valid
	// UTF-8: a character cut by the cap is dropped, invalid bytes become
	// U+FFFD, and the result is never longer than MaxWebhookBody bytes.
	Body string
	// Duration is the time from starting the request (its Timeout runs from
	// the same instant) to having read Body; a timed-out request's Duration
	// is never shorter than its Timeout.
	Duration time.Duration
	// Err is nil only for a 2xx answer. Its message names the URL's host
	// (with port) and the status or the network failure.
	Err error
	// Permanent reports that retrying cannot help: an invalid URL or scheme
	// (no request is made), a 3xx (redirects are never followed, against
	// SSRF and loops) or a 4xx other than 408 and 429.
	Permanent bool
	// RetryAfter is the delay a 429 or 503 asked for in Retry-After (seconds
	// or an HTTP-date), capped at 1 h; 0 when absent, invalid or in the past.
	RetryAfter time.Duration
}

// WebhookSender posts events to webhook subscribers. It is safe for
// concurrent use; create one with NewWebhookSender and reuse it, so that
// connections to a subscriber are kept alive between events.
type WebhookSender struct {
	client *http.Client
	// guard checks URLs and, unless it allows private addresses, every
	// address the client connects to.
	guard *webhookGuard
	// source is the CloudEvents source.
	source string
	// now is the clock for the timestamp headers and Retry-After dates;
	// tests replace it. Durations are measured with the monotonic clock.
	now func() time.Time
}

// WebhookSenderOption configures NewWebhookSender.
type WebhookSenderOption func(*webhookSenderOptions)

type webhookSenderOptions struct {
	allowPrivate   bool
	resolver       WebhookResolver
	dialer         WebhookDialer
	source         string
	tracerProvider trace.TracerProvider
}

// WithAllowPrivate sets whether the sender may connect to any address; it
// is meant to carry the WEBHOOK_ALLOW_PRIVATE setting. With false the
// address guard is on: the sender connects only to addresses
// CheckWebhookURL accepts, checked on the address it connects to at every
// connection (so DNS rebinding gains nothing), and it uses no proxy (the
// proxy, not the sender, would pick the address). A refused address is a
// Permanent WebhookResult whose Err matches ErrWebhookAddressRefused, and no
// packet is sent. With true, for on-premise receivers and tests, and for a
// sender given no WithAllowPrivate at all, it connects anywhere, through the
// environment's proxy (HTTP_PROXY, HTTPS_PROXY, NO_PROXY).
func WithAllowPrivate(allow bool) WebhookSenderOption {
	return func(o *webhookSenderOptions) { o.allowPrivate = allow }
}

// WithWebhookResolver makes the guard resolve names with r instead of the
// system resolver (tests stub it). Without the guard it is not used.
func WithWebhookResolver(r WebhookResolver) WebhookSenderOption {
	return func(o *webhookSenderOptions) { o.resolver = r }
}

// WithWebhookDialer makes the sender connect with d instead of a
// net.Dialer (10 s connect timeout, 30 s keep-alive); behind the guard d
// only gets "ip:port" addresses that the guard allowed. Tests stub it.
func WithWebhookDialer(d WebhookDialer) WebhookSenderOption {
	return func(o *webhookSenderOptions) { o.dialer = d }
}

// WithCloudEventsSource sets the source attribute of CloudEvents requests,
// a URI-reference; "/erp" when not given or empty.
func WithCloudEventsSource(source string) WebhookSenderOption {
	return func(o *webhookSenderOptions) { o.source = source }
}

// NewWebhookSender returns a sender whose HTTP client never follows
// redirects and whose transport bounds every phase of a request; see the
// options for the address guard, the resolver, the dialer and the
// CloudEvents source.
func NewWebhookSender(opts ...WebhookSenderOption) *WebhookSender {
	// Unguarded unless asked: the dispatcher's own default sender and the
	// tests that build one deliver to receivers on loopback.
	o := webhookSenderOptions{allowPrivate: true, source: defaultCloudEventsSource}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.source == "" {
		o.source = defaultCloudEventsSource
	}
	guard := &webhookGuard{allowPrivate: o.allowPrivate, resolver: o.resolver}
	netDialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	proxy := http.ProxyFromEnvironment
	if !o.allowPrivate {
		netDialer.Control = guard.control
		proxy = nil
	}
	guard.dialer = netDialer
	if o.dialer != nil {
		guard.dialer = o.dialer
	}
	dial := guard.dialer.DialContext
	if !o.allowPrivate {
		dial = guard.dialContext
	}
	transport := &http.Transport{
		Proxy:                  proxy,
		DialContext:            dial,
		ForceAttemptHTTP2:      true,
		TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    10 * time.Second,
		ResponseHeaderTimeout:  maxWebhookTimeout,
		ExpectContinueTimeout:  time.Second,
		MaxIdleConns:           100,
		MaxIdleConnsPerHost:    16,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
	var rt http.RoundTripper = transport
	if o.tracerProvider != nil {
		rt = tracedTransport(transport, o.tracerProvider)
	}
	return &WebhookSender{
		client: &http.Client{
			Transport: rt,
			// A redirect is answered as it is: following it could reach an
			// internal address (SSRF) or loop.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		guard:  guard,
		source: o.source,
		now:    time.Now,
	}
}

// CheckURL is CheckWebhookURL with the sender's resolver, and only
// ValidateWebhookURL when the sender allows private addresses: the check to
// run when a webhook's URL is created or changed, so that a URL the sender
// would refuse is refused then already.
func (s *WebhookSender) CheckURL(ctx context.Context, rawURL string) error {
	if s == nil || s.guard == nil {
		return errors.New("webhook sender not created by NewWebhookSender")
	}
	return s.guard.checkURL(ctx, rawURL)
}

// Send POSTs body (the event as JSON, in cfg.Format's envelope) to cfg.URL
// with the Standard Webhooks headers (id, timestamp and, when cfg.Secret is
// set, signature: two during a rotation, see WebhookConfig.PreviousSecret) and HeaderEventID, and reports the outcome; it never panics and never
// follows a redirect. Errors are in the result, see WebhookResult: an
// invalid URL, an unknown format or an event the format cannot encode, and
// an address the guard refuses are Permanent and send nothing; a timeout ("webhook example.com timed out after 10s"), an
// unreachable host, a 408, 429, 5xx or the end of ctx are transient. A 2xx
// is a success even if reading its body then failed: the receiver has
// answered, and Body holds what was read.
func (s *WebhookSender) Send(ctx context.Context, cfg WebhookConfig, eventID int64, body []byte) WebhookResult {
	if s == nil || s.client == nil || s.now == nil || s.guard == nil {
		return WebhookResult{Err: errors.New("webhook sender not created by NewWebhookSender")}
	}
	if ctx == nil {
		return WebhookResult{Err: errors.New("webhook send: nil context")}
	}
	// A URL stored before fragments were refused still delivers: HTTP
	// never sends the fragment anyway.
	cfg.URL, _, _ = strings.Cut(cfg.URL, "#")
	if err := ValidateWebhookURL(cfg.URL); err != nil {
		return WebhookResult{Err: err, Permanent: true}
	}
	u, err := url.Parse(cfg.URL)
	if err != nil { // unreachable: ValidateWebhookURL parsed it
		return WebhookResult{Err: fmt.Errorf("webhook url is invalid: %w", err), Permanent: true}
	}
	host := u.Host

	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = defaultWebhookTimeout
	}
	timeout = min(timeout, maxWebhookTimeout)
	msgID := cfg.MessageID
	if msgID == "" {
		msgID = "evt_" + strconv.FormatInt(eventID, 10)
	}
	payload, contentType, err := webhookPayload(cfg.Format, s.source, msgID, cfg.Event, body)
	if err != nil {
		return WebhookResult{Err: err, Permanent: true}
	}
	timestamp := s.now().Unix()
	var signature string
	if cfg.Secret != "" {
		signature, err = webhookSignature(cfg.Secret, cfg.PreviousSecret, msgID, time.Unix(timestamp, 0), payload)
		if err != nil { // unreachable: a raw key always signs
			return WebhookResult{Err: fmt.Errorf("webhook %s: sign: %w", host, err), Permanent: true}
		}
	}

	start := time.Now() // before the deadline's clock starts: Duration ≥ timeout on a timeout
	reqCtx, cancel := context.WithTimeoutCause(ctx, timeout, errWebhookTimeout)
	defer cancel()

	req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, cfg.URL, bytes.NewReader(payload))
	if err != nil {
		return WebhookResult{Err: fmt.Errorf("webhook %s: build request: %w", host, err), Permanent: true}
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("User-Agent", webhookUserAgent)
	req.Header.Set(HeaderWebhookID, msgID)
	req.Header.Set(HeaderWebhookTimestamp, strconv.FormatInt(timestamp, 10))
	req.Header.Set(HeaderEventID, strconv.FormatInt(eventID, 10))
	if cfg.Secret != "" {
		req.Header.Set(HeaderWebhookSignature, signature)
	}
	if cfg.Event.Example {
		req.Header.Set(HeaderTest, "true")
	}

	resp, err := s.client.Do(req)
	if err != nil {
		// A refused address stays refused: retrying cannot help.
		refused := errors.Is(err, ErrWebhookAddressRefused) && reqCtx.Err() == nil
		return WebhookResult{Duration: time.Since(start), Err: webhookRequestError(reqCtx, host, timeout, err), Permanent: refused}
	}
	// The read error is deliberately dropped: a 2xx stays a success and any
	// other status is an error anyway; Body holds what arrived.
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, MaxWebhookBody))
	// Closing a body that was not read to its end closes the connection
	// instead of draining it: a huge or endless answer costs nothing more.
	_ = resp.Body.Close()
	res := WebhookResult{
		Status:   resp.StatusCode,
		Body:     webhookBodyText(raw, MaxWebhookBody),
		Duration: time.Since(start),
	}

	code := resp.StatusCode
	switch {
	case code >= 200 && code <= 299:
		return res
	case code >= 300 && code <= 399:
		res.Err = fmt.Errorf("webhook %s answered %d: redirects are not followed%s", host, code, webhookLocation(resp))
		res.Permanent = true
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests:
		res.Err = webhookStatusError(host, code, res.Body)
	case code >= 400 && code <= 499:
		res.Err = webhookStatusError(host, code, res.Body)
		res.Permanent = true
	default: // 5xx, and codes no receiver should send (1xx, 6xx…): worth a retry
		res.Err = webhookStatusError(host, code, res.Body)
	}
	if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
		res.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), s.now())
	}
	return res
}

// ValidateWebhookURL reports whether raw can be a webhook endpoint: an
// absolute http or https URL with a host, a port (if any) in 1-65535, no
// user:password@, no #fragment, no raw whitespace and that normalised (see
// NormalizeWebhookURL) still parses. The error names the problem but never
// echoes credentials.
func ValidateWebhookURL(raw string) error {
	if raw == "" {
		return errors.New("webhook url is empty")
	}
	if strings.ContainsFunc(raw, unicode.IsSpace) {
		return errors.New("webhook url contains whitespace: write a space percent-encoded (%20)")
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error repeats the whole URL, which may hold a token: keep the cause.
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			err = urlErr.Err
		}
		return fmt.Errorf("webhook url is invalid: %w", err)
	}
	switch {
	case u.Scheme == "":
		return errors.New("webhook url must be absolute, starting with http:// or https://")
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("webhook url scheme %q is not allowed: only http and https", u.Scheme)
	case u.Opaque != "" || u.Hostname() == "":
		return errors.New("webhook url has no host")
	case u.User != nil:
		return fmt.Errorf("webhook url for %s must not contain credentials (user:password@)", u.Hostname())
	case strings.Contains(raw, "#"): // "…/#" parses to no Fragment
		return errors.New("webhook url has a #fragment, which is never sent: remove it")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("webhook url port %q is not in 1-65535", p)
		}
	}
	// The URL is stored and sent normalised, which must parse: url.Parse
	// reads a raw non-ASCII byte in an IPv6 zone ("[fe80::1%25é]") but
	// refuses it percent-encoded, as url.URL.String writes it.
	if _, err := url.Parse(normalURL(*u)); err != nil {
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			err = urlErr.Err
		}
		return fmt.Errorf("webhook url is invalid once normalised: %w", err)
	}
	return nil
}

// webhookError keeps a readable message while errors.Is/As still reach the
// underlying network or context error.
type webhookError struct {
	msg string
	err error
}

func (e *webhookError) Error() string { return e.msg }
func (e *webhookError) Unwrap() error { return e.err }

// webhookRequestError explains why no response arrived from host.
func webhookRequestError(reqCtx context.Context, host string, timeout time.Duration, err error) error {
	if errors.Is(context.Cause(reqCtx), errWebhookTimeout) {
		return &webhookError{msg: fmt.Sprintf("webhook %s timed out after %s", host, timeout), err: err}
	}
	if reqCtx.Err() != nil { // the caller's context ended first
		return fmt.Errorf("webhook %s interrupted: %w", host, context.Cause(reqCtx))
	}
	var refused *WebhookAddressError
	if errors.As(err, &refused) {
		return &webhookError{msg: fmt.Sprintf("webhook %s: %s", host, refused), err: err}
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return &webhookError{msg: fmt.Sprintf("webhook %s unreachable: %s", host, dnsErr.Err), err: err}
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return &webhookError{msg: fmt.Sprintf("webhook %s unreachable: %s", host, rootError(opErr)), err: err}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return &webhookError{msg: fmt.Sprintf("webhook %s closed the connection without answering", host), err: err}
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return &webhookError{msg: fmt.Sprintf("webhook %s timed out: %s", host, rootError(err)), err: err}
	}
	return &webhookError{msg: fmt.Sprintf("webhook %s failed: %s", host, rootError(err)), err: err}
}

// rootError is the innermost error of a chain, e.g. "connection refused"
// out of url.Error → net.OpError → os.SyscallError → syscall.Errno.
func rootError(err error) error {
	for {
		inner := errors.Unwrap(err)
		if inner == nil {
			return err
		}
		err = inner
	}
}

// webhookStatusError is the error of a non-2xx answer, quoting its body.
func webhookStatusError(host string, code int, body string) error {
	detail := strings.Join(strings.Fields(body), " ")
	if len(detail) > webhookErrorBody {
		detail = webhookBodyText([]byte(detail[:webhookErrorBody]), webhookErrorBody) + "…"
	}
	if detail == "" {
		detail = strings.ToLower(http.StatusText(code))
	}
	if detail == "" {
		detail = "empty answer"
	}
	return fmt.Errorf("webhook %s answered %d: %s", host, code, detail)
}

// webhookLocation describes a redirect's target by scheme and host only: its
// path and query may carry the subscriber's token.
func webhookLocation(resp *http.Response) string {
	loc, err := resp.Location()
	if err != nil || loc.Host == "" {
		return ""
	}
	return fmt.Sprintf(" (location %s://%s/…)", loc.Scheme, loc.Host)
}

// parseRetryAfter reads a Retry-After value, delay-seconds or an HTTP-date
// relative to now, capped at maxRetryAfter; 0 when empty, invalid or past.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if strings.Trim(v, "0123456789") == "" {
		secs, err := strconv.ParseInt(v, 10, 64)
		if err != nil || secs > int64(maxRetryAfter/time.Second) { // err: only out of range
			return maxRetryAfter
		}
		return time.Duration(secs) * time.Second
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	d := t.Sub(now)
	if d <= 0 {
		return 0
	}
	return min(d, maxRetryAfter)
}

// webhookBodyText returns b as valid UTF-8 of at most limit bytes. When b
// fills limit, a character the cap cut in two is dropped; any other invalid
// byte becomes U+FFFD (and replacement stops before exceeding limit).
func webhookBodyText(b []byte, limit int) string {
	if len(b) > limit {
		b = b[:limit]
	}
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 && len(b) == limit && !utf8.FullRune(b[i:]) {
			break // the start of a character the cap cut off
		}
		if sb.Len()+utf8.RuneLen(r) > limit {
			break
		}
		sb.WriteRune(r)
		i += size
	}
	return sb.String()
}
