-- +goose Up
-- The events still waiting for their dispatch: a dispatch transaction takes
-- on the oldest of them besides its own event (ClaimUndispatchedEvents) and
-- the sweep lists them. Small: an event leaves it when dispatched.
CREATE INDEX events_undispatched ON events (id) WHERE dispatched_at IS NULL AND processed_at IS NULL;

-- +goose Down
DROP INDEX events_undispatched;
