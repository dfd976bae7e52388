-- The inbox: ids of consumed events whose effects are committed. Recording an id in the same
-- transaction as the effect turns Kafka's at-least-once delivery into effectively-once processing.
CREATE TABLE {schema}.inbox (
    event_id     text        PRIMARY KEY,  -- unique: a redelivered event is recognised, not re-applied
    topic        text        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX inbox_processed_at ON {schema}.inbox (processed_at);
