-- {asker} may call the functions of {schema} (a function runs with the rights its definer gave
-- it: ticker.rerun_issued answers one question). Invariant: USAGE only: no SELECT, INSERT, UPDATE,
-- DELETE or DDL on any table of a schema that is not the asker's.
GRANT USAGE ON SCHEMA {schema} TO {asker};
