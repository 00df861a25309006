"""What the HTTP backends share: one POST per attempt, retries, error mapping, key redaction.

A subclass says where to POST (``path``), with which headers and body, and where the text is in
the answer. Each attempt is bounded by ``timeout_s`` as a whole (not only per socket read);
timeouts, connection errors, 429 and 5xx are retried with exponential backoff (a server's
Retry-After is honoured up to ``backoff_max_s``); other 4xx and unusable answers are not.
"""

import asyncio
import json
import logging
import random
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

import httpx
import orjson
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from app.llm.base import BackendConfig, chat_messages
from app.llm.errors import LLMBadResponse, LLMError, LLMRejected, LLMTimeout, LLMUnavailable
from app.observability.metrics import Metrics

__all__ = ["MAX_RESPONSE_BYTES", "HTTPBackend"]

log = logging.getLogger("app.llm")

MAX_RESPONSE_BYTES = 16 * 1024 * 1024
_EXCERPT_CHARS = 300
_THINK = re.compile(r"^\s*<think>.*?</think>", re.DOTALL)


class HTTPBackend(ABC):
    """A chat backend over a shared ``httpx.AsyncClient``; see the module docstring."""

    kind: str = ""
    path: str = ""  # appended to the base URL, e.g. "/v1/chat/completions"
    default_base_url: str = ""

    def __init__(
        self,
        client: httpx.AsyncClient,
        config: BackendConfig,
        *,
        name: str = "default",
        metrics: Metrics | None = None,
    ) -> None:
        self.name = name
        self.metrics = metrics
        self.model = config.model
        self.window = config.window
        self._client = client
        self.config = config
        self.url = endpoint(config.base_url or self.default_base_url, self.path)
        self._timeout = httpx.Timeout(config.timeout_s)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, model={self.model!r}, url={self.url!r})"

    # What a kind of backend says -------------------------------------------------------------

    @abstractmethod
    def headers(self) -> dict[str, str]:
        """Request headers (the API key goes here, and only here)."""

    @abstractmethod
    def body(self, messages: list[dict[str, str]], max_tokens: int) -> dict[str, Any]:
        """The JSON request body."""

    @abstractmethod
    def text(self, data: Any) -> str:
        """The assistant's text in a 2xx JSON answer (KeyError/IndexError/TypeError if absent)."""

    # The call --------------------------------------------------------------------------------

    async def complete(self, messages: list[dict[str, Any]], *, max_tokens: int) -> str:
        """The assistant's text; raises an LLMError subclass (see app.llm.errors)."""
        if max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        body = self.body(chat_messages(messages), max_tokens)
        attempts = 0

        async def attempt() -> str:
            nonlocal attempts
            attempts += 1
            return await self._attempt(body)

        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.config.max_retries + 1),
            wait=self._wait,
            retry=retry_if_exception(lambda exc: isinstance(exc, LLMError) and exc.retryable),
            before_sleep=self._before_sleep,
            reraise=True,
        )
        started = time.monotonic()
        try:
            text: str = await retrying(attempt)
        except LLMError as exc:
            exc.attempts = attempts
            if self.metrics is not None:
                self.metrics.llm_call(self.kind, time.monotonic() - started, exc)
            log.warning("%s: giving up: %s", self._label(), exc)
            raise
        if self.metrics is not None:
            self.metrics.llm_call(self.kind, time.monotonic() - started, None)
        log.debug(
            "%s: %d chars in %.2fs (%d attempts)",
            self._label(),
            len(text),
            time.monotonic() - started,
            attempts,
        )
        return text

    async def relay(
        self, body: dict[str, Any], headers: Mapping[str, str] | None = None
    ) -> httpx.Response:
        """POST ``body`` unchanged to this backend's endpoint with its own key (and ``headers``)
        and return the answer open for streaming; the caller reads and closes it.

        Attempts as :meth:`complete` makes them: timeouts, connection errors, 429 and 5xx are
        retried with backoff. When the attempts are used up, the last answer (429, 5xx) is
        returned as it came, for the caller to pass on; a timeout or a connection error raises
        LLMTimeout or LLMUnavailable. The timeout bounds the wait for the answer's headers; a
        streamed body is bounded per read.
        """
        content = orjson.dumps(body)
        sent = self.headers() | dict(headers or {}) | {"content-type": "application/json"}
        started = time.monotonic()
        attempts, attempt = self.config.max_retries + 1, 0
        while True:
            attempt += 1
            request = self._client.build_request(
                "POST", self.url, content=content, headers=sent, timeout=self._timeout
            )
            error: LLMError
            try:
                async with asyncio.timeout(self.config.timeout_s):
                    response = await self._client.send(request, stream=True)
            except (TimeoutError, httpx.TimeoutException):
                error = self._error(LLMTimeout, f"no answer within {self.config.timeout_s}s")
            except httpx.TransportError as exc:
                error = self._error(LLMUnavailable, f"{type(exc).__name__}: {exc}")
            else:
                status = response.status_code
                if attempt == attempts or not (status in (408, 429) or status >= 500):
                    if self.metrics is not None:
                        self.metrics.llm_call(self.kind, time.monotonic() - started, None)
                    return response
                await response.aclose()
                error = LLMUnavailable(
                    f"HTTP {status}",
                    backend=self.name,
                    status_code=status,
                    retry_after=_retry_after(response.headers),
                )
            if attempt == attempts:
                error.attempts = attempts
                if self.metrics is not None:
                    self.metrics.llm_call(self.kind, time.monotonic() - started, error)
                log.warning("%s: giving up: %s", self._label(), error)
                raise error
            wait = self._backoff(attempt, error)
            log.warning(
                "%s: attempt %d failed: %s; retrying in %.2fs",
                self._label(),
                attempt,
                error,
                wait,
            )
            await asyncio.sleep(wait)

    async def _attempt(self, body: dict[str, Any]) -> str:
        try:
            async with asyncio.timeout(self.config.timeout_s):
                response, raw = await self._post(body)
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise self._error(LLMTimeout, f"no answer within {self.config.timeout_s}s") from exc
        except httpx.TransportError as exc:
            raise self._error(LLMUnavailable, f"{type(exc).__name__}: {exc}") from exc
        except httpx.HTTPError as exc:
            raise self._error(LLMBadResponse, f"{type(exc).__name__}: {exc}") from exc
        self._check_status(response, raw)
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise self._error(
                LLMBadResponse, f"answer is not JSON: {self._excerpt(raw)!r}", response
            ) from exc
        try:
            text = self.text(data)
        except (AttributeError, KeyError, IndexError, TypeError, ValueError) as exc:
            raise self._error(
                LLMBadResponse, f"no text in the answer: {self._excerpt(raw)!r}", response
            ) from exc
        text = _THINK.sub("", text, count=1).strip()
        if not text:
            raise self._error(LLMBadResponse, "the answer's text is empty", response)
        return text

    async def _post(self, body: dict[str, Any]) -> tuple[httpx.Response, bytes]:
        request = self._client.build_request(
            "POST", self.url, json=body, headers=self.headers(), timeout=self._timeout
        )
        response = await self._client.send(request, stream=True)
        try:
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > MAX_RESPONSE_BYTES:
                    raise self._error(
                        LLMBadResponse, f"answer larger than {MAX_RESPONSE_BYTES} bytes", response
                    )
                chunks.append(chunk)
        finally:
            await response.aclose()
        return response, b"".join(chunks)

    def _check_status(self, response: httpx.Response, raw: bytes) -> None:
        status = response.status_code
        if 200 <= status < 300:
            return
        said = f"HTTP {status}: {self._excerpt(_error_message(raw))!r}"
        if status == 408:
            raise self._error(LLMTimeout, said, response)
        if status == 429 or status >= 500:
            raise LLMUnavailable(
                self._redact(said),
                backend=self.name,
                status_code=status,
                retry_after=_retry_after(response.headers),
            )
        if 400 <= status < 500:
            raise self._error(LLMRejected, said, response)
        raise self._error(LLMBadResponse, said, response)

    # Helpers ---------------------------------------------------------------------------------

    def _error(
        self, cls: type[LLMError], message: str, response: httpx.Response | None = None
    ) -> LLMError:
        status = response.status_code if response is not None else None
        return cls(self._redact(message), backend=self.name, status_code=status)

    def _redact(self, text: str) -> str:
        key = self.config.api_key.get_secret_value() if self.config.api_key else ""
        return text.replace(key, "[redacted]") if key else text

    def _excerpt(self, raw: bytes | str) -> str:
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        text = self._redact(text.strip())
        return text if len(text) <= _EXCERPT_CHARS else text[:_EXCERPT_CHARS] + "..."

    def _label(self) -> str:
        return f"llm {self.name} ({self.kind} {self.model})"

    def _wait(self, state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome else None
        return self._backoff(state.attempt_number, error)

    def _backoff(self, attempt_number: int, error: BaseException | None) -> float:
        """The wait after failed attempt ``attempt_number``: exponential, capped, a server's
        Retry-After honoured up to the cap, with a little jitter."""
        cap = self.config.backoff_max_s
        wait = min(cap, self.config.backoff_s * 2.0 ** (attempt_number - 1))
        hint = error.retry_after if isinstance(error, LLMUnavailable) else None
        if hint is not None:
            wait = max(wait, min(hint, cap))
        return wait + random.uniform(0, wait / 10)

    def _before_sleep(self, state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        sleep = state.next_action.sleep if state.next_action else 0.0
        log.warning(
            "%s: attempt %d failed: %s; retrying in %.2fs",
            self._label(),
            state.attempt_number,
            error,
            sleep,
        )


def endpoint(base_url: str, path: str) -> str:
    """``base_url`` + ``path``; a base URL that already ends with the path's first segment
    (".../v1", ".../api") or with the whole path is accepted as well."""
    url = httpx.URL(base_url.strip())
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError("base URL must look like http(s)://host[:port][/prefix]")
    if url.userinfo or url.query or url.fragment:
        # Credentials go in the API key setting, where they are kept secret; not in a URL.
        raise ValueError("base URL may not carry credentials, a query or a fragment")
    base = str(url).rstrip("/")
    first = "/" + path.strip("/").split("/")[0]
    for suffix in (path, first):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
            break
    return base + path


def _error_message(raw: bytes) -> str:
    """The provider's own error message when the body is a JSON error, else the raw text."""
    text = raw.decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except ValueError:
        return text
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, str):
        return error
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    return text


def _retry_after(headers: httpx.Headers) -> float | None:
    """Seconds from ``retry-after-ms`` or ``retry-after`` (seconds form only)."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            continue
        if 0 <= seconds < 3600:
            return seconds
    return None
