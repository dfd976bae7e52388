-- The cron rules a stored definition was written under (slotflow_ticker.sql.CRON_RULES, now 2).
-- Rows stored before slotflow read cron with its own rules are 1; a ticker of this version writes
-- its rules with every definition it stores. At start, and at every housekeeping pass, a ticker
-- reviews the rows under older rules: one whose expression now reads differently is paused with
-- the reason, then every reviewed row is marked. Until then no ticker of this version claims it.
ALTER TABLE {schema}.schedules ADD COLUMN cron_rules smallint NOT NULL DEFAULT 1;

-- The rows still to review: empty once every stored schedule has been looked at once.
CREATE INDEX schedules_cron_rules_unreviewed ON {schema}.schedules (schedule_id) WHERE cron_rules < 2;
