-- name: MigrationGetVersion :one
-- MigrationGetVersion returns the newest migration goose applied, 0 when none.
SELECT coalesce(max(version_id), 0)::bigint FROM goose_db_version WHERE is_applied;
