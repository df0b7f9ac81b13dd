-- +goose Up
-- A rotated webhook secret stays valid until previous_secret_until: every
-- request is signed with both until then (rotateWebhookSecret), so a
-- receiver can switch to the new secret at any moment of the grace period.
ALTER TABLE subscribers ADD COLUMN previous_secret text,
    ADD COLUMN previous_secret_until timestamptz,
    ADD CONSTRAINT subscribers_previous_secret_check CHECK ((previous_secret IS NULL) = (previous_secret_until IS NULL));

-- +goose Down
ALTER TABLE subscribers DROP CONSTRAINT subscribers_previous_secret_check,
    DROP COLUMN previous_secret_until, DROP COLUMN previous_secret;
