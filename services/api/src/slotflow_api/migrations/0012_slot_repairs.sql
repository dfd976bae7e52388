-- An operator's repairs of a schedule's slots, from the ticker's SlotsRerun and SlotsMarked: one
-- row per slot and event (a SlotsRerun or SlotsMarked seen again adds nothing). The audit shows
-- them beside each slot's verdict: who re-ran or marked it, when and why, and a forced re-run's
-- own run (`{run id}#rerun-{n}`).
CREATE TABLE {schema}.slot_repairs (
    schedule_id text        NOT NULL,
    slot        timestamptz NOT NULL,
    event_id    text        NOT NULL,
    at          timestamptz NOT NULL,
    action      text        NOT NULL CHECK (action IN ('rerun', 'forced_rerun', 'marked_done', 'marked_skipped')),
    run_id      text,
    number      integer,
    principal   text,
    reason      text        NOT NULL,
    PRIMARY KEY (event_id, slot)
);
CREATE INDEX slot_repairs_by_slot ON {schema}.slot_repairs (schedule_id, slot, at);
