"""The two clients: the API's calls (``Endpoints``) over a sync or an async httpx client.

Everything but sending is shared: the calls are built once (``_endpoints.py``), their answers
read by ``Call.settle`` and the retries decided by ``RetryPolicy``. Each client adds only its
loop of attempts, with its own way of sending and of waiting.
"""

import asyncio
import os
import time
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx

from context_client._calls import Call
from context_client._endpoints import Endpoints
from context_client.retry import RetryPolicy

__all__ = ["DEFAULT_TIMEOUT", "DEFAULT_URL", "AsyncContextClient", "ContextClient"]

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:8080"
URL_VARIABLE = "CONTEXT_SERVICE_URL"
API_KEY_VARIABLE = "CONTEXT_SERVICE_API_KEY"
# A payload may wait for a condense (the service's REQUEST_CONDENSE_TIMEOUT_S) before it answers.
DEFAULT_TIMEOUT = httpx.Timeout(60.0, connect=5.0)
USER_AGENT = "context-service-client/0.1.0"


def _options(
    base_url: str | None,
    api_key: str | None,
    timeout: httpx.Timeout | float,
    headers: dict[str, str] | None,
) -> dict[str, Any]:
    """The httpx client's options: the URL and key from the arguments, else the environment."""
    key = api_key if api_key is not None else os.environ.get(API_KEY_VARIABLE)
    sent = {"User-Agent": USER_AGENT, **(headers or {})}
    if key:
        sent["Authorization"] = f"Bearer {key}"
    return {
        "base_url": base_url or os.environ.get(URL_VARIABLE) or DEFAULT_URL,
        "timeout": timeout,
        "headers": sent,
    }


class ContextClient(Endpoints):
    """The context service over HTTP, blocking. Use it as a context manager, or ``close()``.

    ``base_url`` defaults to ``$CONTEXT_SERVICE_URL``, then ``http://127.0.0.1:8080``;
    ``api_key`` to ``$CONTEXT_SERVICE_API_KEY`` (sent as ``Authorization: Bearer``).
    ``transport`` replaces httpx's network transport (tests, proxies)."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        headers: dict[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        options = _options(base_url, api_key, timeout, headers)
        self._http = httpx.Client(**options, transport=transport)

    @property
    def base_url(self) -> str:
        return str(self._http.base_url)

    def _send(self, call: Call[T]) -> T:
        retries = 0
        while True:
            outcome: httpx.Response | httpx.TransportError
            try:
                outcome = self._http.request(**call.request_options())
            except httpx.TransportError as exc:
                outcome = exc
            delay = self.retry.delay_after(outcome, retries, call.idempotent)
            if delay is None:
                return call.settle(outcome)
            time.sleep(delay)
            retries += 1

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class AsyncContextClient(Endpoints):
    """The context service over HTTP, for asyncio: every call returns a coroutine. Use it as
    an async context manager, or ``await aclose()``. Arguments as :class:`ContextClient`'s
    (``transport``: e.g. ``httpx.ASGITransport(app)`` to call an app in-process)."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        headers: dict[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        options = _options(base_url, api_key, timeout, headers)
        self._http = httpx.AsyncClient(**options, transport=transport)

    @property
    def base_url(self) -> str:
        return str(self._http.base_url)

    async def _send(self, call: Call[T]) -> T:
        retries = 0
        while True:
            outcome: httpx.Response | httpx.TransportError
            try:
                outcome = await self._http.request(**call.request_options())
            except httpx.TransportError as exc:
                outcome = exc
            delay = self.retry.delay_after(outcome, retries, call.idempotent)
            if delay is None:
                return call.settle(outcome)
            await asyncio.sleep(delay)
            retries += 1

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()
