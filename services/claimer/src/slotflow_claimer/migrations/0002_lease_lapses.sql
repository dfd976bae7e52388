-- Takeovers of a lease that lapsed while a claimer held it (the process died, froze, or lost the
-- database mid-run), as opposed to one released at shutdown. A run whose lease keeps lapsing is
-- likely killing its claimers: past a bound it is quarantined (dead-lettered) instead of being
-- handed to the next claimer. Reset when a redrive opens a fresh budget.
ALTER TABLE {schema}.runs ADD COLUMN lease_lapses integer NOT NULL DEFAULT 0 CHECK (lease_lapses >= 0);
-- Set by a graceful release (shutdown); the takeover that follows is not counted as a lapse.
ALTER TABLE {schema}.runs ADD COLUMN lease_released boolean NOT NULL DEFAULT false;
