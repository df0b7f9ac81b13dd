-- name: NumberNow :exec
-- NumberNow makes the deferred constraint triggers fire now, not at
-- commit: the *_number triggers (migration 00015; the schema's only
-- deferred ones) number the documents this transaction inserted, and
-- those it inserts later, so that their numbers are readable in the
-- transaction; each series row taken stays locked until it ends.
SET CONSTRAINTS ALL IMMEDIATE;

-- name: NumberSeriesSetStart :execrows
-- NumberSeriesSetStart makes the last issued number of a series
-- last_value, unless the series has issued numbers past it already (no row
-- affected).
INSERT INTO number_series (prefix, year, last_value) VALUES (@prefix, @year, @last_value)
ON CONFLICT (prefix, year) DO UPDATE SET last_value = EXCLUDED.last_value
WHERE number_series.last_value <= EXCLUDED.last_value;
