-- Redrives through the letters' owners (docs/decisions/0009): a letter's workflow (a parked
-- activity, retried only through it), the service asked to redrive it, and what a consumer said
-- it did with a command, its summary (CommandAccepted's subject: "redrove 3 dead letter(s); ...").
ALTER TABLE {schema}.dead_letters ADD COLUMN workflow_id text;
ALTER TABLE {schema}.dead_letters ADD COLUMN sequence integer;
ALTER TABLE {schema}.dead_letters ADD COLUMN redrive_target text;
CREATE INDEX dead_letters_status ON {schema}.dead_letters (status, first_seen, dead_letter_id);
ALTER TABLE {schema}.commands ADD COLUMN summary text;
