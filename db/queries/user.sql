-- name: UserUpsertRole :one
-- UserUpsertRole creates user login, or gives an existing one role,
-- returning its id.
INSERT INTO users (login, display_name, role) VALUES (@login, @display_name, @role)
ON CONFLICT (login) DO UPDATE SET role = EXCLUDED.role
RETURNING id;

-- name: UserInsert :one
INSERT INTO users (login, display_name, role, sources) VALUES (@login, @display_name, @role, @sources)
RETURNING id, login, display_name, role, sources;

-- name: UserGetByID :one
SELECT id, login, display_name, role, sources FROM users WHERE id = @id;

-- name: UserGetByLogin :one
SELECT id, login, display_name, role, sources FROM users WHERE login = @login;

-- name: UserLockByLogin :one
-- UserLockByLogin is UserGetByLogin locking the user until the
-- transaction ends, for a writer of events about it.
SELECT id, login, display_name, role, sources FROM users WHERE login = @login FOR NO KEY UPDATE;

-- name: UserLock :one
-- UserLock locks user id until the transaction ends, for a writer of
-- events about it.
SELECT id FROM users WHERE id = @id FOR NO KEY UPDATE;

-- name: UserList :many
SELECT id, login, display_name, role, sources FROM users ORDER BY login;

-- name: UserSetRole :one
-- UserSetRole gives login role; a user that is no longer an integration
-- account loses its sources.
UPDATE users SET role = @role,
    sources = CASE WHEN @role = 'integration' THEN sources ELSE '{}' END
WHERE login = @login
RETURNING id, login, display_name, role, sources;

-- name: UserSetSources :one
UPDATE users SET sources = @sources WHERE login = @login
RETURNING id, login, display_name, role, sources;
