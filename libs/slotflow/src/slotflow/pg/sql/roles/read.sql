-- {reader} reads {schema}, which {owner} owns: USAGE on the schema, SELECT on its tables now and
-- on every table {owner} creates there later (default privileges, so a migration that adds a table
-- needs no second bootstrap). Invariant: read only: no INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES
-- or DDL in a schema that is not the reader's.
GRANT USAGE ON SCHEMA {schema} TO {reader};
GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {reader};
ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA {schema} GRANT SELECT ON TABLES TO {reader};
