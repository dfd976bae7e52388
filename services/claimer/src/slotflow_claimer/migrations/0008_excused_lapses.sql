-- The fence tokens whose lapse was excused: their claimer was alive and lost its lease only because
-- the database was unreachable (its heartbeats failed), so that lapse says nothing about the run
-- and is taken back from lease_lapses. One excuse per token: a retried excuse changes nothing.
ALTER TABLE {schema}.runs ADD COLUMN excused_tokens bigint[] NOT NULL DEFAULT '{}';
