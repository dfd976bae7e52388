"""Every API route has a scope in `ROUTE_SCOPES`, and the table names no route that is gone."""

from slotflow.contracts.scopes import COMMAND_SCOPES
from slotflow_api.app import create_app
from slotflow_api.auth import COMMAND_ROUTES, ROUTE_SCOPES, grants, new_token, required_scope, token_id_of


def test_the_scope_table_and_the_api_routes_are_the_same() -> None:
    spec = create_app().openapi()
    served = {(method.upper(), path) for path, ops in spec["paths"].items() for method in ops}
    assert served == set(ROUTE_SCOPES)
    # Only health, readiness and metrics are public, and the spec says which scope each needs.
    assert {k for k, v in ROUTE_SCOPES.items() if v is None} == {
        ("GET", "/healthz"),
        ("GET", "/readyz"),
        ("GET", "/metrics"),
    }
    assert spec["paths"]["/v1/dlq/redrive"]["post"]["security"] == [{"bearer": []}]
    assert "`operate` scope" in spec["paths"]["/v1/dlq/redrive"]["post"]["description"]
    assert spec["paths"]["/healthz"]["get"]["security"] == []


def test_scopes_nest_and_an_unknown_route_needs_admin() -> None:
    assert grants("admin", "operate")
    assert grants("operate", "read")
    assert grants("admin", "read")
    assert not grants("read", "operate")
    assert not grants("operate", "admin")
    assert required_scope("HEAD", "/v1/runs") == "read"
    assert required_scope("POST", "/v1/something-new") == "admin"
    assert required_scope("GET", None) == "admin"


def test_tokens_are_recognisable_and_carry_their_id() -> None:
    token_id, secret = new_token()
    assert secret.startswith(f"sft_{token_id}_")
    assert len(secret) > 50
    assert token_id_of(secret) == token_id
    assert token_id_of("sft_short") is None
    assert token_id_of("eyJhbGciOi.x.y") is None


def test_every_route_that_changes_something_names_its_command_or_is_admin() -> None:
    """A command route's scope is its command's (the table every service checks signed commands
    against), so the api and Kafka refuse a caller by one rule; tokens and keys are admin's."""
    # A query is a POST that changes nothing: it reads, with the read scope.
    reading = {("POST", "/v1/workflows/{workflow_id}/query")}
    assert all(ROUTE_SCOPES[route] == "read" for route in reading)
    changing = {route for route in ROUTE_SCOPES if route[0] != "GET"} - reading
    administrative = {route for route in changing if route[1].startswith(("/v1/tokens", "/v1/keys"))}
    assert changing - administrative == set(COMMAND_ROUTES)
    assert all(ROUTE_SCOPES[route] == "admin" for route in administrative)
    for route, command in COMMAND_ROUTES.items():
        assert ROUTE_SCOPES[route] == COMMAND_SCOPES[command], route
    assert ROUTE_SCOPES[("POST", "/v1/schedules/{schedule_id}/trigger")] == "operate"
    assert ROUTE_SCOPES[("POST", "/v1/schedules")] == "admin"
