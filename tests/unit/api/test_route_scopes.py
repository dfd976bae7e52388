"""Every API route has a scope in `ROUTE_SCOPES`, and the table names no route that is gone."""

from slotflow_api.app import create_app
from slotflow_api.auth import ROUTE_SCOPES, grants, new_token, required_scope, token_id_of


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
