-- name: IdempotencyKeyClaim :one
-- IdempotencyKeyClaim claims key for user_id, in progress until
-- now() + lease_s, unless a claim of it is alive: claimed is true when
-- the key is new or its row had expired (taken over), and then the row
-- is the caller's; else the row is the live claim's (its fingerprint and,
-- once it has one, its answer). No row: a concurrent request claimed the
-- key during this statement.
WITH claimed AS (
    INSERT INTO idempotency_keys AS k (user_id, key, fingerprint, expires_at)
    VALUES (@user_id, @key, @fingerprint, now() + make_interval(secs => @lease_s::float8))
    ON CONFLICT (user_id, key) DO UPDATE
    SET fingerprint = excluded.fingerprint, status = NULL, content_type = NULL, body = NULL,
        created_at = excluded.created_at, expires_at = excluded.expires_at
    WHERE k.expires_at <= now()
    RETURNING k.fingerprint, k.status, k.content_type, k.body
)
SELECT true AS claimed, c.fingerprint, c.status, c.content_type, c.body FROM claimed c
UNION ALL
SELECT false, i.fingerprint, i.status, i.content_type, i.body FROM idempotency_keys i
WHERE i.user_id = @user_id AND i.key = @key AND NOT EXISTS (SELECT FROM claimed);

-- name: IdempotencyKeyAnswer :execrows
-- IdempotencyKeyAnswer stores the answer of the in-progress claim of key
-- with fingerprint and keeps it until ttl_s after the claim was made. No
-- row: the claim expired and was taken over or pruned. It also deletes
-- up to 10 expired keys of any user, oldest first, skipping those locked
-- (so it never waits for them), so that the table keeps about
-- IDEMPOTENCY_TTL of keys without a job of its own. (Not in the claim:
-- there a pruned row could be the key a concurrent claim waits to take
-- over while that claim's prune holds ours.)
WITH pruned AS (
    DELETE FROM idempotency_keys p
    WHERE (p.user_id, p.key) IN (
        SELECT o.user_id, o.key FROM idempotency_keys o
        WHERE o.expires_at <= now()
        ORDER BY o.expires_at
        LIMIT 10
        FOR UPDATE SKIP LOCKED)
)
UPDATE idempotency_keys k
SET status = @status::smallint, content_type = @content_type::text, body = @body::bytea,
    expires_at = k.created_at + make_interval(secs => @ttl_s::float8)
WHERE k.user_id = @user_id AND k.key = @key AND k.fingerprint = @fingerprint AND k.status IS NULL;

-- name: IdempotencyKeyRelease :exec
-- IdempotencyKeyRelease deletes the in-progress claim of key with
-- fingerprint, so that the key may be sent again.
DELETE FROM idempotency_keys
WHERE user_id = @user_id AND key = @key AND fingerprint = @fingerprint AND status IS NULL;
