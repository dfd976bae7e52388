-- Activity cancellation (docs/claimer.md "Cancelling a workflow activity"): the orchestrator asks the
-- claimers to cancel an activity's run its workflow no longer waits on (CancelActivity on the
-- internal topic activities.cancels).
-- cancel_requested_at: when a cancel was first recorded on the run (database clock); the flag
-- `cancel_requested` is what the executor acts on (lease renewals and activity heartbeat writes
-- return it), this says since when.
ALTER TABLE {schema}.runs ADD COLUMN cancel_requested_at timestamptz;
-- Every cancel taken, one row per activity run, whether or not the claimer holds the run yet: a
-- run claimed after its cancel starts cancelled (the claim reads this table), and a lease renewal
-- that raced the cancel's arrival still learns of it here.
CREATE TABLE {schema}.activity_cancels (
    run_id       text        PRIMARY KEY,
    workflow_id  text        NOT NULL,
    sequence     integer     NOT NULL,
    reason       text        NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now()
);
