-- Every re-run an operator asked for (RerunSlots), one row per slot and re-run number. The number
-- counts per slot from 1; the claimer takes a re-run's JobDue only when a row here holds that
-- number for that slot, forced or not as the JobDue's run id says (a forced re-run is the run
-- `{run id}#rerun-{n}`), so a JobDue naming a re-run nobody asked for runs nothing.
CREATE TABLE {schema}.slot_reruns (
    schedule_id text        NOT NULL,
    slot        timestamptz NOT NULL,
    number      integer     NOT NULL CHECK (number > 0),
    forced      boolean     NOT NULL,
    command_id  text        NOT NULL,
    principal   text,
    reason      text        NOT NULL,
    issued_at   timestamptz NOT NULL,
    PRIMARY KEY (schedule_id, slot, number)
);

-- The one question another service may ask of this table: did the ticker issue re-run `number` of
-- this slot, forced or not? The claimer asks it before taking a re-run's JobDue. SECURITY DEFINER
-- runs it with the ticker's rights, so a role that may only execute it (USAGE on the schema,
-- `slotflow db bootstrap-roles`) learns that one answer and reads nothing else of the schema.
CREATE FUNCTION {schema}.rerun_issued(job_id text, slot timestamptz, number integer, forced boolean)
RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $body$
    SELECT EXISTS (
        SELECT 1 FROM {schema}.slot_reruns r
         WHERE r.schedule_id = rerun_issued.job_id AND r.slot = rerun_issued.slot
           AND r.number = rerun_issued.number AND r.forced = rerun_issued.forced
    )
$body$;
