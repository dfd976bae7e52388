-- Signing keys (slotflow_api.keys): the public half of each principal's Ed25519 key, the scope it
-- signs commands with, and its revocation. Every change is staged in the outbox in the same
-- transaction and published to the keys topic, which every command consumer reads. A rebuild of
-- the read model keeps this table and the outbox (KEPT_BY_REBUILD).
CREATE TABLE {schema}.signing_keys (
    key_id          text        PRIMARY KEY,   -- k_ and 32 hex of the SHA-256 of the public key
    name            text        NOT NULL,
    principal       text        NOT NULL,      -- key:<name>, or service:api for the api's own keys
    scope           text        NOT NULL CHECK (scope IN ('read', 'operate', 'admin')),
    public_key      text        NOT NULL,      -- 32 raw bytes, base64url
    acts_for_others boolean     NOT NULL DEFAULT false,
    created_at      timestamptz NOT NULL DEFAULT now(),
    created_by      text,
    revoked_at      timestamptz,
    revoked_by      text
);
-- One live key per name: `slotflow key revoke alice` names one key.
CREATE UNIQUE INDEX signing_keys_live_name ON {schema}.signing_keys (name) WHERE revoked_at IS NULL;
