"""A small synchronous client for the read-model API (queries and command status).

Every transport failure and error status becomes a `CliError` whose message says what to do.
"""

from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote

import httpx

from slotflow.cli.errors import DEFAULT_API_URL, ApiRequestFailed, ApiUnavailable

__all__ = ["DEFAULT_API_URL", "ApiClient", "Params", "path_segment"]
Params = Mapping[str, str | int | float | bool | None]


def path_segment(value: str) -> str:
    """``value`` escaped as one URL path segment (run ids hold `@`, `:` and `/`)."""
    return quote(value, safe="")


class ApiClient:
    """Calls `{base_url}/v1/...`; one instance per CLI invocation."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
        token: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        # X-Slotflow-Client: the API refuses state-changing requests without it or a JSON body (CSRF).
        headers = {"X-Slotflow-Client": "cli"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._token = bool(token)
        self._client = httpx.Client(
            base_url=self.base_url, timeout=timeout, transport=transport, headers=headers
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "ApiClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get(self, path: str, params: Params | None = None, *, timeout: float | None = None) -> Any:
        """GET ``path`` and return its JSON body.

        Raises:
            ApiUnavailable: nothing answered at the base URL (or it timed out).
            ApiRequestFailed: the API answered 4xx/5xx; `.detail` is its message.
        """
        return self.request("GET", path, params, timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        params: Params | None = None,
        *,
        json: Any = None,
        timeout: float | None = None,
    ) -> Any:
        """``method`` on ``path`` (with a JSON body if ``json`` is given); its JSON body.

        Raises:
            ApiUnavailable: nothing answered at the base URL (or it timed out).
            ApiRequestFailed: the API answered 4xx/5xx; `.detail` is its message.
        """
        query = {name: _param(value) for name, value in (params or {}).items() if value is not None}
        try:
            response = self._client.request(
                method,
                path,
                params=query,
                json=json,
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.TimeoutException as err:
            raise ApiUnavailable(
                f"the slotflow API at {self.base_url} did not answer in time ({type(err).__name__})"
            ) from None
        except httpx.TransportError as err:
            raise ApiUnavailable(
                f"cannot reach the slotflow API at {self.base_url}: {err}; "
                "start it (slotflow-api) or point SLOTFLOW_API_URL / --api-url at it"
            ) from None
        if response.status_code == 401:
            hint = (
                "the token was refused"
                if self._token
                else "no token given: pass --token or set SLOTFLOW_TOKEN"
            )
            raise ApiRequestFailed(401, f"{_detail(response)}; {hint}")
        if response.status_code >= 400:
            raise ApiRequestFailed(response.status_code, _detail(response))
        try:
            return response.json()
        except ValueError:
            raise ApiRequestFailed(
                response.status_code, f"the API at {self.base_url} sent a body that is not JSON"
            ) from None

    def pages(self, path: str, params: Params, *, follow: bool) -> Iterator[dict[str, Any]]:
        """Each page of a paginated listing; all of them when ``follow``, else only the first."""
        cursor = params.get("cursor")
        while True:
            page = self.get(path, {**params, "cursor": cursor})
            if not isinstance(page, dict):
                raise ApiRequestFailed(200, f"{path} returned {type(page).__name__}, expected a page object")
            yield page
            cursor = page.get("next_cursor")
            if not follow or not cursor:
                return


def _param(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        body = None
    detail: Any = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, list):
        # FastAPI's validation errors: [{"loc": [...], "msg": "..."}]
        parts = []
        for item in detail:
            if isinstance(item, dict):
                where = ".".join(str(p) for p in item.get("loc", ()) if p not in ("query", "body", "path"))
                parts.append(f"{where}: {item.get('msg')}" if where else str(item.get("msg")))
        detail = "; ".join(parts)
    if not detail:
        detail = response.text.strip()[:300] or response.reason_phrase
    return f"{detail} (HTTP {response.status_code})"
