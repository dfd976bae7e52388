-- A workflow's memo and typed search attributes (docs/workflows.md, "Memo and search attributes";
-- docs/api.md, "Listing workflows by a query").
--
-- memo:              the start's JSON object, shown and never searched;
-- search_attributes: `{"Stage": {"type": "keyword", "value": "paid"}, ...}`, the run's attributes
--                    as its start and its upserts leave them. NULL only on a row the api made from
--                    a StartWorkflow command before any history came (the command's own then).
--
-- Why one jsonb column with a GIN index, not a typed side table (one row per attribute and value):
-- the column is written by the same statement that writes the rest of the row from the fold of
-- the history (STORE_WORKFLOW_STATE), so the invariant "what a query finds is what the history
-- says" holds by construction: there is no second table to keep in step on every refold, on a
-- rebuild's TRUNCATE, or on a retention purge, and a row can never be indexed under values it no
-- longer has. The GIN index (jsonb_path_ops) serves the equality a query mostly asks (`Customer =
-- 'acme'`, `IN (...)`, a bool, a keyword list holding a value) as one containment (`@>`) per value.
-- A range on a custom attribute (`Amount > 100`) is not served by it: it reads the attribute typed
-- (a CASE on the stored type, so a keyword is never cast to a number) in the rows the other
-- conditions leave, within the page's LIMIT. A side table would index ranges, at the price of that
-- second write path; the list's own filters (type, status, time) narrow first.
ALTER TABLE {schema}.workflows
    ADD COLUMN memo              jsonb,
    ADD COLUMN search_attributes jsonb;
CREATE INDEX workflows_search_attributes ON {schema}.workflows USING gin (search_attributes jsonb_path_ops);
