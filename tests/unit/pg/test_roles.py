"""slotflow.pg.roles: the bootstrap script's roles, schemas and read grants agree with what the
services use (their schema settings, the orchestrator's payload schema), and names are checked."""

import pytest

from slotflow.pg.roles import SERVICE_ROLES, BadRolePrefix, bootstrap_sql, grant_table
from slotflow_api.config import ApiSettings
from slotflow_claimer.config import ClaimerSettings
from slotflow_dlq.config import DlqSettings
from slotflow_orchestrator.config import OrchestratorSettings
from slotflow_stats.config import StatsSettings
from slotflow_ticker.config import TickerSettings

SCHEMA_DEFAULTS = {
    "ticker": TickerSettings.model_fields["db_schema"].default,
    "claimer": ClaimerSettings.model_fields["db_schema"].default,
    "orchestrator": OrchestratorSettings.model_fields["db_schema"].default,
    "dlq": DlqSettings.model_fields["db_schema"].default,
    "stats": StatsSettings.model_fields["db_schema"].default,
    "api": ApiSettings.model_fields["db_schema"].default,
}


def test_every_service_with_a_schema_gets_a_role_owning_that_schema() -> None:
    assert {r.service: r.schema for r in SERVICE_ROLES} == SCHEMA_DEFAULTS


def test_the_read_grants_are_what_the_code_reads_across_schemas() -> None:
    reads = {(r.service, other) for r in SERVICE_ROLES for other in r.reads}
    payloads = OrchestratorSettings.model_fields["activity_payloads_schema"].default
    assert reads == {("orchestrator", payloads), ("api", "stats")}


def test_the_script_names_each_role_and_schema_quoted() -> None:
    script = "\n".join(bootstrap_sql("acme_"))
    for entry in SERVICE_ROLES:
        assert f'CREATE ROLE "acme_{entry.service}" LOGIN' in script
        assert f'CREATE SCHEMA IF NOT EXISTS "{entry.schema}" AUTHORIZATION "acme_{entry.service}"' in script
        assert f'REVOKE ALL ON SCHEMA "{entry.schema}" FROM PUBLIC' in script
    assert 'GRANT SELECT ON ALL TABLES IN SCHEMA "claimer" TO "acme_orchestrator"' in script
    assert (
        'ALTER DEFAULT PRIVILEGES FOR ROLE "acme_stats" IN SCHEMA "stats" GRANT SELECT ON TABLES TO "acme_api"'
        in script
    )
    # No placeholder left unfilled.
    assert "{" not in script.replace("{schema}", "")


def test_the_grant_table_has_one_owner_line_per_service_and_the_reads() -> None:
    rows = [(g.role, g.schema, g.rights) for g in grant_table()]
    assert ("slotflow_ticker", "ticker", "owner (all)") in rows
    assert ("slotflow_api", "stats", "USAGE, SELECT") in rows
    # The claimer asks the ticker whether it issued a re-run: USAGE on the schema, no table.
    assert ("slotflow_claimer", "ticker", "USAGE (its functions only)") in rows
    # And the orchestrator whether it cancelled a workflow's activity: the same, on its schema.
    assert ("slotflow_claimer", "orchestrator", "USAGE (its functions only)") in rows
    # The api asks the orchestrator's schema which orchestrator answers a workflow's queries.
    assert ("slotflow_api", "orchestrator", "USAGE (its functions only)") in rows
    assert len(rows) == len(SERVICE_ROLES) + 5


@pytest.mark.parametrize("prefix", ["Slotflow_", "a-b", "x'; DROP ROLE y; --", "", "1x"])
def test_a_prefix_that_is_not_a_plain_name_is_refused(prefix: str) -> None:
    with pytest.raises(BadRolePrefix):
        bootstrap_sql(prefix)
