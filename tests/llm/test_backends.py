"""Each backend kind against the fake server: success, retries, each failure mapped to its error.

Attempt counts are read from the requests the server recorded, not from the client.
"""

import asyncio
import logging
import socket
from typing import Any

import pytest

from app.llm import (
    ChatBackend,
    LLMBadResponse,
    LLMError,
    LLMRejected,
    LLMTimeout,
    LLMUnavailable,
)
from tests.fakes.llm_server import ANTHROPIC_PATH, OLLAMA_PATH, OPENAI_PATH, FakeLLM
from tests.support.backends import API_KEY, KINDS, MakeBackend

PATHS = {"openai": OPENAI_PATH, "ollama": OLLAMA_PATH, "anthropic": ANTHROPIC_PATH}
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You summarise conversations."},
    {"role": "user", "content": "Summarise: the tests pass."},
]
BOUND_S = 10.0  # no call in this module may take longer than this

pytestmark = [
    pytest.mark.parametrize("kind", KINDS),
    pytest.mark.database_agnostic,  # touches no database
]


async def call(backend: ChatBackend, max_tokens: int = 256) -> str:
    async with asyncio.timeout(BOUND_S):
        return await backend.complete(MESSAGES, max_tokens=max_tokens)


async def test_success(kind: str, fake_llm: FakeLLM, make: MakeBackend) -> None:
    """A 200 answer gives its text, from one POST to the kind's path with the model asked for."""
    fake_llm.set("ok", text="  The tests pass.\n")
    backend = make(kind)
    assert isinstance(backend, ChatBackend)
    assert (backend.name, backend.kind, backend.model, backend.window) == (
        "default",
        kind,
        "test-model",
        4096,
    )
    assert await call(backend) == "The tests pass."
    assert fake_llm.paths() == [PATHS[kind]]
    assert fake_llm.last.body["model"] == "test-model"
    assert fake_llm.last.body["messages"][-1]["content"] == "Summarise: the tests pass."


async def test_retries_then_success(kind: str, fake_llm: FakeLLM, make: MakeBackend) -> None:
    """Two 500s then a 200: the call succeeds on the third attempt."""
    fake_llm.set("flaky", failures=2, text="third time lucky")
    assert await call(make(kind, max_retries=2)) == "third time lucky"
    assert fake_llm.paths() == [PATHS[kind]] * 3


async def test_error_gives_unavailable_after_all_attempts(
    kind: str, fake_llm: FakeLLM, make: MakeBackend
) -> None:
    """A server that keeps answering 500 is tried 1 + max_retries times, then LLMUnavailable."""
    fake_llm.set("error")
    with pytest.raises(LLMUnavailable) as caught:
        await call(make(kind, max_retries=3))
    assert len(fake_llm.requests) == 4
    assert caught.value.attempts == 4
    assert caught.value.status_code == 500
    assert caught.value.backend == "default"
    assert "internal error" in str(caught.value)


async def test_429_is_retried_and_retry_after_read(
    kind: str, fake_llm: FakeLLM, make: MakeBackend
) -> None:
    """429 is retried like a 5xx; the server's Retry-After is kept on the error."""
    fake_llm.set("error", fail_status=429, retry_after="0.02")
    with pytest.raises(LLMUnavailable) as caught:
        await call(make(kind, max_retries=1))
    assert len(fake_llm.requests) == 2
    assert caught.value.status_code == 429
    assert caught.value.retry_after == pytest.approx(0.02)


async def test_hang_gives_timeout(kind: str, fake_llm: FakeLLM, make: MakeBackend) -> None:
    """A server that never answers: each attempt ends at timeout_s, then LLMTimeout."""
    fake_llm.set("hang")
    with pytest.raises(LLMTimeout) as caught:
        await call(make(kind, timeout_s=0.5, max_retries=1))
    assert len(fake_llm.requests) == 2
    assert caught.value.attempts == 2
    assert "0.5s" in str(caught.value)


async def test_slow_answer_within_timeout(kind: str, fake_llm: FakeLLM, make: MakeBackend) -> None:
    """An answer that comes late but within timeout_s is taken, with no retry."""
    fake_llm.set("ok", delay=0.2, text="late but fine")
    assert await call(make(kind, timeout_s=3.0)) == "late but fine"
    assert len(fake_llm.requests) == 1


async def test_reject_is_not_retried(kind: str, fake_llm: FakeLLM, make: MakeBackend) -> None:
    """A 400 is LLMRejected at once (one request), with the server's own message."""
    fake_llm.set("reject")
    with pytest.raises(LLMRejected) as caught:
        await call(make(kind, max_retries=3))
    assert len(fake_llm.requests) == 1
    assert caught.value.status_code == 400
    assert caught.value.attempts == 1
    assert "invalid request" in str(caught.value)


@pytest.mark.parametrize("behaviour", ["empty", "garbage"])
async def test_unusable_answer_is_bad_response(
    kind: str, behaviour: Any, fake_llm: FakeLLM, make: MakeBackend
) -> None:
    """200 with an empty text or a non-JSON body: LLMBadResponse, not retried."""
    fake_llm.set(behaviour)
    with pytest.raises(LLMBadResponse) as caught:
        await call(make(kind, max_retries=3))
    assert len(fake_llm.requests) == 1
    assert caught.value.status_code == 200


async def test_missing_fields_is_bad_response(
    kind: str, fake_llm: FakeLLM, make: MakeBackend
) -> None:
    """200 JSON of the wrong shape (e.g. another API's answer) is LLMBadResponse."""
    fake_llm.set("ok", reply={"unexpected": True})
    with pytest.raises(LLMBadResponse, match="no text in the answer"):
        await call(make(kind))


async def test_connection_refused_gives_unavailable(kind: str, make: MakeBackend) -> None:
    """Nothing listening on the port: LLMUnavailable after the configured attempts."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(LLMUnavailable) as caught:
        await call(make(kind, base_url=f"http://127.0.0.1:{port}", max_retries=1))
    assert caught.value.attempts == 2
    assert caught.value.status_code is None


async def test_api_key_sent_but_never_shown(
    kind: str, fake_llm: FakeLLM, make: MakeBackend, caplog: pytest.LogCaptureFixture
) -> None:
    """The key is in the request's auth header only: not in logs, reprs or error texts."""
    caplog.set_level(logging.DEBUG)
    backend = make(kind, max_retries=1, timeout_s=0.3)
    errors: list[LLMError] = []
    for behaviour in ("reject", "error", "garbage", "hang"):
        fake_llm.set(behaviour)
        with pytest.raises(LLMError) as caught:
            await call(backend)
        errors.append(caught.value)
    fake_llm.set("ok", text=f"echo {API_KEY}")
    assert await call(backend) == f"echo {API_KEY}"  # the answer is the model's, untouched

    header = "authorization" if kind != "anthropic" else "x-api-key"
    expected = f"Bearer {API_KEY}" if kind != "anthropic" else API_KEY
    assert all(r.headers.get(header) == expected for r in fake_llm.requests)
    shown = [caplog.text, repr(backend), str(backend)]
    shown += [str(e) for e in errors] + [repr(e) for e in errors]
    shown += [str(e.__cause__) for e in errors if e.__cause__ is not None]
    assert caplog.records, "the failures should have been logged"
    for text in shown:
        assert API_KEY not in text
    assert "retrying" in caplog.text


async def test_server_echoing_the_key_is_redacted(
    kind: str, fake_llm: FakeLLM, make: MakeBackend
) -> None:
    """An answer quoting the key (some servers do, in errors) is redacted in the error message."""
    fake_llm.set("reject", fail_status=401, error_message=f"Incorrect API key: {API_KEY}")
    with pytest.raises(LLMRejected) as caught:
        await call(make(kind))
    fake_llm.set("ok", reply={"error": {"message": f"Incorrect API key provided: {API_KEY}"}})
    with pytest.raises(LLMBadResponse) as caught_200:
        await call(make(kind))
    for error in (caught.value, caught_200.value):
        assert API_KEY not in str(error)
        assert API_KEY not in repr(error)
        assert "[redacted]" in str(error)


async def test_think_block_is_dropped(kind: str, fake_llm: FakeLLM, make: MakeBackend) -> None:
    """A reasoning model's leading <think>...</think> is not part of the summary."""
    fake_llm.set("ok", text="<think>\nlet me see\n</think>\n\nThe summary.")
    assert await call(make(kind)) == "The summary."


async def test_concurrent_calls_share_the_client(
    kind: str, fake_llm: FakeLLM, make: MakeBackend
) -> None:
    """Several calls at once on one backend all complete (one request each)."""
    fake_llm.set("ok", delay=0.05, text="done")
    backend = make(kind)
    async with asyncio.timeout(BOUND_S):
        texts = await asyncio.gather(*(call(backend) for _ in range(8)))
    assert texts == ["done"] * 8
    assert len(fake_llm.requests) == 8
