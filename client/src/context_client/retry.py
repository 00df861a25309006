"""When a call is tried again, and after how long. Pure: the transports do the waiting.

A call that may be repeated without effect (every read, a create with its uuid, an append with
its Idempotency-Key) is retried whenever the outcome is unknown or a failure: a broken
connection, a timeout, a 5xx, a 429. Any other call (a status change, a plan entry) is retried
only when it surely did nothing: the connection was never made, or the answer was 429 or 503
(refused before any work: a proxy's limit, uvicorn's connection limit, or the service's store
that cannot be written and acknowledged nothing).
"""

import email.utils
import random
import time
from dataclasses import dataclass

import httpx

# Failures before any byte of the request left: whatever the call, it did nothing.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# Failures after it may have been sent: the call may have been applied.
_MAYBE_SENT = (
    httpx.ReadError,
    httpx.ReadTimeout,
    httpx.WriteError,
    httpx.WriteTimeout,
    httpx.RemoteProtocolError,
)
_REFUSED_BEFORE_WORK = frozenset({429, 503})


@dataclass(frozen=True)
class RetryPolicy:
    """``max_retries`` attempts after the first; the n-th retry waits ``backoff_s * 2**n``
    (at most ``backoff_max_s``, with jitter), or what the answer's Retry-After asks (at most
    ``retry_after_max_s``)."""

    max_retries: int = 3
    backoff_s: float = 0.5
    backoff_max_s: float = 8.0
    retry_after_max_s: float = 60.0

    def delay_after(
        self, outcome: httpx.Response | httpx.TransportError, retries: int, idempotent: bool
    ) -> float | None:
        """Seconds to wait before the next attempt, or None when this outcome stands
        (a success, an error to raise, or no retry left). ``retries``: made so far."""
        if retries >= self.max_retries or not _retryable(outcome, idempotent):
            return None
        hint = retry_after(outcome.headers) if isinstance(outcome, httpx.Response) else None
        if hint is not None:
            return min(hint, self.retry_after_max_s)
        backoff = min(self.backoff_s * 2.0**retries, self.backoff_max_s)
        # Half fixed, half random: clients that failed together do not come back together.
        return backoff / 2 + random.uniform(0, backoff / 2)


def _retryable(outcome: httpx.Response | httpx.TransportError, idempotent: bool) -> bool:
    if isinstance(outcome, httpx.Response):
        status = outcome.status_code
        if status in _REFUSED_BEFORE_WORK:
            return True
        return idempotent and status >= 500
    if isinstance(outcome, _NOT_SENT):
        return True
    return idempotent and isinstance(outcome, _MAYBE_SENT)


def retry_after(headers: httpx.Headers) -> float | None:
    """Retry-After in seconds (given as seconds or as an HTTP date), None when absent or
    unreadable."""
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
