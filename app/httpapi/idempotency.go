package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/99designs/gqlgen/graphql/errcode"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"github.com/vektah/gqlparser/v2/parser"

	"erp/db"
	"erp/resolvers"
)

// Headers of Idempotency.
const (
	// IdempotencyKeyHeader names a mutation request's key (the IETF
	// httpapi draft's header, Stripe's semantics).
	IdempotencyKeyHeader = "Idempotency-Key"
	// ReplayedHeader is "true" on an answer replayed for a key.
	ReplayedHeader = "Idempotent-Replayed"
)

const (
	// keyedRunTimeout bounds a keyed mutation, which runs detached from
	// its client: a client that gives up (the usual reason to retry) does
	// not cancel it half-way, and its answer is there for the retry.
	keyedRunTimeout = time.Minute
	// claimLease is how long an unanswered claim holds its key; past it,
	// its request is taken for dead (the process stopped) and the key may
	// be claimed again. Twice keyedRunTimeout: a claim is never taken
	// over while its request may still run.
	claimLease = 2 * keyedRunTimeout
	// recordTimeout bounds storing (or releasing) a key's answer.
	recordTimeout = 5 * time.Second
	// maxKeyLen is the longest key, in bytes.
	maxKeyLen = 255
)

// Idempotency is the HTTP middleware, inside Authenticate, that runs a
// mutation sent over HTTP POST with an Idempotency-Key header (1–255
// visible ASCII characters) once per user and key:
//
//   - the first request claims the key in a statement of its own, runs
//     (detached from its client, for at most a minute) and stores its
//     answer, status and body, for TTL from the claim;
//   - the same key with the same operation name, query text and variables
//     (the fingerprint) gets that answer again, with Idempotent-Replayed:
//     true, and writes nothing;
//   - with another fingerprint it is 422 CONFLICT; while the first
//     request runs it is 409 CONFLICT "in progress" with Retry-After: the
//     second request does not wait;
//   - an answer of a request that did not run (refused before it: not
//     valid, forbidden, over a limit, a server error; no "data" entry) or
//     that wrote nothing and says try again (db.ErrBusy's CONFLICT on
//     every error) is not kept: the key is free again. Every other answer
//     is kept, errors included, INTERNAL too (whether it wrote is not
//     known), as Stripe keeps its 500s.
//
// Queries ignore the header, and so do requests it cannot apply to:
// websockets (no body to read here), event streams, and bodies gqlgen
// refuses anyway. A persisted query sent by its hash alone with the
// header is answered PERSISTED_QUERY_NOT_FOUND, so that the client sends
// the text that tells a mutation from a query. An unanswered claim whose
// request died is free again after claimLease.
type Idempotency struct {
	Pool *pgxpool.Pool
	// TTL is how long a key and its answer are kept (IDEMPOTENCY_TTL).
	TTL time.Duration
	// MaxTokens caps the tokens parsed to find the operation's type, as
	// gqlgen's own parser limit does.
	MaxTokens int
	Logger    *slog.Logger
}

// Handler wraps next, gqlgen's handler, with the idempotency key rules.
func (i *Idempotency) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys := r.Header.Values(IdempotencyKeyHeader)
		u, signedIn := resolvers.UserFrom(r.Context())
		if len(keys) == 0 || !signedIn || r.Method != http.MethodPost || strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body) // LimitBody has bounded it
		if err != nil {
			refuse(w, r, http.StatusBadRequest, resolvers.CodeBadUserInput, "could not read the request body")
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		op, fingerprint, hashOnly := i.operation(body)
		if hashOnly {
			// What gqlgen's APQ answers a hash it does not know: the
			// client sends the query text with it again.
			e := gqlerror.Errorf("PersistedQueryNotFound")
			errcode.Set(e, "PERSISTED_QUERY_NOT_FOUND")
			w.Header().Set("Content-Type", mediaJSON)
			writeErrors(w, http.StatusOK, gqlerror.List{e})
			return
		}
		if op != ast.Mutation {
			next.ServeHTTP(w, r)
			return
		}
		key := keys[0]
		if len(keys) > 1 || !validKey(key) {
			refuse(w, r, http.StatusBadRequest, resolvers.CodeBadUserInput,
				fmt.Sprintf("the %s header must be one value of 1 to %d visible ASCII characters", IdempotencyKeyHeader, maxKeyLen))
			return
		}
		claim, err := db.ClaimIdempotencyKey(r.Context(), i.Pool, u.ID, key, fingerprint, claimLease)
		switch {
		case err != nil:
			w.Header().Set("Content-Type", mediaJSON)
			writeErrors(w, http.StatusServiceUnavailable, gqlerror.List{resolvers.InternalError(r.Context(), i.Logger, "claim idempotency key", err)})
		case !bytes.Equal(claim.Fingerprint, fingerprint):
			refuse(w, r, http.StatusUnprocessableEntity, resolvers.CodeConflict,
				fmt.Sprintf("%s %q was used with another request (operation, query or variables): send a new key for a new request", IdempotencyKeyHeader, key))
		case claim.Answer != nil:
			w.Header().Set("Content-Type", claim.Answer.ContentType)
			w.Header().Set(ReplayedHeader, "true")
			w.WriteHeader(claim.Answer.Status)
			_, _ = w.Write(claim.Answer.Body)
		case !claim.Claimed:
			w.Header().Set("Retry-After", "1")
			refuse(w, r, http.StatusConflict, resolvers.CodeConflict,
				fmt.Sprintf("a request with %s %q is in progress: try again to get its answer", IdempotencyKeyHeader, key))
		default:
			i.run(w, r, next, u.ID, key, fingerprint)
		}
	})
}

// run serves r, whose key this request claimed, and stores or releases
// the claim with its answer.
func (i *Idempotency) run(w http.ResponseWriter, r *http.Request, next http.Handler, user int64, key string, fingerprint []byte) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), keyedRunTimeout)
	defer cancel()
	rec := &recorder{ResponseWriter: w}
	next.ServeHTTP(rec, r.WithContext(ctx))

	ctx, cancel = context.WithTimeout(context.WithoutCancel(r.Context()), recordTimeout)
	defer cancel()
	answer := db.IdempotentAnswer{Status: rec.status, ContentType: w.Header().Get("Content-Type"), Body: rec.body.Bytes()}
	var err error
	if kept(answer) {
		err = db.AnswerIdempotencyKey(ctx, i.Pool, user, key, fingerprint, i.TTL, answer)
	} else {
		err = db.ReleaseIdempotencyKey(ctx, i.Pool, user, key, fingerprint)
	}
	if err != nil {
		// The claim stays in progress until claimLease, then is free.
		i.Logger.WarnContext(ctx, "idempotency key not recorded", slog.String("request_id", resolvers.RequestID(ctx)),
			slog.String("error", err.Error()))
	}
}

// operation reads a POST body: the type of the operation it runs and its
// fingerprint, the SHA-256 of its operation name, query text and
// variables (keys sorted); hashOnly when it names a persisted query
// without its text. A body or query that does not parse, or names no
// operation, gives no type: gqlgen refuses it without running anything.
func (i *Idempotency) operation(body []byte) (op ast.Operation, fingerprint []byte, hashOnly bool) {
	var p struct {
		Query         string         `json:"query"`
		OperationName string         `json:"operationName"`
		Variables     map[string]any `json:"variables"`
		Extensions    map[string]any `json:"extensions"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if dec.Decode(&p) != nil {
		return "", nil, false
	}
	if p.Query == "" {
		return "", nil, p.Extensions["persistedQuery"] != nil
	}
	doc, err := parser.ParseQueryWithTokenLimit(&ast.Source{Input: p.Query}, i.MaxTokens)
	if err != nil {
		return "", nil, false
	}
	var def *ast.OperationDefinition
	if p.OperationName != "" {
		def = doc.Operations.ForName(p.OperationName)
	} else if len(doc.Operations) == 1 {
		def = doc.Operations[0]
	}
	if def == nil {
		return "", nil, false
	}
	if len(p.Variables) == 0 {
		p.Variables = nil // absent, null and {} are the same request
	}
	canonical, err := json.Marshal([]any{p.OperationName, p.Query, p.Variables})
	if err != nil {
		return "", nil, false
	}
	sum := sha256.Sum256(canonical)
	return def.Operation, sum[:], false
}

// validKey reports whether key is 1 to maxKeyLen visible ASCII characters
// (no spaces), what the API and idempotency_keys accept.
func validKey(key string) bool {
	if len(key) == 0 || len(key) > maxKeyLen {
		return false
	}
	for _, c := range []byte(key) {
		if c < '!' || c > '~' {
			return false
		}
	}
	return true
}

// kept reports whether a is an answer to keep for its key: its operation
// ran (200 and a "data" entry), and unless it wrote nothing and says try
// again (every error is db.ErrBusy's, and no root field has a value).
func kept(a db.IdempotentAnswer) bool {
	if a.Status != http.StatusOK {
		return false
	}
	var res struct {
		Data   json.RawMessage `json:"data"`
		Errors []struct {
			Message string `json:"message"`
		} `json:"errors"`
	}
	if json.Unmarshal(a.Body, &res) != nil || res.Data == nil {
		return false
	}
	if len(res.Errors) == 0 {
		return true
	}
	for _, e := range res.Errors {
		if e.Message != db.ErrBusy.Error() {
			return true
		}
	}
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(res.Data, &fields) // null: no fields
	for _, v := range fields {
		if string(v) != "null" {
			return true
		}
	}
	return false
}

// refuse answers a request that did not run with one GraphQL error of
// code about the Idempotency-Key header (extensions.field).
func refuse(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	e := resolvers.CodedError(msg, code)
	e.Extensions["field"] = IdempotencyKeyHeader
	if id := resolvers.RequestID(r.Context()); id != "" {
		e.Extensions["requestId"] = id
	}
	w.Header().Set("Content-Type", mediaJSON)
	writeErrors(w, status, gqlerror.List{e})
}

// recorder passes a response through to the client and keeps its status
// and a copy of its body.
type recorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	r.body.Write(p)
	return r.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the client's writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
