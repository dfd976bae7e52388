-- Headers are written once and read back whole by the relay; nothing queries inside them. jsonb
-- parsed them into its binary form on every insert and rebuilt the text on every relay read; json
-- keeps the text it was given (and still refuses anything that is not JSON).
ALTER TABLE {schema}.outbox
    ALTER COLUMN headers TYPE json USING headers::json,
    ALTER COLUMN headers SET DEFAULT '{}'::json;
