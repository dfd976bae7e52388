"""Every statement the orchestrator runs, each with the invariant it protects; the modules that run
them (deciding, decider_loop, intake, leases, rebuild, retention) import them from here. `{schema}`
is the orchestrator's schema, quoted by `slotflow.pg.statements.sql`.
"""

# The lease check: the lease row read under FOR SHARE (its lease token is the column fence_token),
# so an acquisition (an UPDATE raising the token) waits for decisions in flight and no decision of
# the old token can commit after it. The transaction's clock comes with it (now() is the
# transaction's start either way).
LEASE_CHECK = "SELECT fence_token, now() AS now FROM {schema}.shard_leases WHERE shard = $1 FOR SHARE"

# Every row of the group locked in one statement, in workflow id order (two groups never wait on
# each other in a cycle; a workflow is in one group of a pass anyway).
LOCK_ROWS = (
    "SELECT workflow_id, workflow_type, status, execution_deadline, last_sequence, decided_with_token, "
    "start_command_id "
    "FROM {schema}.workflows WHERE workflow_id = ANY($1::text[]) ORDER BY workflow_id FOR UPDATE"
)

# Applied in arrival order; locked so a concurrent pass over the same workflows waits. An input
# recorded after this read waits for the next decision. `seen_at` is the database clock once the
# inputs are visible: every input read here was committed before it, so a timer the ticker fired
# (at or after its fire_at by that same clock) is never early by it, even in a transaction that
# began (`now()`) before the firing was recorded.
#
# An activity outcome's row comes with the claimer's record of the run it names (`{claimer}`: the
# claimer's schema, same database; the orchestrator's role may read it, docs/security.md), which
# is what backs the outcome (`slotflow.issuers`). The claimer commits a run's row in the
# transaction that stages the run's RunCompleted or RunDeadLettered in its outbox, so the row of
# any outcome on Kafka is there. Not locked (FOR UPDATE OF i): a completed row never changes
# again; a dead-lettered one only by a redrive, whose own outcome then follows. The result and
# error are read only for the terminal state they belong to (the history takes them from here).
# Used once the claimer's table exists (`CLAIMER_READY`): until a claimer first migrated the
# database, `LOCK_INPUTS_ALONE` locks the inputs and `CLAIMER_RUNS` reads the records apart, so a
# decision without an activity outcome (a start, a signal) never needs the claimer's schema.
LOCK_INPUTS = """
SELECT i.seq, i.workflow_id, i.envelope, clock_timestamp() AS seen_at, i.type, i.run_id AS backed,
       i.trace_parent,
       r.run_id, r.state, r.fence_token, r.attempt, r.handler, r.redrive_count,
       CASE WHEN r.state = 'completed' THEN r.result::text END AS result,
       CASE WHEN r.state = 'dead_lettered' THEN r.error::text END AS error
  FROM {schema}.inputs AS i LEFT JOIN {claimer}.runs AS r ON r.run_id = i.run_id
 WHERE i.workflow_id = ANY($1::text[])
 ORDER BY i.seq
   FOR UPDATE OF i
"""

LOCK_INPUTS_ALONE = """
SELECT i.seq, i.workflow_id, i.envelope, clock_timestamp() AS seen_at, i.type, NULL::text AS backed,
       NULL::text AS run_id, i.trace_parent
  FROM {schema}.inputs AS i
 WHERE i.workflow_id = ANY($1::text[])
 ORDER BY i.seq
   FOR UPDATE OF i
"""

# Whether the claimer's runs table is there to join (it never goes away once it is).
CLAIMER_READY = "SELECT to_regclass($1) IS NOT NULL"

# Where refused inputs came from, for their dead letters: read only when a decision refuses one
# (rare), from rows this transaction already locked.
ORIGINS = (
    "SELECT seq, origin_topic, origin_partition, origin_offset, origin_key, "
    "origin_headers::text AS origin_headers, origin_timestamp_ms "
    "FROM {schema}.inputs WHERE seq = ANY($1::bigint[]) AND origin_topic IS NOT NULL"
)

# The same records read apart: with `LOCK_INPUTS_ALONE`, and for outcomes recorded before the
# intake kept the run id (inputs.run_id NULL: an upgrade's in-flight inputs). One statement for
# the group, only when it has such outcomes; a schema without the table fails the decision, and
# the inputs wait.
CLAIMER_RUNS = (
    "SELECT run_id, state, fence_token, attempt, handler, redrive_count, "
    "CASE WHEN state = 'completed' THEN result::text END AS result, "
    "CASE WHEN state = 'dead_lettered' THEN error::text END AS error "
    "FROM {schema}.runs WHERE run_id = ANY($1::text[])"
)

# Only for workflows whose history this process does not hold from its own last commit.
HISTORY = (
    "SELECT workflow_id, type, data FROM {schema}.history WHERE workflow_id = ANY($1::text[]) "
    "ORDER BY workflow_id, sequence"
)

# (workflow_id, sequence) is the primary key: a second event at a taken sequence fails the whole
# transaction instead of forking a history.
APPEND = (
    "INSERT INTO {schema}.history (workflow_id, sequence, type, data, fence_token) "
    "SELECT w, s, t, d::json, $5 FROM unnest($1::text[], $2::int[], $3::text[], $4::text[]) AS u(w, s, t, d)"
)

# workflow_id is the primary key: two starts of one id cannot both create it.
CREATE_ROWS = """
INSERT INTO {schema}.workflows (workflow_id, shard, workflow_type, status, last_sequence,
    start_command_id, started_at, execution_deadline, decided_with_token)
SELECT w, $2, t, st, l, c, $7, d, $8
FROM unnest($1::text[], $3::text[], $4::text[], $5::int[], $6::text[], $9::timestamptz[])
    AS u(w, t, st, l, c, d)
"""

UPDATE_ROWS = """
UPDATE {schema}.workflows AS w SET status = u.st, last_sequence = u.l, decided_with_token = $4,
    closed_at = CASE WHEN u.st IN ('completed', 'failed', 'cancelled') THEN $5 ELSE w.closed_at END
FROM unnest($1::text[], $2::text[], $3::int[]) AS u(id, st, l)
WHERE w.workflow_id = u.id
"""

# A new run of a taken id (id_reuse_policy): the row describes the newest run from now on.
RESTART_ROWS = """
UPDATE {schema}.workflows AS w SET workflow_type = u.t, status = u.st, last_sequence = u.l,
    start_command_id = u.c, started_at = $2::timestamptz, execution_deadline = u.d,
    decided_with_token = $3,
    closed_at = CASE WHEN u.st IN ('completed', 'failed', 'cancelled') THEN $2::timestamptz END
FROM unnest($1::text[], $4::text[], $5::text[], $6::int[], $7::text[], $8::timestamptz[])
    AS u(id, t, st, l, c, d)
WHERE w.workflow_id = u.id
"""

DROP_INPUTS = "DELETE FROM {schema}.inputs WHERE seq = ANY($1::bigint[])"

# The activities a decision abandoned and asks the claimers to cancel (Step.activity_cancels): the
# orchestrator's record that `activity_cancel_issued` answers from, written with the CancelActivity
# in the outbox. A second request for one activity (a rebuild re-staging it) keeps the first row.
RECORD_ACTIVITY_CANCELS = """
INSERT INTO {schema}.activity_cancels (workflow_id, sequence, run_id, handler, reason)
SELECT * FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::text[])
ON CONFLICT (workflow_id, sequence) DO NOTHING
"""

# A refused input is parked, not applied: its inbox id goes with it, so the genuine record whose
# id a forgery borrowed (or a redrive of the parked one) is still taken when it comes.
FORGET_SEEN = "DELETE FROM {schema}.inbox WHERE event_id = ANY($1::text[])"


# Workflows of the held shards with waiting inputs, the oldest input first. Only the lease holder
# of a shard decides its workflows, and the decision transaction checks the lease's token again.
# Each held shard's oldest waiting workflows, up to $2 a shard, oldest first overall: a backlog on
# some shards (a survivor's own, when it takes over a dead orchestrator's shards) cannot keep
# the others' first inputs waiting behind it.
PENDING = """
SELECT w.workflow_id, sh.s AS shard
FROM unnest($1::int[]) AS sh(s),
    LATERAL (SELECT workflow_id, min(seq) AS first FROM {schema}.inputs WHERE shard = sh.s
             GROUP BY workflow_id ORDER BY min(seq) LIMIT $2) AS w
ORDER BY w.first
"""


# The replay window of signed commands is judged by the database's clock, never the host's.
DATABASE_NOW = "SELECT now()"

# The inbox entry and the input row in one statement each; the inbox's primary key is the dedupe.
RECORD_SEEN = (
    "INSERT INTO {schema}.inbox (event_id, topic) SELECT * FROM unnest($1::text[], $2::text[]) "
    "ON CONFLICT (event_id) DO NOTHING RETURNING event_id"
)

# Inputs the orchestrator writes itself (a child's end): no origin, never refused.
RECORD_INPUTS = (
    "INSERT INTO {schema}.inputs (workflow_id, shard, type, envelope) "
    "SELECT * FROM unnest($1::text[], $2::int[], $3::text[], $4::bytea[])"
)

# Consumed records, each with its value as consumed; an outcome also with where it came from, so
# the decision that refuses it parks the very record (origin columns NULL for commands); with
# tracing on, every input with the trace context its record carried (the decision links to it).
RECORD_CONSUMED = (
    "INSERT INTO {schema}.inputs (workflow_id, shard, type, envelope, origin_topic, origin_partition, "
    "origin_offset, origin_key, origin_headers, origin_timestamp_ms, run_id, trace_parent) "
    "SELECT * FROM unnest($1::text[], $2::int[], $3::text[], $4::bytea[], $5::text[], $6::int[], "
    "$7::bigint[], $8::bytea[], $9::jsonb[], $10::bigint[], $11::text[], $12::text[])"
)

# Invariant: only ids older than every input topic's redelivery window go; a redelivery of a
# command within the commands topic's retention must still be recognised (or it would be answered
# a second time, differently).
PRUNE_INBOX = "DELETE FROM {schema}.inbox WHERE processed_at < now() - make_interval(secs => $1)"


# Invariant: the lease token (column fence_token) only ever goes up, by one per acquisition; the
# UPDATE waits for every decision holding the row FOR SHARE, so no decision of an older token
# commits after it.
ACQUIRE = """
INSERT INTO {schema}.shard_leases AS l (shard, owner, fence_token) VALUES ($1, $2, 1)
ON CONFLICT (shard) DO UPDATE SET owner = EXCLUDED.owner, fence_token = l.fence_token + 1,
    acquired_at = now()
RETURNING fence_token
"""

# Only our own, current lease: a release never clears a successor's.
RELEASE = "UPDATE {schema}.shard_leases SET owner = NULL WHERE shard = $1 AND owner = $2 AND fence_token = $3"

OPEN_IN_SHARD = (
    "SELECT workflow_id FROM {schema}.workflows WHERE shard = $1 AND status = 'stuck' ORDER BY workflow_id"
)


# Whether the schema holds anything a rebuild would replace: a workflow, a history row, a waiting
# input, or an outbox row not yet relayed. An empty (or just migrated) schema holds none.
HAS_STATE = """
SELECT EXISTS (SELECT 1 FROM {schema}.workflows) OR EXISTS (SELECT 1 FROM {schema}.history)
    OR EXISTS (SELECT 1 FROM {schema}.inputs)
    OR EXISTS (SELECT 1 FROM {schema}.outbox WHERE published_at IS NULL)
"""

# --force: everything the topics rebuild goes; the payload table stays (it is on no topic).
CLEAR = (
    "TRUNCATE {schema}.workflows, {schema}.history, {schema}.inputs, {schema}.inbox, {schema}.outbox, "
    "{schema}.shard_leases"
)

# A lease token above any an orchestrator acquired before the rebuild: tokens count acquisitions
# (one per partition move), the database clock counts milliseconds since 1970, and a rebuild
# happens after whatever it replaces. Every later acquisition goes on from it by one.
REBUILD_TOKEN = "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint"  # noqa: S105 - a lease token, not a secret

# One lease row per shard, held by the rebuild under that token for its own decisions; the first
# orchestrator that is assigned a shard acquires it (token + 1).
SEED_LEASES = (
    "INSERT INTO {schema}.shard_leases (shard, owner, fence_token) "
    "SELECT s, $2, $3 FROM generate_series(0, $1 - 1) AS s"
)

# workflow_id is the primary key: the history topic's workflows are written once each.
INSERT_ROWS = """
INSERT INTO {schema}.workflows (workflow_id, shard, workflow_type, status, last_sequence, start_command_id,
    started_at, closed_at, execution_deadline, decided_with_token)
SELECT w, sh, t, st, l, c, sa, ca, d, $10
  FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::int[], $6::text[], $7::timestamptz[],
              $8::timestamptz[], $9::timestamptz[]) AS u(w, sh, t, st, l, c, sa, ca, d)
"""

# (workflow_id, sequence) is the primary key: one event per sequence, as the topic's first copy.
INSERT_HISTORY = (
    "INSERT INTO {schema}.history (workflow_id, sequence, type, data, fence_token) "
    "SELECT w, s, t, d::json, $5 FROM unnest($1::text[], $2::int[], $3::text[], $4::text[]) AS u(w, s, t, d)"
)

# The commands the topics show as handled: the intake's inbox ids for them (`intake.inbox_id`).
SEED_INBOX = "INSERT INTO {schema}.inbox (event_id, topic) SELECT unnest($1::text[]), $2 ON CONFLICT (event_id) DO NOTHING"

OPEN_WORKFLOWS = (
    "SELECT workflow_id, shard FROM {schema}.workflows WHERE status IN ('running', 'stuck') "
    "ORDER BY shard, workflow_id"
)

# What `check` compares.
TABLE_ROWS = (
    "SELECT workflow_id, workflow_type, status, last_sequence, start_command_id, execution_deadline, "
    "history_purged_at IS NOT NULL AS purged FROM {schema}.workflows"
)

TABLE_HISTORY = "SELECT workflow_id, sequence, type, data::text AS data FROM {schema}.history"

# History events staged and not yet relayed: in flight, not missing from the topic.
IN_FLIGHT = (
    "SELECT coalesce(event_ids, ARRAY[event_id]) AS ids FROM {schema}.outbox "
    "WHERE published_at IS NULL AND topic = $1"
)


# Closed workflows whose history is still here and that closed more than $1 seconds ago, at most
# $2, oldest first (workflows_closed_kept). Their rows are locked (FOR UPDATE, as a decision locks
# them), and a closed workflow is never appended to, so the one statement sees all of its history.
PURGE_CLOSED_HISTORIES = """
WITH doomed AS (
    SELECT workflow_id FROM {schema}.workflows
     WHERE status IN ('completed', 'failed', 'cancelled') AND history_purged_at IS NULL
       AND COALESCE(closed_at, started_at) < now() - make_interval(secs => $1)
     ORDER BY COALESCE(closed_at, started_at)
     LIMIT $2
       FOR UPDATE SKIP LOCKED
), emptied AS (
    DELETE FROM {schema}.history WHERE workflow_id IN (SELECT workflow_id FROM doomed)
)
UPDATE {schema}.workflows AS w SET history_purged_at = now()
  FROM doomed WHERE w.workflow_id = doomed.workflow_id
RETURNING w.workflow_id
"""


# The record of activity cancels older than $1 seconds, at most $2, oldest first: the claimers took
# each long before (its CancelActivity stays on its topic 7 days), so `activity_cancel_issued` is
# no longer asked about it.
PURGE_ACTIVITY_CANCELS = """
WITH doomed AS (
    SELECT workflow_id, sequence FROM {schema}.activity_cancels
     WHERE requested_at < now() - make_interval(secs => $1)
     ORDER BY requested_at
     LIMIT $2
       FOR UPDATE SKIP LOCKED
)
DELETE FROM {schema}.activity_cancels AS c USING doomed
 WHERE c.workflow_id = doomed.workflow_id AND c.sequence = doomed.sequence
RETURNING c.workflow_id
"""


# -- queries (queries.py, docs/decisions/0010) ------------------------------------------------------

# Where this orchestrator answers queries: the api reaches a shard's lease owner at this address
# (`query_route`). One row per instance id; a restart under the same id moves it.
REGISTER_QUERY_LISTENER = """
INSERT INTO {schema}.query_listeners (owner, address) VALUES ($1, $2)
ON CONFLICT (owner) DO UPDATE SET address = EXCLUDED.address, updated_at = now()
"""

# What a query needs of the workflow's row: its shard (the lease it must be answered under), its
# status, and whether its history was purged (nothing left to replay).
QUERY_WORKFLOW = """
SELECT shard, status, history_purged_at IS NOT NULL AS purged
  FROM {schema}.workflows WHERE workflow_id = $1
"""
