-- API bearer tokens (slotflow_api.auth): only a SHA-256 of each secret is kept, so a copy of this
-- table cannot call the API. A rebuild of the read model keeps this table (KEPT_BY_REBUILD).
CREATE TABLE {schema}.api_tokens (
    token_id      text        PRIMARY KEY,   -- the public part of the secret (sft_<token_id>_...)
    name          text        NOT NULL,
    scope         text        NOT NULL CHECK (scope IN ('read', 'operate', 'admin')),
    secret_sha256 bytea       NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    created_by    text,
    revoked_at    timestamptz,
    revoked_by    text,
    last_used_at  timestamptz
);
-- One live token per name: `slotflow token revoke oncall` names one token.
CREATE UNIQUE INDEX api_tokens_live_name ON {schema}.api_tokens (name) WHERE revoked_at IS NULL;

-- Who issued each command (the envelope's principal), for "who paused, redrove, discarded what".
ALTER TABLE {schema}.commands ADD COLUMN principal text;
CREATE INDEX commands_by_publication ON {schema}.commands (published_at DESC, command_id DESC);
