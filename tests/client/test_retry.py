"""The retry policy (pure): which outcomes are tried again, for which calls, after how long."""

import email.utils
import time

import httpx
import pytest

from context_client.retry import RetryPolicy, retry_after

pytestmark = pytest.mark.database_agnostic

POLICY = RetryPolicy(max_retries=3, backoff_s=0.5, backoff_max_s=2.0, retry_after_max_s=10.0)
REQUEST = httpx.Request("POST", "http://test/tasks/x/messages")


def answer(status: int, **headers: str) -> httpx.Response:
    return httpx.Response(status, headers=headers, request=REQUEST)


@pytest.mark.parametrize(
    ("outcome", "idempotent_call", "other_call"),
    [
        (answer(200), False, False),
        (answer(404), False, False),
        (answer(409), False, False),
        (answer(422), False, False),
        (answer(500), True, False),
        (answer(502), True, False),
        (answer(507), True, False),
        (answer(503), True, True),  # refused before any work
        (answer(429), True, True),
        (httpx.ConnectError("refused", request=REQUEST), True, True),  # never sent
        (httpx.ConnectTimeout("slow", request=REQUEST), True, True),
        (httpx.ReadTimeout("no answer", request=REQUEST), True, False),  # maybe applied
        (httpx.RemoteProtocolError("dropped", request=REQUEST), True, False),
        (httpx.UnsupportedProtocol("ftp://", request=REQUEST), False, False),  # a wrong URL
    ],
    ids=lambda value: type(value).__name__ if not isinstance(value, bool) else str(value),
)
def test_what_is_retried(
    outcome: httpx.Response | httpx.TransportError, idempotent_call: bool, other_call: bool
) -> None:
    """A call that may be repeated is retried on any failure whose outcome is unknown; any
    other only when it surely did nothing."""
    assert (POLICY.delay_after(outcome, 0, idempotent=True) is not None) is idempotent_call
    assert (POLICY.delay_after(outcome, 0, idempotent=False) is not None) is other_call


def test_retries_are_bounded() -> None:
    failure = answer(500)
    assert POLICY.delay_after(failure, 2, idempotent=True) is not None
    assert POLICY.delay_after(failure, 3, idempotent=True) is None
    assert RetryPolicy(max_retries=0).delay_after(failure, 0, idempotent=True) is None


def test_the_backoff_doubles_up_to_its_bound_with_jitter() -> None:
    """The n-th retry waits between half and all of backoff_s * 2**n, at most backoff_max_s."""
    for retries, full in [(0, 0.5), (1, 1.0), (2, 2.0), (3, 2.0)]:
        policy = RetryPolicy(max_retries=10, backoff_s=0.5, backoff_max_s=2.0)
        delays = [policy.delay_after(answer(503), retries, idempotent=True) for _ in range(50)]
        assert all(d is not None and full / 2 <= d <= full for d in delays), (retries, delays)


def test_retry_after_is_honoured_up_to_its_bound() -> None:
    assert POLICY.delay_after(answer(429, **{"Retry-After": "3"}), 0, idempotent=False) == 3.0
    assert POLICY.delay_after(answer(503, **{"Retry-After": "0"}), 0, idempotent=False) == 0.0
    assert POLICY.delay_after(answer(429, **{"Retry-After": "3600"}), 0, idempotent=False) == 10.0


def test_retry_after_reads_seconds_and_http_dates() -> None:
    in_a_minute = email.utils.formatdate(time.time() + 60, usegmt=True)
    assert retry_after(httpx.Headers({"Retry-After": "1.5"})) == 1.5
    seconds = retry_after(httpx.Headers({"Retry-After": in_a_minute}))
    assert seconds is not None
    assert 50 < seconds <= 60
    long_ago = email.utils.formatdate(0, usegmt=True)
    assert retry_after(httpx.Headers({"Retry-After": long_ago})) == 0.0
    assert retry_after(httpx.Headers({"Retry-After": "soon"})) is None
    assert retry_after(httpx.Headers()) is None
