-- +goose Up
-- The dispatch job of each event, by event: a dispatch transaction that
-- takes on a backlog deletes the jobs of the events it dispatched besides
-- its own (they would find nothing to do). River's GIN index on args finds
-- them too, but through the posting list of the key "event_id", which every
-- dispatch job shares (milliseconds per batch at 100,000 jobs).
CREATE INDEX river_job_dispatch_event ON river_job (((args ->> 'event_id')::bigint)) WHERE kind = 'dispatch_event';

-- +goose Down
DROP INDEX river_job_dispatch_event;
