-- The ticker's state: schedules (recurring and one-shot specs) and durable one-shot timers.
-- Every time decision compares against the database clock (now()); nothing here stores a host time.

CREATE TABLE {schema}.schedules (
    -- unique: one row per schedule id, so a second CreateSchedule for the same id is refused
    schedule_id   text        PRIMARY KEY,
    -- the ScheduleDefinition contract model as JSON; replaced whole by UpdateSchedule
    definition    jsonb       NOT NULL,
    -- raised by every definition change
    version       bigint      NOT NULL DEFAULT 1,
    paused        boolean     NOT NULL DEFAULT false,
    pause_reason  text        NOT NULL DEFAULT '',
    -- automatic resume instant (database clock); NULL: paused until a ResumeSchedule
    resume_at     timestamptz,
    -- the last pause interval: a slot skipped by the misfire policy inside it is reported as "paused"
    paused_at     timestamptz,
    resumed_at    timestamptz,
    -- the first slot on the grid that is neither fired nor recorded as skipped; NULL: no more slots
    next_slot     timestamptz,
    -- next_slot plus its deterministic jitter (or an earlier DST-skipped local time still to be
    -- recorded): what "due" is decided on, and the claim index
    next_fire_at  timestamptz,
    -- every slot (and every DST-skipped local time) at or before this instant is fired or recorded:
    -- the grid resumes strictly after it, so no slot is handled twice and none is passed over
    covered_until timestamptz NOT NULL,
    deleted       boolean     NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    -- the next slot lies beyond what is handled, so advancing can never re-fire a handled slot
    CONSTRAINT schedules_grid_ahead_of_coverage CHECK (next_slot IS NULL OR next_slot > covered_until)
);

-- The claim walks this index in fire order and stops after one batch, so its cost depends on the
-- batch size, not on how many schedules are stored (paused, deleted and finished rows are not in it).
CREATE INDEX schedules_due ON {schema}.schedules (next_fire_at)
    WHERE NOT paused AND NOT deleted AND next_fire_at IS NOT NULL;

-- Automatic resumes: only paused rows with a resume time are indexed.
CREATE INDEX schedules_auto_resume ON {schema}.schedules (resume_at)
    WHERE paused AND NOT deleted AND resume_at IS NOT NULL;

CREATE TABLE {schema}.timers (
    -- unique: StartTimer is idempotent on the timer id (a retry's "retry:{run_id}#{attempt}")
    timer_id   text        PRIMARY KEY,
    fire_at    timestamptz NOT NULL,
    -- the TimerAction contract model as JSON (FireJobDue or FireTimerFired)
    action     jsonb       NOT NULL,
    state      text        NOT NULL DEFAULT 'pending',
    created_at timestamptz NOT NULL DEFAULT now(),
    fired_at   timestamptz,
    CONSTRAINT timers_state CHECK (state IN ('pending', 'fired', 'cancelled')),
    -- a fired timer records when; a pending one has not fired
    CONSTRAINT timers_fired_at CHECK ((state = 'fired') = (fired_at IS NOT NULL))
);

CREATE INDEX timers_due ON {schema}.timers (fire_at) WHERE state = 'pending';
CREATE INDEX timers_finished ON {schema}.timers (created_at) WHERE state <> 'pending';
