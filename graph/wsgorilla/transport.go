package wsgorilla

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/errcode"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/gorilla/websocket"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// The subprotocols Transport speaks; a client that names none gets the
// legacy one, as with gqlgen's own transport.
const (
	ProtoTransportWS = "graphql-transport-ws"
	ProtoLegacyWS    = "graphql-ws"
)

// defaultPayloadReadLimit (bytes) and defaultMaxOperations apply when
// PayloadReadLimit is nil and MaxOperations 0.
const (
	defaultPayloadReadLimit = 1 << 20
	defaultMaxOperations    = 100
)

// InitFunc authenticates a socket from its connection_init payload: the
// context its operations run in (derived from ctx; its values count, not
// its end) and, optionally, connection_ack's payload. On an error the
// socket is closed with the code and reason WithCloseCode put on the
// context (else 1000 "terminated"), after a connection_error on
// graphql-ws. CloseSocket with that context closes the socket later.
type InitFunc func(ctx context.Context, payload transport.InitPayload) (context.Context, *transport.InitPayload, error)

// Transport is a gqlgen transport for GraphQL over websockets on
// gorilla/websocket, speaking graphql-transport-ws and the legacy
// graphql-ws: a goroutine per socket reads its frames, one per operation
// runs it. Not gqlgen's own websocket transport, which closes an init
// timeout with 1002, has no 4400/4409/4429 nor a cap of operations, sends
// complete after an error, and lets a reused id's end cancel its reuser.
// A socket's identity is its connection_init (InitFunc's context), not
// headers. Implementation (required) applies its rules to every socket.
type Transport struct {
	// Implementation accepts and owns the sockets.
	Implementation *Implementation
	// InitFunc, when set, is called with the connection_init payload
	// before connection_ack.
	InitFunc InitFunc
	// PayloadReadLimit caps an incoming message, in bytes; nil means
	// 1 MiB, a pointer to a value of 0 or less no limit.
	PayloadReadLimit *int64
	// MaxOperations caps the operations running at once on one socket;
	// a subscribe (start) past it is answered with an error message for
	// its id, and the socket stays open. 0 means 100.
	MaxOperations int
	// OnClose, when set, is called once for every socket InitFunc
	// accepted, with InitFunc's context, after its operations ended.
	OnClose func(ctx context.Context)
}

var _ graphql.Transport = Transport{}

// Supports implements graphql.Transport: requests with an Upgrade header.
func (t Transport) Supports(r *http.Request) bool { return r.Header.Get("Upgrade") != "" }

// Do implements graphql.Transport: it upgrades the request and returns at
// connection_ack (middleware sees the request end there), leaving the
// socket to a goroutine of its own: net/http's, whose stack the handshake
// grew, and its state for the connection (two 4 KiB buffers, the request)
// are let go.
func (t Transport) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	c, err := t.Implementation.accept(w, r, []string{ProtoLegacyWS, ProtoTransportWS})
	if err != nil {
		return // the Upgrader answered the request with an HTTP error
	}
	limit := int64(defaultPayloadReadLimit)
	if t.PayloadReadLimit != nil {
		limit = *t.PayloadReadLimit
	}
	if limit > 0 {
		c.ws.SetReadLimit(limit)
	}
	// The socket's context ends with the socket and reaches it
	// (CloseSocket); cancellation of the request does not end it.
	ctx, cancel := context.WithCancel(context.WithValue(context.WithoutCancel(r.Context()), connKey{}, c))
	s := &socket{
		initFunc: t.InitFunc,
		onClose:  t.OnClose,
		maxOps:   cmp.Or(t.MaxOperations, defaultMaxOperations),
		conn:     c,
		legacy:   c.ws.Subprotocol() != ProtoTransportWS,
		exec:     exec,
		ctx:      ctx,
		cancel:   cancel,
	}
	// A panic in InitFunc tears the socket down here; gqlgen's handler
	// recovers it then.
	defer func() {
		if p := recover(); p != nil {
			s.fail()
			panic(p)
		}
	}()
	if s.init() {
		go s.serve()
		return
	}
	s.end()
}

// serve reads the socket until it ends. A panic ends the socket with 1011
// and is logged with Implementation.Logger.
func (s *socket) serve() {
	defer func() {
		if p := recover(); p != nil {
			s.fail()
			if l := s.conn.impl.Logger; l != nil {
				l.Error("websocket: panic serving socket", slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
			}
		}
	}()
	s.run()
	s.end()
}

// fail ends the socket after a panic on its goroutine with 1011.
func (s *socket) fail() {
	s.close(websocket.CloseInternalServerErr, "internal server error")
	s.end()
}

// end closes the socket, waits for its operations' goroutines, and only
// then takes it out of the set Shutdown waits on.
func (s *socket) end() {
	if s.ended.Swap(true) {
		return // a panic in end itself comes back here
	}
	// Even when OnClose panics: Shutdown waits on the open set.
	defer s.conn.impl.forget(s.conn)
	s.close(websocket.CloseNormalClosure, "terminated")
	s.running.Wait()
	if s.accepted && s.onClose != nil {
		s.onClose(s.ctx)
	}
}

// socket is one socket's protocol state.
type socket struct {
	initFunc InitFunc
	onClose  func(ctx context.Context)
	maxOps   int

	conn   *Conn
	exec   graphql.GraphExecutor
	ctx    context.Context // InitFunc's, cancelled when the socket closes
	cancel context.CancelFunc
	legacy bool // graphql-ws rather than graphql-transport-ws
	// accepted: InitFunc took the socket, and OnClose is owed.
	accepted bool
	ended    atomic.Bool // end ran or runs

	mu sync.Mutex
	// active holds the running operations. An operation leaves it
	// (retire) when it ends or the moment the client stops it (complete,
	// stop), and sends nothing once it left: the client may reuse the id
	// at once, and a message of the stopped operation with that id would
	// be taken for one of the new operation.
	active []*operation
	closed bool

	// sendMu is held while an operation's message is written, with the
	// check that the operation still has its id, and while an id is
	// taken from its operation: nothing of an operation is written after
	// it left active, not even a write that had begun.
	sendMu sync.Mutex

	running sync.WaitGroup // the operations' goroutines
}

// clientMessage is the envelope both subprotocols share.
type clientMessage struct {
	Type    string          `json:"type"`
	ID      string          `json:"id"`
	Payload json.RawMessage `json:"payload"`
}

// Incoming message types, by what they mean in either subprotocol.
const (
	msgInit = iota + 1
	msgTerminate
	msgStart
	msgStop
	msgPing
	msgPong
	msgUnexpected // a message type the server sends, not takes
)

// invalidMessage says why a client message is not one the subprotocol
// takes; its text is for the client.
type invalidMessage string

func (e invalidMessage) Error() string { return string(e) }

// maxQuotedType bounds a client's message type quoted in a close reason,
// quotes included, so that the reason's own words fit the frame too.
const maxQuotedType = 48

// quoteType quotes a client's message type for a close reason: escaped,
// so that no byte of it can break the frame or the client's log, and cut
// to maxQuotedType bytes, then marked with "…", when it is longer.
func quoteType(typ string) string {
	t := cutUTF8(typ, maxQuotedType)
	q := strconv.Quote(t)
	for len(q) > maxQuotedType {
		_, n := utf8.DecodeLastRuneInString(t)
		t = t[:len(t)-n]
		q = strconv.Quote(t)
	}
	if len(t) < len(typ) {
		q += "…"
	}
	return q
}

func unknownType(typ string) invalidMessage {
	if typ == "" {
		return "message without a type"
	}
	return invalidMessage("unknown message type " + quoteType(typ))
}

// notEnvelope says what keeps message b, which did not decode into a
// clientMessage, from being one.
func notEnvelope(b []byte) invalidMessage {
	if !json.Valid(b) {
		return "malformed JSON message"
	}
	var te *json.UnmarshalTypeError
	if err := json.Unmarshal(b, new(clientMessage)); errors.As(err, &te) && te.Field != "" {
		return invalidMessage(fmt.Sprintf("message: %q must be a string", te.Field))
	}
	return "message must be a JSON object"
}

func (s *socket) next() (kind int, m clientMessage, err error) {
	return s.classify(s.read())
}

// read reads the next message, b, and decodes its envelope, m (parsed
// false when it is no JSON object of that shape), skipping messages once
// a close frame was sent. A read error drops the network connection. A
// binary message is read as text, as both reference servers do.
func (s *socket) read() (b []byte, m clientMessage, parsed bool, err error) {
	c := s.conn
	for {
		_, r, err := c.ws.NextReader()
		if err == nil {
			b, err = io.ReadAll(r) // at most the read limit
		}
		if err != nil {
			c.failed(err, "nothing came from the peer for two ping intervals")
			return nil, m, false, err
		}
		c.alive()
		if c.closing.Load() {
			continue
		}
		if !utf8.Valid(b) {
			return b, m, false, errNotUTF8 // JSON decoding would put U+FFFD in
		}
		if json.Unmarshal(b, &m) != nil {
			return b, clientMessage{}, false, nil // malformed: the protocol answers it
		}
		return b, m, true, nil
	}
}

// classify tells what an incoming message b, m once decoded, means in the
// socket's subprotocol. A message the client may not send in it is an
// invalidMessage error that says why.
func (s *socket) classify(b []byte, m clientMessage, parsed bool, err error) (kind int, _ clientMessage, _ error) {
	if err != nil {
		return 0, m, err
	}
	if !parsed {
		return 0, m, notEnvelope(b)
	}
	if s.legacy {
		switch m.Type {
		case "connection_init":
			return msgInit, m, nil
		case "connection_terminate":
			return msgTerminate, m, nil
		case "start":
			return msgStart, m, nil
		case "stop":
			return msgStop, m, nil
		case "connection_ack", "connection_error", "data", "error", "complete", "ka":
			return msgUnexpected, m, nil
		}
		return 0, m, unknownType(m.Type)
	}
	switch m.Type {
	case "connection_init":
		return msgInit, m, nil
	case "subscribe":
		return msgStart, m, nil
	case "complete":
		return msgStop, m, nil
	case "ping":
		return msgPing, m, nil
	case "pong":
		return msgPong, m, nil
	case "connection_ack", "next", "error":
		return 0, m, invalidMessage("message type " + quoteType(m.Type) + " is sent only by the server")
	}
	return 0, m, unknownType(m.Type)
}

// init reads connection_init and acknowledges it; false means the socket
// is to close.
func (s *socket) init() bool {
	m, ok := s.awaitInit()
	if !ok {
		return false
	}
	s.conn.initSeen()
	var initPayload transport.InitPayload
	if p := bytes.TrimSpace(m.Payload); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		if p[0] != '{' || json.Unmarshal(p, &initPayload) != nil {
			s.close(CloseBadRequest, "connection_init payload must be an object")
			return false
		}
	}
	var ack *transport.InitPayload
	if s.initFunc != nil {
		ctx, payload, err := s.initFunc(s.ctx, initPayload)
		if err != nil {
			s.connectionError(err.Error())
			code, reason := closeCodeOf(ctx)
			s.close(code, reason)
			return false
		}
		s.ctx, ack = ctx, payload
	}
	s.accepted = true
	var payload []byte
	if ack != nil {
		b, err := json.Marshal(*ack)
		if err != nil {
			s.close(websocket.CloseInternalServerErr, "internal error")
			return false
		}
		payload = b
	}
	s.send("connection_ack", "", payload)
	if s.legacy {
		s.send("ka", "", nil)
	}
	return true
}

// awaitInit reads messages up to connection_init, answering pings; false
// means the socket closed: anything else first closes it (4401 for a
// subscribe, else 4400; 1002 on graphql-ws).
func (s *socket) awaitInit() (clientMessage, bool) {
	for {
		kind, m, err := s.next()
		bad := errors.As(err, new(invalidMessage))
		switch {
		case err != nil && !bad:
			s.close(websocket.CloseNormalClosure, "terminated") // the read failed
			return m, false
		case kind == msgInit:
			return m, true
		case kind == msgTerminate:
			s.close(websocket.CloseNormalClosure, "terminated")
			return m, false
		case s.legacy && bad:
			s.connectionError("invalid json")
			s.close(websocket.CloseProtocolError, "decoding error")
			return m, false
		case s.legacy:
			s.connectionError("unexpected message " + m.Type)
			s.close(websocket.CloseProtocolError, "unexpected message")
			return m, false
		case kind == msgPing:
			s.send("pong", "", m.Payload)
		case kind == msgPong:
		case kind == msgStart:
			s.close(CloseNotInitialised, "Unauthorized")
			return m, false
		case bad:
			s.refuse(err)
			return m, false
		default:
			s.refuse(invalidMessage(m.Type + " message before connection_init"))
			return m, false
		}
	}
}

// run reads messages until the socket closes or a message ends it.
func (s *socket) run() {
	for s.handle(s.next()) {
	}
}

// errNotUTF8 closes a socket with 1007 (RFC 6455), not to run U+FFFD.
var errNotUTF8 = errors.New("message is not valid UTF-8")

// handle takes one message; false means the socket is done. Invalid UTF-8
// closes it with 1007; a message the client may not send with 4400 (4429:
// a second connection_init), or on graphql-ws, as gqlgen does, 1000 for
// malformed JSON or an unknown type, else 1002 after a connection_error.
func (s *socket) handle(kind int, m clientMessage, err error) bool {
	if errors.Is(err, errNotUTF8) {
		s.close(websocket.CloseInvalidFramePayloadData, errNotUTF8.Error())
		return false
	}
	if err != nil {
		if !s.legacy && errors.As(err, new(invalidMessage)) {
			s.refuse(err)
		}
		return false
	}
	switch kind {
	case msgStart:
		return s.start(m)
	case msgStop:
		if m.ID == "" && !s.legacy {
			s.refuse(invalidMessage("complete message without an id"))
			return false
		}
		s.stopOperation(m.ID)
	case msgTerminate:
		s.close(websocket.CloseNormalClosure, "terminated")
		return false
	case msgPing:
		s.send("pong", "", m.Payload)
	case msgPong:
		// The answer to a keepalive ping; read saw the peer is there.
	case msgInit:
		if !s.legacy {
			s.close(CloseTooManyInit, "Too many initialisation requests")
			return false
		}
		fallthrough
	default:
		s.connectionError("unexpected message " + m.Type)
		s.close(websocket.CloseProtocolError, "unexpected message")
		return false
	}
	return true
}

// start runs the operation of a subscribe (start) message on a goroutine
// of its own; false means the message was not valid and the socket is
// closing. A message without an id closes the socket (see refuse). A payload that
// is not an operation closes it with 4400 on graphql-transport-ws; on
// graphql-ws, whose reference server answers it with an error for the
// id, it gets that error and the socket stays open.
func (s *socket) start(m clientMessage) bool {
	begin := graphql.Now()
	if m.ID == "" {
		s.refuse(invalidMessage(m.Type + " message without an id"))
		return false
	}
	// Only this goroutine adds to active, so the id is still free below.
	s.mu.Lock()
	dup := s.operation(m.ID) != nil
	s.mu.Unlock()
	if dup {
		// Reading on, which skips what follows the close frame, until the
		// peer's close frame ends the socket.
		s.conn.closeWith(CloseSubscriberExists, "Subscriber for "+m.ID+" already exists")
		return true
	}
	if err := checkPayload(m.Type, m.Payload); err != nil {
		if !s.legacy {
			s.refuse(err)
			return false
		}
		s.sendErrors(m.ID, gqlerror.List{{Message: err.Error()}})
		return true
	}
	limit := s.maxOps
	s.mu.Lock()
	if s.closed {
		// close stopped the operations it found; this one it did not.
		s.mu.Unlock()
		return false
	}
	if len(s.active) >= limit {
		s.mu.Unlock()
		s.sendErrors(m.ID, gqlerror.List{{
			Message:    fmt.Sprintf("too many operations on this socket: at most %d at once", limit),
			Extensions: map[string]any{"code": "TOO_MANY_OPERATIONS"},
		}})
		return true
	}
	// Not a child of the socket's context: close stops every operation
	// in active itself.
	ctx, cancel := context.WithCancel(context.WithoutCancel(s.ctx))
	op := &operation{s: s, id: m.ID, cancel: cancel}
	// No operation has the id: a running one's was refused above (4409),
	// and a stopped one left active when it was stopped.
	s.active = append(s.active, op)
	s.mu.Unlock()
	// prepare returns before pull parks for the subscription's life, so
	// its frame is not under the parked ones: about 1.1 KiB deep, the
	// stack the setup grew to 8 KiB is one the GC halves to 4 KiB (it
	// halves a parked stack that uses under a quarter of it).
	s.running.Go(func() {
		if ctx, ok := op.prepare(ctx, m.Payload, begin); ok {
			op.pull(ctx)
		}
	})
	return true
}

type operationPayload struct {
	Query         json.RawMessage `json:"query"`
	OperationName json.RawMessage `json:"operationName"`
	Variables     json.RawMessage `json:"variables"`
	Extensions    json.RawMessage `json:"extensions"`
}

// checkPayload reports what keeps payload of a subscribe (start) from
// being an operation, as an invalidMessage: a JSON object with a query
// string (absent only for a persisted query), an operationName string and
// variables and extensions objects, each optional. Values are not decoded.
func checkPayload(typ string, payload json.RawMessage) error {
	var p operationPayload
	if jsonKind(payload) != '{' || json.Unmarshal(payload, &p) != nil {
		return invalidMessage(typ + " payload must be an object")
	}
	for _, f := range []struct {
		name string
		v    json.RawMessage
		want byte
	}{
		{"query", p.Query, '"'},
		{"operationName", p.OperationName, '"'},
		{"variables", p.Variables, '{'},
		{"extensions", p.Extensions, '{'},
	} {
		if k := jsonKind(f.v); k != 0 && k != f.want {
			what := "an object"
			if f.want == '"' {
				what = "a string"
			}
			return invalidMessage(fmt.Sprintf("%s payload: %q must be %s", typ, f.name, what))
		}
	}
	if jsonKind(p.Query) == 0 {
		var ext map[string]json.RawMessage
		if json.Unmarshal(p.Extensions, &ext) != nil || jsonKind(ext["persistedQuery"]) == 0 {
			return invalidMessage(typ + ` payload has no "query" string`)
		}
	}
	return nil
}

// jsonKind is the first byte of the JSON value v, 0 when v is absent or
// null.
func jsonKind(v json.RawMessage) byte {
	v = bytes.TrimSpace(v)
	if len(v) == 0 || bytes.Equal(v, []byte("null")) {
		return 0
	}
	return v[0]
}

// refuse closes the socket for an invalid message: 4400 with err as the
// reason, or on graphql-ws 1002 after a connection_error carrying it.
func (s *socket) refuse(err error) {
	if !s.legacy {
		s.close(CloseBadRequest, err.Error())
		return
	}
	s.connectionError(err.Error())
	s.close(websocket.CloseProtocolError, err.Error())
}

// stopOperation ends operation id at the client's request: from then on
// it sends nothing. graphql-ws gets a complete, as from its reference
// server; graphql-transport-ws none. An unknown id is ignored.
func (s *socket) stopOperation(id string) {
	s.mu.Lock()
	op := s.operation(id)
	s.mu.Unlock()
	if op == nil {
		return
	}
	s.sendMu.Lock()
	if op.retire() && s.legacy {
		s.complete(id)
	}
	s.sendMu.Unlock()
	op.stop()
}

// prepare parses and validates the operation; ok false means it ended
// (its error message was sent), else pull runs it in the returned
// context.
func (op *operation) prepare(ctx context.Context, payload json.RawMessage, begin time.Time) (_ context.Context, ok bool) {
	s := op.s
	ctx = graphql.StartOperationTrace(ctx)
	params := &graphql.RawParams{}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if err := dec.Decode(params); err != nil {
		// checkPayload let it through, so this is not expected.
		op.end(gqlerror.List{{Message: "payload: " + err.Error()}})
		return nil, false
	}
	params.ReadTime = graphql.TraceTiming{Start: begin, End: graphql.Now()}

	rc, errs := s.exec.CreateOperationContext(ctx, params)
	if errs != nil {
		resp := s.exec.DispatchError(graphql.WithOperationContext(ctx, rc), errs)
		if errcode.GetErrorKind(errs) == errcode.KindProtocol {
			op.end(resp.Errors)
			return nil, false
		}
		op.deliver(&graphql.Response{Errors: errs})
		op.end(nil)
		return nil, false
	}
	op.rc = rc
	// For AddSubscriptionError.
	return context.WithValue(ctx, operationKey{}, op), true
}

// operation returns the running operation with id, or nil; under mu.
func (s *socket) operation(id string) *operation {
	for _, op := range s.active {
		if op.id == id {
			return op
		}
	}
	return nil
}

// retire frees the operation's id just before its last message, which the
// client may answer by reusing the id; false when the id was freed
// already and no last message is due. Called with sendMu held.
func (op *operation) retire() (owned bool) {
	op.s.mu.Lock()
	i := slices.Index(op.s.active, op)
	owned = i >= 0
	if owned {
		op.s.active = slices.Delete(op.s.active, i, i+1)
	}
	op.s.mu.Unlock()
	return owned
}

// current reports whether the operation still has its id.
func (op *operation) current() bool {
	op.s.mu.Lock()
	defer op.s.mu.Unlock()
	return slices.Contains(op.s.active, op)
}

// operation is one operation running on the socket.
type operation struct {
	s      *socket
	id     string
	rc     *graphql.OperationContext
	cancel context.CancelFunc
	errs   gqlerror.List // AddSubscriptionError's, guarded by the socket's mu
}

// stop ends the operation; from any goroutine.
func (op *operation) stop() { op.cancel() }

// pull writes each response of gqlgen's executor until there is none.
func (op *operation) pull(ctx context.Context) {
	defer func() {
		if r := recover(); r != nil {
			op.fail(ctx, r)
			return
		}
		op.finish()
	}()
	responses, ctx := op.s.exec.DispatchOperation(ctx, op.rc)
	for {
		resp := responses(ctx)
		if resp == nil {
			return
		}
		op.deliver(resp)
	}
}

// deliver writes a result of the operation while it has its id; one that
// cannot be encoded ends the operation with an error message instead.
func (op *operation) deliver(resp *graphql.Response) {
	s := op.s
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if !op.current() {
		return
	}
	if err := s.sendResponse(op.id, resp); err != nil {
		op.retire()
		s.sendErrors(op.id, gqlerror.List{{Message: "encode response: " + err.Error()}})
		op.stop()
	}
}

// fail answers a panic in the operation with an error message.
func (op *operation) fail(ctx context.Context, p any) {
	var err error
	if op.rc != nil {
		err = op.rc.Recover(ctx, p)
	} else {
		err = fmt.Errorf("panic: %v", p)
	}
	var gqlErr *gqlerror.Error
	if !errors.As(err, &gqlErr) {
		gqlErr = &gqlerror.Error{}
		if err != nil {
			gqlErr.Message = err.Error()
		}
	}
	op.end(gqlerror.List{gqlErr})
}

// finish ends the operation: an error message with the errors added by
// AddSubscriptionError, else complete unless the socket is closing.
func (op *operation) finish() { op.end(op.subscriptionErrors()) }

// end sends the operation's last message unless it no longer has its id
// (an error message with errs, which needs no complete, else complete
// unless the socket is closing), then cancels the operation.
func (op *operation) end(errs gqlerror.List) {
	s := op.s
	s.sendMu.Lock()
	if op.retire() {
		switch {
		case len(errs) > 0:
			s.sendErrors(op.id, errs)
		case !s.conn.closing.Load() && !s.conn.netClosed.Load():
			// Not s.ctx: a deadline InitFunc gave it is not the
			// socket's end.
			s.complete(op.id)
		}
	}
	s.sendMu.Unlock()
	op.cancel()
}

// close closes the socket with code and reason (unless a close frame went
// out already, whose code stands) and stops its operations; safe to call
// from any goroutine, more than once.
func (s *socket) close(code int, reason string) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	ops := slices.Clone(s.active)
	s.mu.Unlock()
	s.conn.writeClose(code, reason)
	s.cancel()
	for _, op := range ops {
		op.stop()
	}
	_ = s.conn.Close()
}

// send writes one message (a failed write drops the socket).
func (s *socket) send(typ, id string, payload []byte) {
	if s.conn.writeText(encodeEnvelope(typ, id, payload)) == nil && typ == "connection_ack" {
		s.conn.acked.Store(true)
	}
}

func (s *socket) dataType() string {
	if s.legacy {
		return "data"
	}
	return "next"
}

// sendResponse writes one result of operation id; the error is one of
// encoding it (a failed write has closed the socket).
func (s *socket) sendResponse(id string, resp *graphql.Response) error {
	if parts, ok := s.sharedFrame(id, resp); ok {
		_ = s.conn.writeText(parts...)
		return nil
	}
	b, err := json.Marshal(resp)
	if err != nil {
		return err
	}
	_ = s.conn.writeText(encodeEnvelope(s.dataType(), id, b))
	return nil
}

// sharedFrame returns a result message as parts around resp.Data, written
// as it is: the data SharedFeedPayloads shares among sockets is neither
// copied nor encoded again per socket. ok is false for a response with
// more than data and extensions.
func (s *socket) sharedFrame(id string, resp *graphql.Response) (parts [][]byte, ok bool) {
	if len(resp.Errors) > 0 || resp.Data == nil || resp.Label != "" || resp.Path != nil || resp.HasNext != nil {
		return nil, false
	}
	tail := make([]byte, 0, 96)
	if len(resp.Extensions) > 0 {
		ext, err := json.Marshal(resp.Extensions)
		if err != nil {
			return nil, false
		}
		tail = append(append(tail, `,"extensions":`...), ext...)
	}
	tail = append(tail, `},"id":`...)
	tail = appendString(tail, id)
	tail = append(tail, `,"type":`...)
	tail = appendString(tail, s.dataType())
	tail = append(tail, '}')
	return [][]byte{framePrefix, resp.Data, tail}, true
}

// framePrefix opens every result message written around shared data.
var framePrefix = []byte(`{"payload":{"data":`)

func (s *socket) complete(id string) { s.send("complete", id, nil) }

func (s *socket) sendErrors(id string, errs gqlerror.List) {
	b, err := json.Marshal(errs)
	if err != nil {
		b = []byte(`[{"message":"internal error"}]`)
	}
	s.send("error", id, b)
}

// connectionError tells a graphql-ws client why its socket closes;
// graphql-transport-ws has no such message.
func (s *socket) connectionError(msg string) {
	if !s.legacy {
		return
	}
	b, _ := json.Marshal(&gqlerror.Error{Message: msg})
	s.send("connection_error", "", b)
}

type (
	closeCodeKey     struct{}
	operationKey     struct{} // → *operation
	closeCodeAndText struct {
		code   int
		reason string
	}
)

// WithCloseCode returns ctx carrying the close code and reason for an
// InitFunc that refuses a socket (see InitFunc). reason is cut to the 123
// bytes a close frame carries.
func WithCloseCode(ctx context.Context, code int, reason string) context.Context {
	return context.WithValue(ctx, closeCodeKey{}, closeCodeAndText{code, reason})
}

func closeCodeOf(ctx context.Context) (int, string) {
	if ctx != nil {
		if c, ok := ctx.Value(closeCodeKey{}).(closeCodeAndText); ok {
			return c.code, c.reason
		}
	}
	return websocket.CloseNormalClosure, "terminated"
}

// AddSubscriptionError makes the end of the subscription of ctx an error
// message carrying err instead of complete: the way a resolver whose
// stream fails (its channel closed) says why.
// Outside an operation of this transport it does nothing.
func AddSubscriptionError(ctx context.Context, err *gqlerror.Error) {
	if op, ok := ctx.Value(operationKey{}).(*operation); ok {
		op.s.mu.Lock()
		op.errs = append(op.errs, err)
		op.s.mu.Unlock()
	}
}

func (op *operation) subscriptionErrors() gqlerror.List {
	op.s.mu.Lock()
	defer op.s.mu.Unlock()
	return op.errs
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	q, _ := json.Marshal(s)
	return append(b, q...)
}

// encodeEnvelope encodes the message {"payload":…,"id":…,"type":…} of both
// subprotocols, payload (raw JSON) and id left out when empty.
func encodeEnvelope(typ, id string, payload []byte) []byte {
	b := make([]byte, 0, len(payload)+len(id)+len(typ)+32)
	b = append(b, '{')
	if len(payload) > 0 {
		b = append(b, `"payload":`...)
		b = append(b, payload...)
		b = append(b, ',')
	}
	if id != "" {
		b = append(b, `"id":`...)
		b = appendString(b, id)
		b = append(b, ',')
	}
	b = append(b, `"type":`...)
	b = appendString(b, typ)
	return append(b, '}')
}
