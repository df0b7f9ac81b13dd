-- +goose Up
-- Roles, named and expiring API tokens, and journal rows about users (token
-- issue and revocation are part of "who did what").

ALTER TABLE users ADD COLUMN role text NOT NULL DEFAULT 'viewer'
    CHECK (role IN ('admin', 'sales', 'warehouse', 'planner', 'integration', 'viewer'));
UPDATE users SET role = 'admin' WHERE login = 'admin';

ALTER TABLE api_tokens ADD COLUMN name text NOT NULL DEFAULT '' CHECK (length(name) <= 100);
ALTER TABLE api_tokens ADD CONSTRAINT api_tokens_times_check
    CHECK (expires_at IS NULL OR expires_at > created_at);
CREATE INDEX api_tokens_user ON api_tokens (user_id, id);

ALTER TABLE events DROP CONSTRAINT events_entity_check;
ALTER TABLE events ADD CONSTRAINT events_entity_check
    CHECK (entity IN ('sales_orders', 'plan_prod_orders', 'wh_moves', 'wh_purchase_orders', 'users'));

-- +goose Down
DELETE FROM events WHERE entity = 'users';
ALTER TABLE events DROP CONSTRAINT events_entity_check;
ALTER TABLE events ADD CONSTRAINT events_entity_check
    CHECK (entity IN ('sales_orders', 'plan_prod_orders', 'wh_moves', 'wh_purchase_orders'));
DROP INDEX api_tokens_user;
ALTER TABLE api_tokens DROP CONSTRAINT api_tokens_times_check;
ALTER TABLE api_tokens DROP COLUMN name;
ALTER TABLE users DROP COLUMN role;
