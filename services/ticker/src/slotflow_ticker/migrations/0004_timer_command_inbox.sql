-- The command ids of the internal timer topic (StartTimer and CancelTimer from the claimers and the
-- orchestrators), kept apart from the inbox of the public schedule-command topic. The inbox knows
-- a redelivery by its id alone, and a public command may carry any id: one recorded first under
-- the predictable id of an issuer's timer command (`retry:{run_id}#{attempt}`, `{timer_id}/start`)
-- would make the ticker skip the real command as a redelivery, and the retry or the sleep would
-- never fire. Only the issuers may write the internal topic, so only they can take an id here.
CREATE TABLE {schema}.timer_inbox (
    event_id     text        PRIMARY KEY,  -- unique: a redelivered timer command is recognised, not re-applied
    processed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX timer_inbox_processed_at ON {schema}.timer_inbox (processed_at);
