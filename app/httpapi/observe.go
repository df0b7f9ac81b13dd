package httpapi

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/google/uuid"
	"github.com/vektah/gqlparser/v2/ast"

	"erp/metrics"
	"erp/resolvers"
)

// RequestIDHeader carries the request id in both directions: a proxy may
// set it (then it is kept), the server always answers with it.
const RequestIDHeader = "X-Request-Id"

// validRequestID is what an incoming request id may look like; anything
// else is replaced, so that a client cannot forge log lines.
var validRequestID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// requestInfo is what the request log line tells about a request, filled
// in by the layers that learn it (authentication, the GraphQL operation).
// The request's id travels beside it (resolvers.WithRequestID).
type requestInfo struct {
	mu        sync.Mutex
	user      string
	operation string
}

type requestInfoKey struct{}

func infoFrom(ctx context.Context) *requestInfo {
	info, _ := ctx.Value(requestInfoKey{}).(*requestInfo)
	return info
}

func noteUser(ctx context.Context, login string) {
	if info := infoFrom(ctx); info != nil {
		info.mu.Lock()
		info.user = login
		info.mu.Unlock()
	}
}

func noteOperation(ctx context.Context, op string) {
	if info := infoFrom(ctx); info != nil {
		info.mu.Lock()
		if info.operation == "" {
			info.operation = op
		}
		info.mu.Unlock()
	}
}

// probePaths are polled by machines every few seconds; their request lines
// are logged at debug level so that they do not drown the others.
var probePaths = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// RequestLog gives every request an id (the X-Request-Id header), puts it
// in the request's context, and logs one line per request when it ends:
// method, path, status, duration, id, GraphQL operation and user login.
// Tokens and other headers are never logged. Probes (/healthz, /readyz,
// /metrics) are logged at debug level. A websocket's request ends when the
// socket is acknowledged (wsgorilla.Handler hands the socket to a goroutine
// of its own then): its line has status 101, the user, and the time to
// connection_ack, not the operations run over it.
func RequestLog(logger *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(RequestIDHeader)
		if !validRequestID.MatchString(id) {
			id = uuid.NewString()
		}
		info := &requestInfo{}
		w.Header().Set(RequestIDHeader, id)
		rec := &statusRecorder{ResponseWriter: w}
		start := time.Now()
		next.ServeHTTP(rec, r.WithContext(resolvers.WithRequestID(context.WithValue(r.Context(), requestInfoKey{}, info), id)))
		info.mu.Lock()
		user, op := info.user, info.operation
		info.mu.Unlock()
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		if rec.hijacked {
			status = http.StatusSwitchingProtocols
		}
		level := slog.LevelInfo
		if probePaths[r.URL.Path] {
			level = slog.LevelDebug
		}
		logger.LogAttrs(r.Context(), level, "http request",
			slog.String("request_id", id), slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Int("status", status), slog.Duration("duration", time.Since(start)),
			slog.String("operation", op), slog.String("user", user))
	})
}

// statusRecorder remembers the response status; it lets websockets hijack
// the connection and http.ResponseController reach the writer beneath.
type statusRecorder struct {
	http.ResponseWriter
	status   int
	hijacked bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Flush implements http.Flusher.
func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack implements http.Hijacker, for websocket upgrades.
func (s *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := s.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("response writer cannot hijack")
	}
	s.hijacked = true
	return h.Hijack()
}

// Unwrap lets http.ResponseController find the original writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Observer is the gqlgen extension that counts every operation by type,
// root field and outcome with its latency (to the first response, for a
// subscription to its first event), names it in the request log, and puts
// the request id in every response's extensions.requestId.
type Observer struct {
	Metrics *metrics.Metrics
}

var (
	_ graphql.HandlerExtension     = Observer{}
	_ graphql.OperationInterceptor = Observer{}
)

// ExtensionName implements graphql.HandlerExtension.
func (Observer) ExtensionName() string { return "Observer" }

// Validate implements graphql.HandlerExtension.
func (Observer) Validate(graphql.ExecutableSchema) error { return nil }

// InterceptOperation implements graphql.OperationInterceptor.
func (o Observer) InterceptOperation(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	start := time.Now()
	oc := graphql.GetOperationContext(ctx)
	opType, field := "unknown", "unknown"
	if oc != nil && oc.Operation != nil {
		opType = string(oc.Operation.Operation)
		field = rootField(oc.Operation.SelectionSet)
		name := oc.OperationName
		if name == "" {
			name = field
		}
		noteOperation(ctx, name)
	}
	op := &observedOperation{
		metrics: o.Metrics, handler: next(ctx), start: start, opType: opType, field: field,
		// Once per operation: a subscription answers thousands of times,
		// and the lookup walks the whole context chain.
		id:    resolvers.RequestID(ctx),
		first: true,
	}
	return op.respond
}

// observedOperation is one operation under Observer.
type observedOperation struct {
	metrics           *metrics.Metrics
	handler           graphql.ResponseHandler
	start             time.Time
	opType, field, id string
	// ext is the extensions of every response that has none of its own,
	// made with the first: one map for all of a subscription's responses
	// (an idle one has none), which nothing changes after Observer (the
	// outermost extension) put it there.
	ext   map[string]any
	first bool
}

// respond is the operation's ResponseHandler. An idle subscription's
// goroutine waits below it (in handler) for its next event, so the work
// on the response lives in observe: a few hundred bytes more of idle
// stack double the goroutine's stack (4 to 8 KiB), as the runtime only
// shrinks a stack that is less than a quarter used.
func (op *observedOperation) respond(ctx context.Context) *graphql.Response {
	return op.observe(op.handler(ctx))
}

// observe counts the operation at its first response and puts the request
// id in every response's extensions.
//
//go:noinline
func (op *observedOperation) observe(resp *graphql.Response) *graphql.Response {
	if op.first {
		op.first = false
		op.metrics.GraphQLRequest(op.opType, op.field, resp != nil && len(resp.Errors) == 0, time.Since(op.start))
	}
	switch {
	case resp == nil || op.id == "":
	case resp.Extensions == nil:
		if op.ext == nil {
			op.ext = map[string]any{"requestId": op.id}
		}
		resp.Extensions = op.ext
	default:
		resp.Extensions["requestId"] = op.id
	}
	return resp
}

// rootField names an operation by its first root field (bounded by the
// schema, unlike client-chosen operation names, so fit for a label).
func rootField(set ast.SelectionSet) string {
	for _, sel := range set {
		if f, ok := sel.(*ast.Field); ok {
			return f.Name
		}
	}
	return "unknown"
}
