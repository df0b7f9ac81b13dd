package db

import (
	"errors"
	"fmt"
	"strings"

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

// translate maps driver errors to the domain errors above, in one place:
// no rows is ErrNotFound, a unique violation is ErrConflict, a lock not
// available is ErrLocked (wrapping the driver's error). Other errors pass
// through unchanged.
func translate(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UniqueViolation {
		return fmt.Errorf("%w: %s", ErrConflict, pgErr.ConstraintName)
	}
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.LockNotAvailable {
		return fmt.Errorf("%w: %w", ErrLocked, err)
	}
	return err
}

// uniqueViolation returns the name of the unique constraint or index err
// violates, "" when err is not a unique violation.
func uniqueViolation(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UniqueViolation {
		return pgErr.ConstraintName
	}
	return ""
}

// IsBadData reports a value PostgreSQL refused to store or compare (SQLSTATE
// class 22, data exception: a NUL in text, a number out of range), which is
// the caller's input, not our fault.
func IsBadData(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "22")
}

// IsLockWait reports an error that ended a wait for a lock rather than the
// statement's work: lock_timeout ran out (lock_not_available) or the wait
// closed a deadlock (deadlock_detected). Trying again later may succeed.
func IsLockWait(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.LockNotAvailable || pgErr.Code == pgerrcode.DeadlockDetected)
}
