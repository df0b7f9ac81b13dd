-- +goose Up
-- An integration account is bound to the order sources it receives for
-- (receiveOrder): the shop's token cannot write, nor learn of, the CRM's
-- orders. Only an integration account has sources; an integration account
-- with none receives nothing. An existing integration account is bound to
-- the sources it has received orders for, so that it keeps working.
ALTER TABLE users ADD COLUMN sources text[] NOT NULL DEFAULT '{}'
    CHECK (sources <@ ARRAY['shop', 'crm']);
UPDATE users u SET sources = ARRAY(
    SELECT DISTINCT s.source FROM sales_orders s
    WHERE s.created_by = u.id AND s.source <> 'manual' ORDER BY s.source)
WHERE u.role = 'integration';
ALTER TABLE users ADD CONSTRAINT users_sources_role_check
    CHECK (role = 'integration' OR sources = '{}');

-- +goose Down
ALTER TABLE users DROP COLUMN sources;
