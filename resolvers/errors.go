package resolvers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/google/uuid"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"erp/db"
	"erp/graph/model"
	"erp/jobs"
)

// GraphQL error codes (extensions.code), as the API documents them.
const (
	CodeUnauthenticated = "UNAUTHENTICATED"
	CodeForbidden       = "FORBIDDEN"
	CodeBadUserInput    = "BAD_USER_INPUT"
	CodeNotFound        = "NOT_FOUND"
	CodeConflict        = "CONFLICT"
	CodeUnavailable     = "UNAVAILABLE"
	CodeInternal        = "INTERNAL"
)

// CodedError is a GraphQL error with message msg and extensions.code code.
func CodedError(msg, code string) *gqlerror.Error {
	return &gqlerror.Error{Message: msg, Extensions: map[string]any{"code": code}}
}

// ErrorPresenter maps every error a request produces to a GraphQL error
// with extensions.code, in one place: db.InputError and malformed scalars
// are BAD_USER_INPUT with extensions.field (the input path; a subscriber's
// condition that does not compile adds extensions.line and
// extensions.column, 1-based), db.ErrNotFound
// NOT_FOUND, db.ErrConflict CONFLICT (a refused transition, a
// db.StatusConflictError, with extensions.currentStatus and
// extensions.currentVersion of the document), and so is db.ErrBusy (a
// write that concurrent ones kept failing: nothing written, try again;
// logged as a warning), jobs.NatsUnreachableError UNAVAILABLE. Anything else unexpected is INTERNAL:
// logged with a request id, which alone reaches the client.
func ErrorPresenter(logger *slog.Logger) graphql.ErrorPresenterFunc {
	return func(ctx context.Context, err error) *gqlerror.Error {
		gqlErr := graphql.DefaultErrorPresenter(ctx, err)
		setCode := func(code string) {
			if gqlErr.Extensions == nil {
				gqlErr.Extensions = map[string]any{}
			}
			gqlErr.Extensions["code"] = code
		}
		var inputErr *db.InputError
		var scalarErr *model.ScalarError
		var statusErr *db.StatusConflictError
		var natsErr *jobs.NatsUnreachableError
		switch {
		case errors.As(err, &statusErr):
			gqlErr.Message = statusErr.Error()
			setCode(CodeConflict)
			gqlErr.Extensions["currentStatus"] = statusErr.Status
			gqlErr.Extensions["currentVersion"] = statusErr.Version
		case errors.As(err, &inputErr):
			gqlErr.Message = inputErr.Error()
			setCode(CodeBadUserInput)
			if inputErr.Conflict {
				setCode(CodeConflict)
			}
			gqlErr.Extensions["field"] = inputErr.Field
			// A condition's error has its place in the client's text.
			var filterErr *jobs.FilterError
			if errors.As(err, &filterErr) && filterErr.Line > 0 {
				gqlErr.Extensions["line"], gqlErr.Extensions["column"] = filterErr.Line, filterErr.Column
			}
		case errors.As(err, &scalarErr):
			setCode(CodeBadUserInput)
			// The path is the field's, then its argument's; report the
			// argument path, as db.InputError fields are.
			if len(gqlErr.Path) > 1 {
				gqlErr.Extensions["field"] = pathString(gqlErr.Path[1:])
			} else {
				gqlErr.Extensions["field"] = pathString(gqlErr.Path)
			}
		case errors.As(err, &natsErr):
			gqlErr.Message = natsErr.Error()
			setCode(CodeUnavailable)
		case db.IsBadData(err):
			gqlErr.Message = "a value cannot be stored: text must be valid UTF-8 without NUL characters and numbers within range"
			setCode(CodeBadUserInput)
		case errors.Is(err, ErrUnauthenticated):
			setCode(CodeUnauthenticated)
		case errors.Is(err, ErrForbidden):
			setCode(CodeForbidden)
		case errors.Is(err, db.ErrNotFound):
			setCode(CodeNotFound)
		case errors.Is(err, db.ErrBusy):
			logger.WarnContext(ctx, "write gave up on concurrent writes", slog.String("request_id", RequestID(ctx)),
				slog.String("where", pathString(gqlErr.Path)), slog.String("error", err.Error()))
			gqlErr.Message = db.ErrBusy.Error()
			setCode(CodeConflict)
		case errors.Is(err, db.ErrConflict):
			setCode(CodeConflict)
		case errors.Is(err, context.Canceled):
			setCode(CodeInternal)
			gqlErr.Message = "request cancelled"
		case isOwnError(err):
			// gqlgen's own messages (validation, parsing) say nothing of
			// our internals; they carry their own code.
		default:
			e := InternalError(ctx, logger, pathString(gqlErr.Path), err)
			e.Path, e.Locations = gqlErr.Path, gqlErr.Locations
			gqlErr = e
		}
		return gqlErr
	}
}

// InternalError logs err with the request's id (a fresh one outside a
// request) and returns the error the client sees: INTERNAL and that id,
// nothing of err itself.
func InternalError(ctx context.Context, logger *slog.Logger, where string, err error) *gqlerror.Error {
	id := RequestID(ctx)
	if id == "" {
		id = uuid.NewString()
	}
	logger.ErrorContext(ctx, "request failed", slog.String("request_id", id),
		slog.String("where", where), slog.String("error", err.Error()))
	return &gqlerror.Error{Message: "internal error", Extensions: map[string]any{"code": CodeInternal, "requestId": id}}
}

// isOwnError reports an error made by gqlgen itself rather than returned
// by a resolver: a *gqlerror.Error that wraps nothing.
func isOwnError(err error) bool {
	var gqlErr *gqlerror.Error
	return errors.As(err, &gqlErr) && gqlErr.Unwrap() == nil
}

// Recover turns a resolver panic into an INTERNAL error (logged with its
// request id by ErrorPresenter) instead of a dead connection.
func Recover(_ context.Context, p any) error {
	return fmt.Errorf("panic: %v", p)
}

// pathString writes a path with dots, list indexes included:
// "input.lines.0.quantity", the form db.InputError fields take too.
func pathString(p ast.Path) string {
	parts := make([]string, len(p))
	for i, e := range p {
		parts[i] = fmt.Sprint(e)
	}
	return strings.Join(parts, ".")
}

// inArg prefixes the field of an *db.InputError with the argument it came
// in ("input"), so extensions.field is the full path of the bad value.
func inArg(arg string, err error) error {
	var filterErr *jobs.FilterError
	if errors.As(err, &filterErr) {
		e := *filterErr
		e.Field = arg + "." + e.Field
		return &e
	}
	var inputErr *db.InputError
	if errors.As(err, &inputErr) {
		e := *inputErr
		if e.Field == "" {
			e.Field = arg
		} else {
			e.Field = arg + "." + e.Field
		}
		return &e
	}
	return err
}

// versionArg is a transition's `version` argument as db takes it; versions
// start at 1, so anything else is BAD_USER_INPUT on field version.
func versionArg(v int) (int32, error) {
	if v < 1 || v > math.MaxInt32 {
		return 0, &db.InputError{Field: "version", Msg: fmt.Sprintf("a document version is 1 or more, got %d", v)}
	}
	return int32(v), nil
}
