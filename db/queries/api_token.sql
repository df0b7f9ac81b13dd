-- name: APITokenInsertIfAbsent :exec
-- APITokenInsertIfAbsent stores a token of user_id by its hash unless that
-- hash is stored already.
INSERT INTO api_tokens (user_id, token_hash, name) VALUES (@user_id, @token_hash, @name)
ON CONFLICT (token_hash) DO NOTHING;

-- name: APITokenInsert :one
INSERT INTO api_tokens (user_id, token_hash, name, expires_at)
VALUES (@user_id, @token_hash, @name, sqlc.narg(expires_at))
RETURNING id, user_id, name, created_at, expires_at, revoked_at, last_used_at;

-- name: APITokenGetByID :one
SELECT id, user_id, name, created_at, expires_at, revoked_at, last_used_at
FROM api_tokens WHERE id = @id;

-- name: APITokenList :many
-- APITokenList lists tokens newest first, of user_id's user only when
-- user_id is not null.
SELECT id, user_id, name, created_at, expires_at, revoked_at, last_used_at
FROM api_tokens
WHERE sqlc.narg(user_id)::bigint IS NULL OR user_id = sqlc.narg(user_id)
ORDER BY id DESC;

-- name: APITokenRevoke :one
-- APITokenRevoke revokes token id now; no row when it does not exist or is
-- revoked already.
UPDATE api_tokens SET revoked_at = now() WHERE id = @id AND revoked_at IS NULL
RETURNING id, user_id, name, created_at, expires_at, revoked_at, last_used_at;

-- name: APITokenGetOwner :one
-- APITokenGetOwner returns the user owning the valid (not revoked, not
-- expired) token of token_hash and when it expires, and notes its use: at
-- most one write a minute per token.
WITH t AS (
    SELECT k.id, k.user_id, k.expires_at FROM api_tokens k
    WHERE k.token_hash = @token_hash AND k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now())
), touch AS (
    UPDATE api_tokens a SET last_used_at = now() FROM t
    WHERE a.id = t.id AND (a.last_used_at IS NULL OR a.last_used_at < now() - interval '1 minute')
)
SELECT u.id, u.login, u.display_name, u.role, u.sources, t.expires_at FROM t JOIN users u ON u.id = t.user_id;

-- name: AuthChangePosition :one
-- AuthChangePosition returns the position of the last committed auth
-- change (auth_changes.seq) and the database's now.
SELECT last_seq, now()::timestamptz AS now FROM auth_change_counter;

-- name: AuthChangeListAfter :one
-- AuthChangeListAfter returns, in one snapshot, the database's now, the
-- last auth change position past after (after when none), the hashes, hex,
-- of the tokens revoked past after or expired after since and by now, and
-- the users whose role changed past after with their roles now (user_ids
-- and roles in the same order).
WITH c AS (SELECT seq, token_hash, user_id FROM auth_changes WHERE seq > @after::bigint)
SELECT now()::timestamptz AS now,
    coalesce((SELECT max(seq) FROM c), @after::bigint)::bigint AS last_seq,
    ARRAY(
        SELECT encode(token_hash, 'hex') FROM c WHERE token_hash IS NOT NULL
        UNION ALL
        SELECT encode(token_hash, 'hex') FROM api_tokens
        WHERE expires_at > @since::timestamptz AND expires_at <= now()
    )::text[] AS ended_keys,
    ARRAY(SELECT u.id FROM users u WHERE u.id IN (SELECT user_id FROM c) ORDER BY u.id)::bigint[] AS user_ids,
    ARRAY(SELECT u.role FROM users u WHERE u.id IN (SELECT user_id FROM c) ORDER BY u.id)::text[] AS roles;

-- name: APITokenExistsForUser :one
-- APITokenExistsForUser reports whether user_id has ever had a token:
-- revoked and expired ones count.
SELECT EXISTS (SELECT 1 FROM api_tokens WHERE user_id = @user_id);

-- name: AuthChangeDeleteOld :execrows
-- Up to @max_rows auth changes recorded before @before, oldest first.
DELETE FROM auth_changes WHERE seq IN (
    SELECT o.seq FROM auth_changes o WHERE o.changed_at < @before ORDER BY o.seq LIMIT @max_rows);
