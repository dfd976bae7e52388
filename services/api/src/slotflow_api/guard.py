"""The dependency every API route runs: authenticate the caller, check the route's scope."""

from fastapi import Request

from slotflow_api.app_state import services
from slotflow_api.auth import CURRENT_PRINCIPAL, Forbidden, Principal, grants, required_scope


async def authorize(request: Request) -> Principal | None:
    """Authenticate the caller and check the route's scope; the principal (None on a public route).

    Raises:
        Unauthenticated: no token, or one that is not good (401).
        Forbidden: the token's scope is below the route's (403).
    """
    route = request.scope.get("route")
    needed = required_scope(request.method, getattr(route, "path_format", None))
    if needed is None:
        return None
    principal = await services(request).auth.authenticate(request.headers.get("authorization"))
    if not grants(principal.scope, needed):
        raise Forbidden(
            f"this needs the {needed!r} scope; {principal.name} holds {principal.scope!r} "
            "(docs/security.md lists what each scope allows)"
        )
    CURRENT_PRINCIPAL.set(principal)
    return principal
