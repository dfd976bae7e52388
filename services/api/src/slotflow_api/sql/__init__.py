"""Every statement the api runs, each a named constant with the invariant it protects beside it,
by area: `projection` (the projector, the projections and the fold of workflow histories),
`read_model` (the reads behind the routes), `retention` (the purges and the horizon), `auth` (API
tokens and signing keys) and `stats` (the stats processor's windows). The modules that run them
import each from the module of its area; nothing is re-exported here. `{schema}` is the schema a
statement runs in, quoted by `slotflow.pg.statements.sql`.
"""
