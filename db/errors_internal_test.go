package db

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestTranslate(t *testing.T) {
	t.Parallel()
	pg := func(code, constraint string) error {
		return fmt.Errorf("run statement: %w", &pgconn.PgError{Code: code, ConstraintName: constraint, Message: "msg " + code})
	}
	errPlain := errors.New("plain")
	tests := []struct {
		name       string
		err        error
		is         error
		constraint string
		lockWait   bool
		badData    bool
		retryable  bool
		// msg is the message of the translated error: tt.err's own when
		// empty, else msg followed by tt.err's when it ends in ": ".
		msg string
	}{
		{name: "no rows", err: fmt.Errorf("scan: %w", pgx.ErrNoRows), is: ErrNotFound, msg: "not found"},
		{name: "unique", err: pg(pgerrcode.UniqueViolation, "items_sku_key"), is: ErrConflict, constraint: "items_sku_key", msg: "conflict: items_sku_key"},
		{name: "check", err: pg(pgerrcode.CheckViolation, seriesLimitCheck), constraint: seriesLimitCheck},
		{name: "lock not available", err: pg(pgerrcode.LockNotAvailable, ""), is: ErrLocked, lockWait: true, msg: "locked by another transaction: "},
		{name: "deadlock", err: pg(pgerrcode.DeadlockDetected, ""), lockWait: true, retryable: true},
		{name: "serialization failure", err: pg(pgerrcode.SerializationFailure, ""), retryable: true},
		{name: "data exception", err: pg(pgerrcode.CharacterNotInRepertoire, ""), badData: true},
		{name: "other database error", err: pg(pgerrcode.UndefinedTable, "")},
		{name: "not a database error", err: errPlain, is: errPlain},
		{name: "cancelled", err: context.Canceled, is: context.Canceled},
		{name: "locked, but not by the database", err: fmt.Errorf("wait: %w", ErrLocked), is: ErrLocked},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := translate(tt.err)
			if tt.is != nil && !errors.Is(got, tt.is) {
				t.Errorf("translate(%v) = %v, want it to match %v", tt.err, got, tt.is)
			}
			if c := violatedConstraint(got); c != tt.constraint {
				t.Errorf("violatedConstraint = %q, want %q", c, tt.constraint)
			}
			if IsLockWait(tt.err) != tt.lockWait || IsLockWait(got) != tt.lockWait {
				t.Errorf("IsLockWait = %v (translated %v), want %v", IsLockWait(tt.err), IsLockWait(got), tt.lockWait)
			}
			if IsBadData(tt.err) != tt.badData || IsBadData(got) != tt.badData {
				t.Errorf("IsBadData = %v (translated %v), want %v", IsBadData(tt.err), IsBadData(got), tt.badData)
			}
			if IsRetryableTx(tt.err) != tt.retryable || IsRetryableTx(got) != tt.retryable {
				t.Errorf("IsRetryableTx = %v (translated %v), want %v", IsRetryableTx(tt.err), IsRetryableTx(got), tt.retryable)
			}
			want := tt.msg
			switch {
			case want == "":
				want = tt.err.Error()
			case strings.HasSuffix(want, ": "):
				want += tt.err.Error()
			}
			if got.Error() != want {
				t.Errorf("message %q, want %q", got.Error(), want)
			}
			if again := translate(got); again.Error() != got.Error() {
				t.Errorf("translated twice: %q, once: %q", again.Error(), got.Error())
			}
			var pgErr *pgconn.PgError
			if errors.As(tt.err, &pgErr) && !errors.As(got, &pgErr) {
				t.Errorf("translate(%v) lost the driver's error", tt.err)
			}
		})
	}
}
