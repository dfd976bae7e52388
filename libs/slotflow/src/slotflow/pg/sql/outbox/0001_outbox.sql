-- The transactional outbox: events staged in the same transaction as the state change they
-- describe, published to Kafka afterwards by the relay (slotflow.pg.outbox).
CREATE TABLE {schema}.outbox (
    seq          bigserial   PRIMARY KEY,
    topic        text        NOT NULL,
    event_id     text        NOT NULL,
    key          text        NOT NULL,
    -- hashtext(key) & 7: one relay at a time per shard, so records of one key leave in order
    shard        smallint    NOT NULL,
    value        bytea       NOT NULL,
    headers      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at   timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz,
    -- unique (topic, event_id): the same slot or outcome staged twice collapses to one row
    UNIQUE (topic, event_id)
);

-- The relay reads only what is pending, oldest first, per shard.
CREATE INDEX outbox_pending ON {schema}.outbox (shard, seq) WHERE published_at IS NULL;
CREATE INDEX outbox_published ON {schema}.outbox (published_at) WHERE published_at IS NOT NULL;
