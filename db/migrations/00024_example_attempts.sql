-- +goose Up
-- sendExampleEvent sends a type's catalog example to one webhook: no
-- journal event and no delivery stand behind it, yet its attempt is kept
-- in the attempt log, beside the subscriber's real attempts, and pruned
-- with them (RETENTION). Such a row has no event_id and no replay_id;
-- example_type names the catalog type and lease_holder holds the
-- request's webhook-id (example_<random>): an example takes no lease.
ALTER TABLE delivery_attempts ALTER COLUMN event_id DROP NOT NULL,
    ADD COLUMN example_type text,
    ADD CONSTRAINT delivery_attempts_example_check
        CHECK ((example_type IS NULL) = (event_id IS NOT NULL) AND (example_type IS NULL OR replay_id IS NULL));
CREATE INDEX delivery_attempts_examples ON delivery_attempts (subscriber_id, id) WHERE example_type IS NOT NULL;

-- +goose Down
DELETE FROM delivery_attempts WHERE example_type IS NOT NULL;
DROP INDEX delivery_attempts_examples;
ALTER TABLE delivery_attempts DROP CONSTRAINT delivery_attempts_example_check,
    DROP COLUMN example_type,
    ALTER COLUMN event_id SET NOT NULL;
