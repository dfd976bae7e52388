-- Every activity a workflow abandoned and the orchestrator asked the claimers to cancel
-- (CancelActivity on the internal topic activities.cancels): written in the decision that staged
-- the request, so a genuine request is always found here by the time a claimer reads it.
CREATE TABLE {schema}.activity_cancels (
    workflow_id  text        NOT NULL,
    sequence     integer     NOT NULL CHECK (sequence >= 1),
    run_id       text        NOT NULL,
    handler      text        NOT NULL,
    reason       text        NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workflow_id, sequence)
);

-- The one question another service may ask of this table: did the orchestrator ask to cancel the
-- activity of `workflow_id` at `sequence`? The claimer asks it before it acts on a CancelActivity,
-- so a record forged on the topic (a leaked credential, the plaintext mode) cancels nothing.
-- SECURITY DEFINER runs it with the orchestrator's rights, so a role that may only execute it
-- (USAGE on the schema, `slotflow db bootstrap-roles`) learns that one answer and reads nothing else.
CREATE FUNCTION {schema}.activity_cancel_issued(workflow_id text, sequence integer)
RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $body$
    SELECT EXISTS (
        SELECT 1 FROM {schema}.activity_cancels c
         WHERE c.workflow_id = activity_cancel_issued.workflow_id
           AND c.sequence = activity_cancel_issued.sequence
    )
$body$;
