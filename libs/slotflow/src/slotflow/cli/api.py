"""The CLI's synchronous face of `slotflow.client.HttpTransport` (queries, command status, tokens).

Every transport failure and error status becomes a `CliError` whose message says what to do.
"""

import asyncio
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import httpx

from slotflow.cli.errors import DEFAULT_API_URL, ApiRequestFailed, ApiUnavailable
from slotflow.client._http import HttpTransport, Params, path_segment
from slotflow.client.errors import ClientError

__all__ = ["DEFAULT_API_URL", "ApiClient", "Params", "path_segment"]
T = TypeVar("T")


class ApiClient:
    """Calls `{base_url}/v1/...` through `slotflow.client`'s HTTP transport; one per CLI invocation.

    The CLI is synchronous: each call runs the transport's coroutine on this client's own event
    loop, and the client's errors become the CLI's (`ApiRequestFailed` with the status, or
    `ApiUnavailable`), with the CLI's hints.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
        token: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = bool(token)
        self._runner = asyncio.Runner()
        self.transport = HttpTransport(
            self.base_url, token=token or None, timeout=timeout, transport=transport, client_name="cli"
        )

    def close(self) -> None:
        try:
            self._runner.run(self.transport.close())
        finally:
            self._runner.close()

    def __enter__(self) -> "ApiClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, call: Coroutine[Any, Any, T]) -> T:
        """``call`` (a transport coroutine) to its end, its client errors as the CLI's.

        Raises:
            ApiUnavailable: nothing answered at the base URL (or it timed out).
            ApiRequestFailed: the API answered 4xx/5xx; `.detail` is its message.
        """
        try:
            return self._runner.run(call)
        except ClientError as err:
            raise self._cli_error(err) from None

    def _cli_error(self, err: ClientError) -> ApiRequestFailed | ApiUnavailable:
        if err.status is None:
            return ApiUnavailable(str(err))
        detail = err.detail or str(err)
        if err.status == 401:
            hint = (
                "the token was refused"
                if self._token
                else "no token given: pass --token or set SLOTFLOW_TOKEN"
            )
            return ApiRequestFailed(401, f"{detail}; {hint}")
        return ApiRequestFailed(err.status, detail)

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
        return self.run(self.transport.request(method, path, params, json=json, timeout=timeout))

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
