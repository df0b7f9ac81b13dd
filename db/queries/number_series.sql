-- name: NumberSeriesNext :one
-- NumberSeriesNext takes the next number of prefix's series for the current
-- year (database clock, session time zone), formatted "ЗК-2026-000422"; the
-- series row stays locked until the transaction ends. The
-- sales_orders_number trigger (migration 00016) takes a ЗК number the same
-- way at commit.
INSERT INTO number_series (prefix, year, last_value)
VALUES (@prefix, extract(year FROM now())::int, 1)
ON CONFLICT (prefix, year) DO UPDATE SET last_value = number_series.last_value + 1
RETURNING (prefix || '-' || year || '-' || lpad(last_value::text, 6, '0'))::text AS number;

-- name: NumberSeriesSetStart :execrows
-- NumberSeriesSetStart makes the last issued number of a series
-- last_value, unless the series has issued numbers past it already (no row
-- affected).
INSERT INTO number_series (prefix, year, last_value) VALUES (@prefix, @year, @last_value)
ON CONFLICT (prefix, year) DO UPDATE SET last_value = EXCLUDED.last_value
WHERE number_series.last_value <= EXCLUDED.last_value;
