-- Where a consumed input came from: with `envelope` (the record's value as consumed, byte-exact),
-- everything a dead letter carries. A decision that refuses an input (an activity outcome the
-- claimer's record does not back, a timer firing the workflow does not wait on; slotflow.issuers)
-- parks that very record in the DLQ, so nothing is lost and a redrive sends the same bytes back.
-- NULL for the inputs the orchestrator writes itself (a child's end, never refused) and for inputs
-- recorded before this migration (their letter names the input instead of a Kafka position).
ALTER TABLE {schema}.inputs
    ADD COLUMN origin_topic        text,
    ADD COLUMN origin_partition    integer,
    ADD COLUMN origin_offset       bigint,
    ADD COLUMN origin_key          bytea,
    -- Header values as latin-1 text (every byte maps to one character, so they come back exact).
    ADD COLUMN origin_headers      jsonb,
    ADD COLUMN origin_timestamp_ms bigint,
    -- The run an activity outcome names, when it is its own `{workflow_id}/{sequence}` (no other
    -- run id can be backed): the decision joins the claimer's record of the run on it.
    ADD COLUMN run_id              text;
