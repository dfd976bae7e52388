-- The newest announcement of each claimer (ClaimerAnnounced): which handlers it serves. A claimer
-- is live while its last announcement is younger than three of its intervals (database clock at
-- read time); announced_at comes from the event, so a rebuild gives the same rows.
CREATE TABLE {schema}.claimers (
    claimer_id   text        PRIMARY KEY,
    handlers     text[]      NOT NULL,
    interval_ms  bigint      NOT NULL,
    started_at   timestamptz NOT NULL,
    announced_at timestamptz NOT NULL
);
CREATE INDEX claimers_handlers ON {schema}.claimers USING gin (handlers);
