-- The definition is only ever read whole, as text, by the claim (once per claimed row) and by
-- commands: the ticker never looks inside it in SQL. jsonb rebuilt that text on every read (about
-- 5 us a claimed row, the largest part of the claim statement's cost); json keeps the text it was
-- given and still refuses anything that is not JSON.
ALTER TABLE {schema}.schedules ALTER COLUMN definition TYPE json USING definition::json;
