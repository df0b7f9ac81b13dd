-- +goose Up
-- A subscriber's lag is read from indexes, never by scanning its delivery
-- history: delivered records are the bulk of the table (kept for
-- RETENTION), the open and dead ones are few. The counts by status come
-- from deliveries_by_subscriber (subscriber_id, status, …) alone.
--
-- The oldest open (pending or failed) record of a subscriber is the first
-- entry of its range here.
CREATE INDEX deliveries_open_age ON deliveries (subscriber_id, created_at) WHERE status IN ('pending', 'failed');
-- The newest delivered record of a subscriber is the last entry of its
-- range here. An index rather than a column on subscribers: a column
-- written by every successful delivery would be one hot row per
-- subscriber, serialising the commits of its concurrent deliveries.
CREATE INDEX deliveries_last_delivered ON deliveries (subscriber_id, delivered_at) WHERE status = 'delivered';

-- +goose Down
DROP INDEX deliveries_last_delivered;
DROP INDEX deliveries_open_age;
