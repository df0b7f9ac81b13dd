package db

import (
	"errors"
	"fmt"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Domain errors. Callers test them with errors.Is; the GraphQL layer maps them
// to extensions.code NOT_FOUND and CONFLICT.
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("conflict")
	// ErrLocked: a row another transaction holds was asked for without
	// waiting (lock_not_available).
	ErrLocked = errors.New("locked by another transaction")
	// ErrBusy: a transaction PostgreSQL rolled back to let concurrent ones
	// go on (IsRetryableTx) every time it was run; nothing of it was
	// written, and the client may try again. The GraphQL layer maps it to
	// CONFLICT.
	ErrBusy = errors.New("concurrent changes to the same data kept getting in the way: nothing was written, try again")
)

// InputError is a rule violation in caller-supplied input. Field is the input
// path of the offending value as GraphQL clients see it, dot-separated with
// list indexes ("lines.0.quantity"); the GraphQL layer reports it as
// BAD_USER_INPUT.
//
// Conflict, when set, marks the input as clashing with existing data (a
// duplicate key) rather than being malformed; errors.Is(err, ErrConflict)
// then holds.
type InputError struct {
	Field    string
	Msg      string
	Conflict bool
}

func (e *InputError) Error() string { return e.Field + ": " + e.Msg }

// Is makes a conflicting input match ErrConflict.
func (e *InputError) Is(target error) bool { return e.Conflict && target == ErrConflict }

func conflictOn(field, format string, args ...any) *InputError {
	return &InputError{Field: field, Msg: fmt.Sprintf(format, args...), Conflict: true}
}

func inputErr(field, format string, args ...any) *InputError {
	return &InputError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Causes translate gives database errors that have no domain sentinel of
// their own; IsBadData, IsLockWait and IsRetryableTx ask for them.
var (
	errBadData       = errors.New("bad data")
	errDeadlock      = errors.New("deadlock")
	errSerialization = errors.New("serialization failure")
)

// dbError is a driver error as translate classified it: kind is the domain
// error it means (ErrConflict, ErrLocked, errBadData, errDeadlock,
// errSerialization) or nil, constraint the constraint or index an
// integrity violation names. It unwraps to both kind and the driver's
// error.
type dbError struct {
	kind       error
	constraint string
	err        error
}

func (e *dbError) Error() string {
	switch {
	case errors.Is(e.kind, ErrConflict):
		return ErrConflict.Error() + ": " + e.constraint
	case errors.Is(e.kind, ErrLocked):
		return ErrLocked.Error() + ": " + e.err.Error()
	}
	return e.err.Error()
}

func (e *dbError) Unwrap() []error {
	if e.kind == nil {
		return []error{e.err}
	}
	return []error{e.kind, e.err}
}

// translate maps a driver error to the domain errors above; every database
// error of this package passes through it, and it is the package's only
// reader of SQLSTATE codes. No rows is ErrNotFound; a unique violation is
// ErrConflict; lock_not_available is ErrLocked. Those and every other
// PostgreSQL error come back as a *dbError that wraps the driver's error
// and keeps the violated constraint's name (violatedConstraint). Other
// errors (nil, a cancelled context, a closed pool) pass through unchanged,
// and translating twice is the same as once.
func translate(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	var done *dbError
	var pgErr *pgconn.PgError
	if errors.As(err, &done) || !errors.As(err, &pgErr) {
		return err
	}
	e := &dbError{err: err}
	if pgerrcode.IsIntegrityConstraintViolation(pgErr.Code) {
		e.constraint = pgErr.ConstraintName
	}
	switch {
	case pgErr.Code == pgerrcode.UniqueViolation:
		e.kind = ErrConflict
	case pgErr.Code == pgerrcode.LockNotAvailable:
		e.kind = ErrLocked
	case pgErr.Code == pgerrcode.DeadlockDetected:
		e.kind = errDeadlock
	case pgErr.Code == pgerrcode.SerializationFailure:
		e.kind = errSerialization
	case pgerrcode.IsDataException(pgErr.Code):
		e.kind = errBadData
	}
	return e
}

// violatedConstraint returns the name of the constraint or unique index a
// translated err violates, "" when err is no integrity violation.
func violatedConstraint(err error) string {
	var e *dbError
	if errors.As(err, &e) {
		return e.constraint
	}
	return ""
}

// isCause reports whether translate classifies err as kind.
func isCause(err, kind error) bool {
	var e *dbError
	return errors.As(translate(err), &e) && errors.Is(e.kind, kind)
}

// IsBadData reports a value PostgreSQL refused to store or compare (SQLSTATE
// class 22, data exception: a NUL in text, a number out of range), which is
// the caller's input, not our fault.
func IsBadData(err error) bool { return isCause(err, errBadData) }

// IsLockWait reports an error that ended a wait for a lock rather than the
// statement's work: lock_timeout ran out (lock_not_available) or the wait
// closed a deadlock (deadlock_detected). Trying again later may succeed.
// An ErrLocked that no database error caused does not count.
func IsLockWait(err error) bool { return isCause(err, ErrLocked) || isCause(err, errDeadlock) }

// IsRetryableTx reports an error with which PostgreSQL failed a
// transaction only to let concurrent ones go on: it broke a deadlock
// (deadlock_detected) or found the transaction could not be serialized
// with them (serialization_failure). The transaction is rolled back, and
// the same work run again in a new one may well succeed.
func IsRetryableTx(err error) bool {
	return isCause(err, errDeadlock) || isCause(err, errSerialization)
}
