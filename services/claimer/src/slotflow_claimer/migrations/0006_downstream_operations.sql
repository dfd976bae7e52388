-- An operator's hand on a breaker, per-downstream settings, and what the views are told.

-- Opened by an operator (downstream.open): stays open, no cool-down and no probes, until one closes
-- it (downstream.close). Decided under the row lock like every other move.
ALTER TABLE {schema}.downstreams ADD COLUMN manual boolean NOT NULL DEFAULT false;
-- This downstream's own settings (downstream.configure), laid over the claimers' defaults: a
-- DownstreamSettings as JSON, '{}' for none. Read under the row lock with the breaker, so every
-- claimer applies the same policy to a decision.
ALTER TABLE {schema}.downstreams ADD COLUMN settings jsonb NOT NULL DEFAULT '{}';
-- When one claimer last sent DownstreamReported for it: the claimer that updates this (row lock,
-- SKIP LOCKED) reports, so N claimers send one report per interval, not N.
ALTER TABLE {schema}.downstreams ADD COLUMN reported_at timestamptz NOT NULL DEFAULT '-infinity';
-- The last report showed it idle (closed, nothing in the window, nothing held): an idle downstream
-- is reported once, then again only when something happens, not every interval forever.
ALTER TABLE {schema}.downstreams ADD COLUMN reported_idle boolean NOT NULL DEFAULT false;

-- Why a change happened (failures, cooldown, probe_succeeded, probe_failed, operator_open,
-- operator_close, configured) and, for an operator's, the command that asked.
ALTER TABLE {schema}.downstream_changes ADD COLUMN cause text NOT NULL DEFAULT '';
ALTER TABLE {schema}.downstream_changes ADD COLUMN reason text NOT NULL DEFAULT '';
ALTER TABLE {schema}.downstream_changes ADD COLUMN command_id text;

-- Held runs by job and slot: a held run is not admitted while an earlier slot of its job still
-- waits for the same downstream, and a closing breaker resumes them in slot order.
CREATE INDEX runs_held ON {schema}.runs (job_id, slot) WHERE held_reason IS NOT NULL;
