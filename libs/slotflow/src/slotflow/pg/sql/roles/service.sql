-- One service's login role and the schema it owns; run by `slotflow db bootstrap-roles` as a
-- role that may create roles (a superuser, or one with CREATEROLE). Idempotent: a second run
-- changes nothing; run on an existing deployment it hands the schema's tables to the role.
--
-- Invariant: the role holds no power beyond this database and its schema: not a superuser, cannot
-- create databases or roles, replicate or bypass row security; it may connect, and it owns its
-- schema (so its migrations create and alter the tables there), but has no CREATE on the
-- database, so it cannot make another schema, and no right at all on other services' schemas
-- unless a read grant (read.sql) gives one.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = {role_name}) THEN
        CREATE ROLE {role} LOGIN;
    END IF;
END
$$;
ALTER ROLE {role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
DO $$
BEGIN
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO %I', current_database(), {role_name});
END
$$;
CREATE SCHEMA IF NOT EXISTS {schema} AUTHORIZATION {role};
ALTER SCHEMA {schema} OWNER TO {role};
REVOKE ALL ON SCHEMA {schema} FROM PUBLIC;
-- Tables and views made before the role existed (a deployment that ran as one role) become
-- its own; their identity and serial sequences follow their tables.
DO $$
DECLARE
    rel record;
BEGIN
    FOR rel IN
        SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = {schema_name} AND c.relkind IN ('r', 'p', 'v', 'm')
           AND c.relowner <> (SELECT oid FROM pg_roles WHERE rolname = {role_name})
    LOOP
        EXECUTE format('ALTER TABLE %I.%I OWNER TO %I', {schema_name}, rel.relname, {role_name});
    END LOOP;
END
$$;
