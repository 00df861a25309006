"""``HTTPBackend.relay``: a request body sent as it is with the backend's own key, the answer
handed back open for streaming; attempts made as ``complete`` makes them."""

import pytest

from app.llm import LLMTimeout, LLMUnavailable
from tests.fakes.llm_server import ANTHROPIC_PATH, OPENAI_PATH, FakeLLM
from tests.support.backends import API_KEY, MakeBackend

pytestmark = pytest.mark.database_agnostic  # touches no database

BODY = {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "Hi"}]}


@pytest.mark.parametrize(("kind", "path"), [("openai", OPENAI_PATH), ("anthropic", ANTHROPIC_PATH)])
async def test_the_body_goes_as_it_is_with_the_backends_key(
    kind: str, path: str, fake_llm: FakeLLM, make: MakeBackend
) -> None:
    response = await make(kind).relay(BODY | {"top_k": 3}, {"anthropic-beta": "x"})
    try:
        assert response.status_code == 200
        assert (await response.aread()).startswith(b"{")
    finally:
        await response.aclose()
    assert (fake_llm.last.path, fake_llm.last.body) == (path, BODY | {"top_k": 3})
    assert API_KEY in fake_llm.last.headers.get(
        "x-api-key", fake_llm.last.headers.get("authorization", "")
    )
    assert fake_llm.last.headers["anthropic-beta"] == "x"


async def test_a_failing_answer_is_retried_then_handed_back(
    fake_llm: FakeLLM, make: MakeBackend
) -> None:
    fake_llm.set("error", fail_status=429)
    response = await make("openai", max_retries=2).relay(BODY)
    await response.aclose()
    assert response.status_code == 429
    assert len(fake_llm.requests) == 3


async def test_a_refusal_is_handed_back_at_once(fake_llm: FakeLLM, make: MakeBackend) -> None:
    fake_llm.set("reject")
    response = await make("anthropic", max_retries=2).relay(BODY)
    assert response.status_code == 400
    assert b"invalid request" in await response.aread()
    await response.aclose()
    assert len(fake_llm.requests) == 1


async def test_no_answer_raises_after_the_attempts(fake_llm: FakeLLM, make: MakeBackend) -> None:
    fake_llm.set("hang")
    with pytest.raises(LLMTimeout) as caught:
        await make("openai", max_retries=1, timeout_s=0.2).relay(BODY)
    assert caught.value.attempts == 2
    fake_llm.reset()
    with pytest.raises(LLMUnavailable):
        await make("openai", max_retries=0, base_url="http://127.0.0.1:9").relay(BODY)
