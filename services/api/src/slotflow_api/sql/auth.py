"""The statements over the api's own credentials: the API tokens (`slotflow_api.auth` reads them to
authenticate, `slotflow_api.tokens` creates and revokes them) and the signing keys
(`slotflow_api.keys`). Neither table is projected from a topic: a rebuild keeps both. `{schema}` is
the api's schema, quoted by `slotflow.pg.statements.sql`.
"""

from slotflow.pg.statements import compose

# -- authenticating a token (auth) ----------------------------------------------------------------

# The token's row by its id (the public part of the secret); the digest is compared in Python with
# hmac.compare_digest, so the lookup never depends on how much of the secret is right.
TOKEN_ROW_BY_ID = "SELECT name, scope, secret_sha256, revoked_at FROM {schema}.api_tokens WHERE token_id = $1"  # noqa: S105 - a statement, not a secret
# Last use, written at most once a minute per token (not one write per request).
MARK_TOKEN_USED = (
    "UPDATE {schema}.api_tokens SET last_used_at = now() WHERE token_id = $1 "  # noqa: S105 - a statement, not a secret
    "AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')"
)


# -- API tokens (tokens) -------------------------------------------------------------------------

_TOKEN_COLUMNS = "token_id, name, scope, created_at, created_by, revoked_at, revoked_by, last_used_at"  # noqa: S105 - columns, not a secret

# One live token per name (the partial unique index `api_tokens_live_name`): a second create with
# a live name fails with a unique violation, answered 409. The secret itself is never stored.
INSERT_TOKEN = compose(
    "INSERT INTO {schema}.api_tokens (token_id, name, scope, secret_sha256, created_by) "
    "VALUES ($1, $2, $3, $4, $5) RETURNING {columns}",
    columns=_TOKEN_COLUMNS,
)
# Newest first; revoked ones only when asked (they stay, so who revoked what stays known).
LIST_TOKENS = compose(
    "SELECT {columns} FROM {schema}.api_tokens WHERE $1 OR revoked_at IS NULL "
    "ORDER BY created_at DESC, token_id",
    columns=_TOKEN_COLUMNS,
)
# Revoking is final and idempotent on the row: a revoked token is never live again (its digest
# stays, so `authenticate` says "revoked" rather than "unknown"). By id first, then by live name:
# a name that looks like another token's id cannot revoke that other token by accident.
REVOKE_TOKEN_BY_ID = compose(
    "UPDATE {schema}.api_tokens SET revoked_at = now(), revoked_by = $2 "
    "WHERE token_id = $1 AND revoked_at IS NULL RETURNING {columns}",
    columns=_TOKEN_COLUMNS,
)
REVOKE_TOKEN_BY_NAME = compose(
    "UPDATE {schema}.api_tokens SET revoked_at = now(), revoked_by = $2 "
    "WHERE name = $1 AND revoked_at IS NULL RETURNING {columns}",
    columns=_TOKEN_COLUMNS,
)


# -- signing keys (keys) -------------------------------------------------------------------------

_KEY_COLUMNS = "key_id, name, principal, scope, public_key, acts_for_others, created_at, created_by, revoked_at, revoked_by"

# A key id is derived from its public key (primary key), so a key is registered once: a key once
# revoked can never be live again under the same or a new name. One live key per name (the
# partial unique index `signing_keys_live_name`). Both violations are answered 409.
INSERT_KEY = compose(
    "INSERT INTO {schema}.signing_keys (key_id, name, principal, scope, public_key, acts_for_others, created_by) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {columns}",
    columns=_KEY_COLUMNS,
)
# The api's own key at start: inserted once (a key file reused across restarts finds its row).
INSERT_OWN_KEY = compose(
    "INSERT INTO {schema}.signing_keys (key_id, name, principal, scope, public_key, acts_for_others, created_by) "
    "VALUES ($1, $2, $3, 'admin', $4, true, 'api') ON CONFLICT (key_id) DO NOTHING RETURNING {columns}",
    columns=_KEY_COLUMNS,
)
KEY_BY_ID = compose("SELECT {columns} FROM {schema}.signing_keys WHERE key_id = $1", columns=_KEY_COLUMNS)
# Newest first; revoked ones only when asked (they stay, so who revoked what stays known).
LIST_KEYS = compose(
    "SELECT {columns} FROM {schema}.signing_keys WHERE $1 OR revoked_at IS NULL "
    "ORDER BY created_at DESC, key_id",
    columns=_KEY_COLUMNS,
)
# Revoking is final: a revoked key is never live again (the keyring keeps a revocation even if a
# later record said otherwise). By id first, then by live name, as for tokens.
REVOKE_KEY_BY_ID = compose(
    "UPDATE {schema}.signing_keys SET revoked_at = now(), revoked_by = $2 "
    "WHERE key_id = $1 AND revoked_at IS NULL RETURNING {columns}",
    columns=_KEY_COLUMNS,
)
REVOKE_KEY_BY_NAME = compose(
    "UPDATE {schema}.signing_keys SET revoked_at = now(), revoked_by = $2 "
    "WHERE name = $1 AND revoked_at IS NULL RETURNING {columns}",
    columns=_KEY_COLUMNS,
)
