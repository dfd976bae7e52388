"""The statement the api finds a workflow's query listener with (`slotflow_api.workflow_queries`).

It calls the orchestrator's `query_route` function in the orchestrators' schema (`{schema}`): the
one thing of that schema the api's role may execute, which answers who holds a shard's lease,
under which token, and where its query listener is (docs/decisions/0010).
"""

# Who holds the shard's lease, where it listens, under which token; no row: nobody serves queries
# for the shard (no lease owner, or an owner without a listener).
QUERY_ROUTE = "SELECT lease_owner, listener, lease_token FROM {schema}.query_route($1)"
