-- Whether the last resume asked to catch up on the slots that passed while paused. False (the
-- default, and every automatic resume): each such slot is recorded as skipped with reason
-- `paused` and never fires. True (`ResumeSchedule.catch_up`): they meet the misfire policy like
-- slots missed while the ticker was down. A pause sets it back to false.
ALTER TABLE {schema}.schedules ADD COLUMN resume_catch_up boolean NOT NULL DEFAULT false;
