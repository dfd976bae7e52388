-- A redrive is a request to the owner of a letter's record, never a republication of its bytes
-- (docs/decisions/0009): the raw redrive outbox goes, the requests and their answers come.

-- Two statuses more: `redriving` while a request waits for its owner's answer, `redrive_failed`
-- when the owner (or this service, finding no owner) refused it, the reason in the note.
ALTER TABLE {schema}.dead_letters DROP CONSTRAINT dead_letters_status_check;
ALTER TABLE {schema}.dead_letters ADD CONSTRAINT dead_letters_status_check
    CHECK (status IN ('parked', 'redriving', 'redriven', 'redrive_failed', 'discarded'));

-- A workflow's parked activity: retried only through its workflow (a bulk redrive leaves it out).
ALTER TABLE {schema}.dead_letters ADD COLUMN workflow_id text;
ALTER TABLE {schema}.dead_letters ADD COLUMN sequence integer;
-- The latest request: only its answer moves the letter's status (an answer to a request a later one
-- replaced is kept on its row, and changes nothing).
ALTER TABLE {schema}.dead_letters ADD COLUMN request_id text;
ALTER TABLE {schema}.dead_letters ADD COLUMN redrive_target text;
CREATE INDEX dead_letters_workflow ON {schema}.dead_letters (workflow_id) WHERE workflow_id IS NOT NULL;

-- Letters of activity runs parked before this version name their workflow in their JobDue only.
UPDATE {schema}.dead_letters
   SET workflow_id = decoded -> 'data' ->> 'workflow_id',
       sequence = (decoded -> 'data' ->> 'sequence')::integer
 WHERE source_service = 'claimer'
   AND reason IN ('permanent_error', 'attempts_exhausted', 'unknown_handler', 'quarantined')
   AND decoded -> 'data' ->> 'workflow_id' IS NOT NULL
   AND jsonb_typeof(decoded -> 'data' -> 'sequence') = 'number';

-- Every redrive request and its answer. The id is random (128 bits, only on the internal redrive
-- topic), so an answer on the DLQ topic, which every consumer may write, counts only when it names
-- a request this service staged, for that letter, from the service it asked (store.answer).
CREATE TABLE {schema}.redrive_requests (
    request_id     text        PRIMARY KEY,
    dead_letter_id text        NOT NULL REFERENCES {schema}.dead_letters (id),
    command_id     text        NOT NULL,
    target         text        NOT NULL,  -- the owner asked; `dlq` for a refusal found at staging
    kind           text        NOT NULL CHECK (kind IN ('run', 'activity', 'record', 'none')),
    definition     text        NOT NULL,
    redrive        integer     NOT NULL,  -- the run's redrive number it carried
    requested_at   timestamptz NOT NULL DEFAULT now(),
    answered_at    timestamptz,           -- the first answer counts; later ones change nothing
    outcome        text        CHECK (outcome IN ('done', 'refused')),
    reason         text        NOT NULL DEFAULT ''
);
CREATE INDEX redrive_requests_letter ON {schema}.redrive_requests (dead_letter_id, requested_at);
-- The oldest unanswered request drives the redriving-age gauge.
CREATE INDEX redrive_requests_waiting ON {schema}.redrive_requests (requested_at) WHERE answered_at IS NULL;

-- Records the old relay never published (its topic refused it: the dlq may not write jobs.due in
-- the secured mode) go back to `parked`: nothing was redriven, and they can be redriven again.
UPDATE {schema}.dead_letters d
   SET status = 'parked', status_changed_at = now(),
       note = 'its earlier redrive was never sent (the old relay): redrive it again'
 WHERE EXISTS (SELECT 1 FROM {schema}.redrives r WHERE r.dead_letter_id = d.id AND r.published_at IS NULL);
DROP TABLE {schema}.redrives;
