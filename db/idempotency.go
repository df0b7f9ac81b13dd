package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"erp/db/internal/dbsqlc"
)

// IdempotencyKey is a mutation request's Idempotency-Key as
// ClaimIdempotencyKey found it: Claimed when the caller now holds it
// (new, or its earlier claim had expired); otherwise the live claim's
// Fingerprint and, once its request was answered, Answer (nil while it
// runs).
type IdempotencyKey struct {
	Claimed     bool
	Fingerprint []byte
	Answer      *IdempotentAnswer
}

// IdempotentAnswer is the HTTP answer stored for an idempotency key:
// status, Content-Type and body.
type IdempotentAnswer struct {
	Status      int
	ContentType string
	Body        []byte
}

// ClaimIdempotencyKey claims key of user for a request of fingerprint (a
// SHA-256, 32 bytes) until lease from now, in one statement: on return
// nothing is held. A key another request claimed at the same instant is
// reported in progress under fingerprint: whichever it is, the caller
// can only be told to try again.
func ClaimIdempotencyKey(ctx context.Context, q Querier, user int64, key string, fingerprint []byte, lease time.Duration) (IdempotencyKey, error) {
	row, err := queries.IdempotencyKeyClaim(ctx, q, user, key, fingerprint, lease.Seconds())
	if errors.Is(err, pgx.ErrNoRows) {
		return IdempotencyKey{Fingerprint: fingerprint}, nil
	}
	if err != nil {
		return IdempotencyKey{}, fmt.Errorf("claim idempotency key %q of user %d: %w", key, user, translate(err))
	}
	k := IdempotencyKey{Claimed: row.Claimed, Fingerprint: row.Fingerprint}
	if row.Status != nil {
		k.Answer = &IdempotentAnswer{Status: int(*row.Status), ContentType: *row.ContentType, Body: row.Body}
	}
	return k, nil
}

// AnswerIdempotencyKey stores a, the answer to the claim of key by user
// for fingerprint, and keeps it until ttl after the claim. A claim that
// has expired meanwhile (and was taken over, or pruned) is left alone:
// ErrNotFound. Each call also deletes up to 10 expired keys, of any user.
func AnswerIdempotencyKey(ctx context.Context, q Querier, user int64, key string, fingerprint []byte, ttl time.Duration, a IdempotentAnswer) error {
	n, err := queries.IdempotencyKeyAnswer(ctx, q, dbsqlc.IdempotencyKeyAnswerParams{
		UserID: user, Key: key, Fingerprint: fingerprint, TtlS: ttl.Seconds(),
		Status: int16(a.Status), ContentType: a.ContentType, Body: a.Body,
	})
	if err != nil {
		return fmt.Errorf("answer idempotency key %q of user %d: %w", key, user, translate(err))
	}
	if n == 0 {
		return fmt.Errorf("answer idempotency key %q of user %d: claim expired: %w", key, user, ErrNotFound)
	}
	return nil
}

// ReleaseIdempotencyKey deletes the unanswered claim of key by user for
// fingerprint, so that the key can be sent again.
func ReleaseIdempotencyKey(ctx context.Context, q Querier, user int64, key string, fingerprint []byte) error {
	if err := queries.IdempotencyKeyRelease(ctx, q, user, key, fingerprint); err != nil {
		return fmt.Errorf("release idempotency key %q of user %d: %w", key, user, translate(err))
	}
	return nil
}
