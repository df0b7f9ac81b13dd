-- River's job table, as far as db/queries reads it (River's migrations
-- create the real one, with more columns). Given to sqlc only, so that
-- RiverJobCountByState type checks; this file is never run.
CREATE TYPE river_job_state AS ENUM ('available', 'cancelled', 'completed', 'discarded', 'pending', 'retryable', 'running', 'scheduled');

CREATE TABLE river_job (
    id    bigserial PRIMARY KEY,
    state river_job_state NOT NULL DEFAULT 'available'
);
