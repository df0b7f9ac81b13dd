package jobs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/propagation"

	"erp/db"
)

// Headers of every message a NATS subscriber publishes besides
// Nats-Msg-Id (jetstream.MsgIDHeader: the delivery's stable id, as a
// webhook's webhook-id), Content-Type and, when tracing is on,
// traceparent.
const (
	// NatsHeaderEventID is the journal event id, in decimal: the key to
	// de-duplicate by beyond the stream's duplicate window.
	NatsHeaderEventID = "Erp-Event-Id"
	// NatsHeaderEventType is the event type, e.g. order.received.
	NatsHeaderEventType = "Erp-Event-Type"
	// NatsHeaderEventTime is the event's creation, RFC 3339 with
	// nanoseconds, UTC.
	NatsHeaderEventTime = "Erp-Event-Time"
)

// NatsConfig is the server's one connection to NATS (NATS_URL and its
// companions). URL empty: no NATS.
type NatsConfig struct {
	// URL is a NATS URL or a comma-separated list of a cluster's
	// (nats://host:4222, tls://host:4222).
	URL string
	// Creds is a credentials file (JWT and NKey seed); NKey an NKey seed
	// file; at most one of them.
	Creds string
	NKey  string
	// CA is a PEM file of the CA that signed the server's TLS
	// certificate, when the system's roots do not hold it.
	CA string
}

// NatsPublisher publishes external deliveries to NATS JetStream over one
// connection, which reconnects by itself for as long as the server runs.
// It is safe for concurrent use.
type NatsPublisher struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	source string // the CloudEvents source
	// connErr is why the last connection attempt failed, nil once
	// connected: nats.go keeps no error of a first connection that failed.
	connErr atomic.Pointer[string]
}

// ConnectNats connects to cfg.URL. The server starts even when NATS is
// down: the connection keeps trying in the background, and a publish
// meanwhile fails at once (it is not buffered) with a
// *NatsUnreachableError naming the connection's last error, and is
// retried as any failed delivery. Connecting, each disconnection and
// reconnection, and why a connection fails (once per distinct error) are
// logged to logger. Errors: a credentials, seed or CA file that cannot be
// read, a malformed URL.
func ConnectNats(cfg NatsConfig, logger *slog.Logger) (*NatsPublisher, error) {
	p := &NatsPublisher{source: defaultCloudEventsSource}
	lastErr := &p.connErr
	opts := []nats.Option{
		nats.Name("erp"),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		// A key refused now may be admitted after the NATS server's
		// reload: keep trying (nats.go gives up at the second refusal).
		nats.IgnoreAuthErrorAbort(),
		// A publish during a reconnect fails instead of waiting in a
		// buffer: its retry then follows the delivery's schedule, and the
		// attempt log says what happened.
		nats.ReconnectBufSize(-1),
		nats.ConnectHandler(func(nc *nats.Conn) {
			lastErr.Store(nil)
			logger.Info("NATS connected", slog.String("url", nc.ConnectedUrlRedacted()))
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			logger.Warn("NATS disconnected", slog.Any("error", err))
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			lastErr.Store(nil)
			logger.Info("NATS reconnected", slog.String("url", nc.ConnectedUrlRedacted()))
		}),
		// Why a connection fails (refused, an untrusted certificate, an
		// unknown key) is said once per change, not at every retry.
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			msg := err.Error()
			if old := lastErr.Swap(&msg); old == nil || *old != msg {
				logger.Warn("NATS connection failed, retrying", slog.Any("error", err))
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			logger.Warn("NATS error", slog.Any("error", err))
		}),
	}
	if cfg.Creds != "" && cfg.NKey != "" {
		return nil, errors.New("nats: give NATS_CREDS or NATS_NKEY_SEED, not both")
	}
	if cfg.Creds != "" {
		opts = append(opts, nats.UserCredentials(cfg.Creds))
	}
	if cfg.NKey != "" {
		o, err := nats.NkeyOptionFromSeed(cfg.NKey)
		if err != nil {
			return nil, fmt.Errorf("nats: read NATS_NKEY_SEED %s: %w", cfg.NKey, err)
		}
		opts = append(opts, o)
	}
	if cfg.CA != "" {
		opts = append(opts, nats.RootCAs(cfg.CA))
	}
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("nats: connect %s: %w", cfg.URL, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats: jetstream: %w", err)
	}
	p.nc, p.js = nc, js
	return p, nil
}

// NatsUnreachableError is the error of a request that needs NATS while
// the connection is down (Reason is the connection's last error, or its
// status when there is none), or that NATS did not answer in time (Reason
// says what may be left).
type NatsUnreachableError struct{ Reason string }

func (e *NatsUnreachableError) Error() string { return "NATS is not reachable: " + e.Reason }

// unreachable is a *NatsUnreachableError while the connection is not up,
// else nil.
func (p *NatsPublisher) unreachable() error {
	if p.nc.IsConnected() {
		return nil
	}
	reason := strings.ToLower(p.nc.Status().String())
	if err := p.nc.LastError(); err != nil {
		reason = err.Error() + " (" + reason + ")"
	} else if msg := p.connErr.Load(); msg != nil {
		reason = *msg + " (" + reason + ")"
	}
	return &NatsUnreachableError{Reason: reason}
}

// Close closes the connection; a publish in flight fails.
func (p *NatsPublisher) Close() { p.nc.Close() }

// NatsSubject is the subject event ev is published on by a subscriber
// with prefix: "<prefix>.<entity>.<entity id>.<type>", e.g.
// "erp.journal.sales_orders.42.order.received". The dots of the type are
// subject separators: "<prefix>.sales_orders.42.>" is one document's
// events, "<prefix>.*.*.order.received" one type's.
func NatsSubject(prefix string, ev db.Event) string {
	return prefix + "." + ev.Entity + "." + strconv.FormatInt(ev.EntityID, 10) + "." + ev.Type
}

// publish publishes t's event (body: its JSON, as a webhook's; we: what
// a CloudEvents envelope says of it) and waits for the stream's
// acknowledgement, at most t's timeout. The
// result is a webhook's: Body names the stream and sequence stored (a
// duplicate within the stream's window is acknowledged as stored
// before: a success), Err why no acknowledgement came; only a message
// too large for the server is Permanent.
func (p *NatsPublisher) publish(ctx context.Context, t *taken, we WebhookEvent, body []byte) WebhookResult {
	start := time.Now()
	ev, stream := t.ev, deref(t.sub.Stream)
	payload, contentType, err := webhookPayload(WebhookFormat(t.sub.Format), p.source, t.msgID, we, body)
	if err != nil {
		return WebhookResult{Err: err, Permanent: true}
	}
	msg := nats.NewMsg(NatsSubject(deref(t.sub.SubjectPrefix), ev))
	msg.Data = payload
	msg.Header.Set("Content-Type", contentType)
	msg.Header.Set(NatsHeaderEventID, strconv.FormatInt(ev.ID, 10))
	msg.Header.Set(NatsHeaderEventType, ev.Type)
	msg.Header.Set(NatsHeaderEventTime, ev.CreatedAt.UTC().Format(time.RFC3339Nano))
	trace := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, trace)
	if tp := trace.Get("traceparent"); tp != "" {
		msg.Header.Set("traceparent", tp)
	}
	// nats.go's own error for a publish while not connected misleads
	// ("headers not supported by this server"): say what is wrong.
	if err := p.unreachable(); err != nil {
		return WebhookResult{Err: fmt.Errorf("nats publish to stream %s: %w", stream, err), Duration: time.Since(start)}
	}
	pctx, cancel := context.WithTimeout(ctx, time.Duration(t.sub.TimeoutMs)*time.Millisecond)
	defer cancel()
	ack, err := p.js.PublishMsg(pctx, msg, jetstream.WithMsgID(t.msgID), jetstream.WithExpectStream(stream))
	res := WebhookResult{Duration: time.Since(start)}
	if err != nil {
		res.Err = fmt.Errorf("nats publish to stream %s: %w", stream, cmp.Or(p.unreachable(), err))
		res.Permanent = errors.Is(err, nats.ErrMaxPayload)
		return res
	}
	res.Body = fmt.Sprintf("stream %s seq %d", ack.Stream, ack.Sequence)
	if ack.Duplicate {
		res.Body += " (duplicate: stored before)"
	}
	return res
}

// natsErrStreamSubjectOverlap is NATS's error code for a stream whose
// subjects another stream takes (nats-server's JSStreamSubjectOverlapErr).
const natsErrStreamSubjectOverlap jetstream.ErrorCode = 10065

// ensureStream makes sure stream stores subjects <prefix>.> and keeps
// message ids for at least horizon: create, it creates the stream (file
// storage, duplicate window horizon) when there is none (else that is an
// *db.InputError: a stream deleted is not made again); an existing one must
// take the subjects and keep ids as long, else an *db.InputError names
// both durations (a retry after the window would be stored twice). Other
// errors: a *NatsUnreachableError (also when NATS did not answer a
// creation within the JetStream client's timeout), or NATS could not be
// asked. created tells that this call made the stream; a concurrent call
// making the same one may be told so too (NATS creates idempotently).
func (p *NatsPublisher) ensureStream(ctx context.Context, stream, prefix string, horizon time.Duration, create bool) (created bool, err error) {
	if err := p.unreachable(); err != nil {
		return false, err
	}
	defer func() {
		var inputErr *db.InputError
		var unreachable *NatsUnreachableError
		if err != nil && !errors.As(err, &inputErr) && !errors.As(err, &unreachable) {
			err = cmp.Or(p.unreachable(), err) // lost meanwhile
		}
	}()
	s, err := p.js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) && !create {
		return false, &db.InputError{Field: "stream", Msg: fmt.Sprintf("NATS has no stream %s any more: create it again (subjects %s.>) before changing this subscriber", stream, prefix)}
	}
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		// Once asked, NATS's answer is awaited even when the request is
		// cancelled, up to the JetStream client's own timeout: a caller that
		// did not learn it made the stream could not remove it again.
		cctx := context.WithoutCancel(ctx)
		_, err = p.js.CreateStream(cctx, jetstream.StreamConfig{Name: stream, Subjects: []string{prefix + ".>"},
			Storage: jetstream.FileStorage, Duplicates: horizon})
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) {
			msg := fmt.Sprintf("NATS refused to create stream %s for %s.>: %s", stream, prefix, apiErr.Description)
			if apiErr.ErrorCode == natsErrStreamSubjectOverlap {
				if other, err := p.js.StreamNameBySubject(ctx, prefix+".>"); err == nil {
					msg += fmt.Sprintf(" (stream %s takes them: choose another prefix, or remove that stream if nothing uses it)", other)
				}
			}
			return false, &db.InputError{Field: "stream", Msg: msg}
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return false, &NatsUnreachableError{Reason: fmt.Sprintf("NATS did not answer the creation of stream %s within %s and may still make it; "+
				"create the subscriber again naming the same stream, which is then used", stream, p.js.Options().DefaultTimeout)}
		}
		if err != nil {
			return false, fmt.Errorf("create stream %s: %w", stream, err)
		}
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("read stream %s: %w", stream, err)
	}
	cfg := s.CachedInfo().Config
	if !subjectsCover(cfg.Subjects, prefix) {
		return false, &db.InputError{Field: "subjectPrefix", Msg: fmt.Sprintf("stream %s takes subjects %s, not %s.>: add it to the stream or choose another prefix",
			stream, strings.Join(cfg.Subjects, ", "), prefix)}
	}
	if cfg.Duplicates < horizon {
		return false, &db.InputError{Field: "stream", Msg: fmt.Sprintf("stream %s keeps message ids for %s (its duplicate window), shorter than this subscriber's retry schedule of %s: a retry after the window would be stored twice; raise the stream's duplicate window to %s or lower maxAttempts or timeoutMs",
			stream, cfg.Duplicates, horizon.Round(time.Second), horizon.Round(time.Second))}
	}
	return false, nil
}

// deleteStream removes stream from NATS.
func (p *NatsPublisher) deleteStream(ctx context.Context, stream string) error {
	if err := p.js.DeleteStream(ctx, stream); err != nil {
		return fmt.Errorf("delete stream %s: %w", stream, cmp.Or(p.unreachable(), err))
	}
	return nil
}

// subjectsCover tells whether one of a stream's subject filters matches
// every subject <prefix>.… (prefix has no wildcards).
func subjectsCover(filters []string, prefix string) bool {
	want := strings.Split(prefix, ".")
	for _, f := range filters {
		got := strings.Split(f, ".")
		for i, tok := range got {
			if tok == ">" {
				return true
			}
			if i >= len(want) || (tok != "*" && tok != want[i]) {
				break
			}
		}
	}
	return false
}

// Horizon is how long after its first attempt a delivery with
// maxAttempts attempts of timeout each may still be attempted under p:
// the longest wait after every failed attempt but the last, plus each
// attempt's lease (timeout and leaseMargin) and the minute a crashed
// attempt may wait for the sweep (at the default DISPATCH_INTERVAL). A
// NATS subscriber's stream must keep message ids as long.
func (p RetryPolicy) Horizon(maxAttempts int, timeout time.Duration) time.Duration {
	var h time.Duration
	d := p.Base
	for n := 1; n < maxAttempts; n++ {
		h += min(d, p.Max)
		if d < p.Max {
			d *= 2
		}
	}
	return h + time.Duration(maxAttempts)*(timeout+leaseMargin+time.Minute)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
