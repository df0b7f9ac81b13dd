-- +goose Up
-- A document takes its number inside COMMIT: a deferred constraint trigger
-- runs at commit, after every statement of the transaction, so the
-- gapless series row (number_series) is locked only from there through
-- the commit's WAL flush, not for the rest of the transaction and the
-- round trips back to the server. The document is inserted with a unique
-- placeholder naming its series ('pending ЗК <uuid>'), never visible to
-- another transaction; the trigger takes the next number of that series,
-- writes it on the document and adds "no" to the document's doc.created
-- payload. A rolled-back transaction never reaches the trigger, or undoes
-- what it did, so every series stays gapless and follows commit order. A
-- transaction that needs a number before commit runs SET CONSTRAINTS ALL
-- IMMEDIATE (db.NumberNow) and holds the series from there. An exhausted
-- series (999999) fails the commit with check_violation on
-- number_series_last_value_check, the series in DETAIL.
-- +goose StatementBegin
CREATE FUNCTION take_document_number() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    series text := split_part(NEW.number, ' ', 2);
    -- text, not TG_TABLE_NAME's type name: compared with events.entity
    -- as name, the column could not use events_entity.
    tbl text := TG_TABLE_NAME;
    taken text;
BEGIN
    INSERT INTO number_series AS s (prefix, year, last_value)
    VALUES (series, extract(year FROM now())::int, 1)
    ON CONFLICT (prefix, year) DO UPDATE SET last_value = s.last_value + 1 WHERE s.last_value < 999999
    RETURNING s.prefix || '-' || s.year || '-' || lpad(s.last_value::text, 6, '0') INTO taken;
    IF taken IS NULL THEN
        RAISE EXCEPTION 'the % number series of this year is exhausted (999999)', series
            USING ERRCODE = 'check_violation', CONSTRAINT = 'number_series_last_value_check', DETAIL = series;
    END IF;
    CASE tbl
    WHEN 'sales_orders' THEN UPDATE sales_orders SET number = taken WHERE id = NEW.id;
    WHEN 'plan_prod_orders' THEN UPDATE plan_prod_orders SET number = taken WHERE id = NEW.id;
    WHEN 'wh_purchase_orders' THEN UPDATE wh_purchase_orders SET number = taken WHERE id = NEW.id;
    WHEN 'wh_moves' THEN UPDATE wh_moves SET number = taken WHERE id = NEW.id;
    END CASE;
    UPDATE events SET payload = payload || jsonb_build_object('no', taken)
    WHERE entity = tbl AND entity_id = NEW.id AND type = 'doc.created';
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE CONSTRAINT TRIGGER sales_orders_number AFTER INSERT ON sales_orders
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (starts_with(NEW.number, 'pending '))
    EXECUTE FUNCTION take_document_number();
CREATE CONSTRAINT TRIGGER plan_prod_orders_number AFTER INSERT ON plan_prod_orders
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (starts_with(NEW.number, 'pending '))
    EXECUTE FUNCTION take_document_number();
CREATE CONSTRAINT TRIGGER wh_purchase_orders_number AFTER INSERT ON wh_purchase_orders
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (starts_with(NEW.number, 'pending '))
    EXECUTE FUNCTION take_document_number();
CREATE CONSTRAINT TRIGGER wh_moves_number AFTER INSERT ON wh_moves
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (starts_with(NEW.number, 'pending '))
    EXECUTE FUNCTION take_document_number();

-- +goose Down
DROP TRIGGER sales_orders_number ON sales_orders;
DROP TRIGGER plan_prod_orders_number ON plan_prod_orders;
DROP TRIGGER wh_purchase_orders_number ON wh_purchase_orders;
DROP TRIGGER wh_moves_number ON wh_moves;
DROP FUNCTION take_document_number();
