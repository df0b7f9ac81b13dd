-- +goose Up
-- Revoked tokens and changed roles, in commit order, for every instance's
-- token watch (httpapi.Auth.WatchTokens) to read by position: seq > the
-- last one it read. A position is taken inside COMMIT by a deferred
-- constraint trigger that row-locks auth_change_counter until the commit
-- ends, as feed_counter does for the feed, so positions become visible in
-- increasing order and a reader never passes one that commits later. A
-- timestamp would not do: now() is the transaction's start, and a
-- revocation that commits after a poll that began after its start would
-- never be read. The lock is held from the trigger through the commit's
-- WAL flush only: revocations and role changes commit one at a time.
CREATE TABLE auth_changes (
    seq        bigint PRIMARY KEY,
    -- token_hash: a revoked token; user_id: a user whose role changed.
    token_hash bytea,
    user_id    bigint REFERENCES users (id),
    changed_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((token_hash IS NULL) <> (user_id IS NULL))
);

CREATE TABLE auth_change_counter (
    id       boolean PRIMARY KEY DEFAULT true CHECK (id),
    last_seq bigint NOT NULL
);
INSERT INTO auth_change_counter (last_seq) VALUES (0);

-- +goose StatementBegin
CREATE FUNCTION note_auth_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    pos bigint;
BEGIN
    UPDATE auth_change_counter SET last_seq = last_seq + 1 RETURNING last_seq INTO pos;
    IF TG_TABLE_NAME = 'api_tokens' THEN
        INSERT INTO auth_changes (seq, token_hash) VALUES (pos, NEW.token_hash);
    ELSE
        INSERT INTO auth_changes (seq, user_id) VALUES (pos, NEW.id);
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE CONSTRAINT TRIGGER api_tokens_revoked AFTER UPDATE OF revoked_at ON api_tokens
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (OLD.revoked_at IS NULL AND NEW.revoked_at IS NOT NULL)
    EXECUTE FUNCTION note_auth_change();
CREATE CONSTRAINT TRIGGER users_role_changed AFTER UPDATE OF role ON users
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (OLD.role IS DISTINCT FROM NEW.role)
    EXECUTE FUNCTION note_auth_change();

-- +goose Down
DROP TRIGGER users_role_changed ON users;
DROP TRIGGER api_tokens_revoked ON api_tokens;
DROP FUNCTION note_auth_change();
DROP TABLE auth_change_counter, auth_changes;
