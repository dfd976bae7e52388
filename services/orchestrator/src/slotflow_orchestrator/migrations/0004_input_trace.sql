-- The W3C `traceparent` of the record an input was consumed from, kept while tracing is on (NULL
-- otherwise, and for the inputs the orchestrator writes itself): the decision that takes the input
-- links its span to it, so a workflow's trace leads back to each command, activity outcome and
-- timer that moved it, whichever orchestrator decides and however long the input waited.
ALTER TABLE {schema}.inputs ADD COLUMN trace_parent text;
