-- Grouped rows: one outbox row may carry several events of one topic and one shard, staged by one
-- transaction (`append_grouped`), each event's id, key, value and headers at the same position of
-- the four arrays, in staging order. The row's own columns then name the group: `event_id` is its
-- first event's id with `+<count>` after it, `key` its first event's key, `value` empty. One row
-- per event cost PostgreSQL about 19 µs of CPU and 2.1 kB of WAL per event to stage and mark; a
-- group about 9.5 µs and 0.5 kB (bench/outbox_costs.py). Rows staged one by one keep NULL arrays.
--
-- Invariant: a group holds the events of one topic and one shard in their staging order, so each
-- key's records still leave in order: the relay takes rows in seq order and a row's events in
-- array order.
ALTER TABLE {schema}.outbox
    ADD COLUMN event_ids     text[],
    ADD COLUMN event_keys    text[],
    ADD COLUMN event_values  bytea[],
    ADD COLUMN event_headers text[],
    -- events in the row: 1 for a row of its own; the relay's pass is bounded in events, not rows
    ADD COLUMN event_count   integer NOT NULL DEFAULT 1;

-- One row per event, whether it was staged alone or in a group: what operators, tests and
-- benchmarks read to see events rather than rows.
CREATE VIEW {schema}.outbox_events AS
SELECT seq, topic, event_id, key, value, headers, created_at, published_at
  FROM {schema}.outbox
 WHERE event_ids IS NULL
UNION ALL
SELECT o.seq, o.topic, e.event_id, e.key, e.value, e.headers::json, o.created_at, o.published_at
  FROM {schema}.outbox AS o,
       unnest(o.event_ids, o.event_keys, o.event_values, o.event_headers) AS e(event_id, key, value, headers)
 WHERE o.event_ids IS NOT NULL;
