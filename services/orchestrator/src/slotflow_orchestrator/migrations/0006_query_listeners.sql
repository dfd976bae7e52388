-- Where each orchestrator answers queries (docs/decisions/0010): its instance id, as its shard
-- leases name it, and the address of its query listener, written when it starts. A row outlives
-- its process, which is harmless: the api asks only a shard's current lease owner, and that owner
-- answers only for a shard it still holds under the token the api read.
CREATE TABLE {schema}.query_listeners (
    owner      text        PRIMARY KEY,
    address    text        NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- The one question the api may ask of this schema to send a query: who holds the lease of `shard`,
-- under which token, and where it listens. SECURITY DEFINER runs it with the orchestrator's rights,
-- so a role that may only execute it (USAGE on the schema, `slotflow db bootstrap-roles`) learns
-- that one answer and reads nothing else.
CREATE FUNCTION {schema}.query_route(shard integer)
RETURNS TABLE (lease_owner text, listener text, lease_token bigint)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $body$
    SELECT l.owner, q.address, l.fence_token
      FROM {schema}.shard_leases l
      JOIN {schema}.query_listeners q ON q.owner = l.owner
     WHERE l.shard = query_route.shard
$body$;
