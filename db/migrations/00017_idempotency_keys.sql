-- +goose Up
-- Idempotency-Key (docs/api.md): a mutation request's key, per user, and
-- the answer its first request got. A row is claimed (status null: in
-- progress) in a statement of its own before the mutation runs, and
-- given its answer after it, so that it holds nothing while the mutation
-- runs and works across instances. expires_at is when an in-progress
-- claim whose request died may be claimed again (a short lease), and for
-- an answered one when the key is forgotten (created_at + IDEMPOTENCY_TTL).
-- fingerprint is the SHA-256 of the request's operation name, query text
-- and variables: the same key with another fingerprint is refused.
CREATE TABLE idempotency_keys (
    user_id      bigint NOT NULL REFERENCES users (id),
    key          text NOT NULL CHECK (key ~ '^[!-~]{1,255}$'),
    fingerprint  bytea NOT NULL CHECK (length(fingerprint) = 32),
    -- The answer: HTTP status, Content-Type and body, all null while the
    -- first request runs.
    status       smallint CHECK (status BETWEEN 100 AND 599),
    content_type text,
    body         bytea,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (user_id, key),
    CHECK ((status IS NULL) = (body IS NULL) AND (status IS NULL) = (content_type IS NULL))
);

-- Claims delete a few expired keys each (oldest first).
CREATE INDEX idempotency_keys_expires_at ON idempotency_keys (expires_at);

-- +goose Down
DROP TABLE idempotency_keys;
