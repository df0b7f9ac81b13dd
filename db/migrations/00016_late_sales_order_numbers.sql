-- +goose Up
-- A sales order takes its ЗК number inside COMMIT: a deferred constraint
-- trigger runs at commit, after every statement of the transaction, so the
-- gapless series row (number_series) is locked only from there through
-- the commit's WAL flush, not for a round trip back to the server and the
-- commit after it. The order is inserted with a unique placeholder
-- ('pending <uuid>'), never visible to another transaction; the trigger
-- takes the number, writes it on the order and adds "no" to the order's
-- doc.created payload. A rolled-back transaction never reaches the trigger,
-- or undoes what it did, so the series stays gapless. A transaction that
-- needs the number before commit runs SET CONSTRAINTS sales_orders_number
-- IMMEDIATE (db.NumberSalesOrder), and holds the lock from there.
-- +goose StatementBegin
CREATE FUNCTION sales_order_take_number() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    taken text;
BEGIN
    INSERT INTO number_series (prefix, year, last_value)
    VALUES ('ЗК', extract(year FROM now())::int, 1)
    ON CONFLICT (prefix, year) DO UPDATE SET last_value = number_series.last_value + 1
    RETURNING prefix || '-' || year || '-' || lpad(last_value::text, 6, '0') INTO taken;
    UPDATE sales_orders SET number = taken WHERE id = NEW.id;
    UPDATE events SET payload = payload || jsonb_build_object('no', taken)
    WHERE entity = 'sales_orders' AND entity_id = NEW.id AND type = 'doc.created';
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE CONSTRAINT TRIGGER sales_orders_number AFTER INSERT ON sales_orders
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (starts_with(NEW.number, 'pending '))
    EXECUTE FUNCTION sales_order_take_number();

-- +goose Down
DROP TRIGGER sales_orders_number ON sales_orders;
DROP FUNCTION sales_order_take_number();
