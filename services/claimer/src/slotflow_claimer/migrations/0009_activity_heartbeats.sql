-- Activity heartbeats (`ctx.heartbeat`, docs/claimer.md "Heartbeats"), not the lease's (heartbeat_at).
-- heartbeat_details: what the run's last heartbeat recorded, kept across attempts and takeovers, so
-- the next attempt resumes from it (`ctx.heartbeat_details`); written only under the run's current
-- fence token, like every other write of a running run.
ALTER TABLE {schema}.runs ADD COLUMN heartbeat_details jsonb;
-- heartbeat_deadline: when the running attempt fails for want of a heartbeat (database clock), for
-- a run whose retry policy has a heartbeat_timeout; NULL otherwise. Set by every claim (its start
-- counts as the first heartbeat) and moved on by every heartbeat written. The claimer running the
-- attempt enforces it itself; the reaper fails the attempts whose deadline passed while their
-- claimer could not (it froze, died or lost the database), taking the run with the next token.
ALTER TABLE {schema}.runs ADD COLUMN heartbeat_deadline timestamptz;
CREATE INDEX runs_running_heartbeat ON {schema}.runs (heartbeat_deadline)
    WHERE state = 'running' AND heartbeat_deadline IS NOT NULL;
