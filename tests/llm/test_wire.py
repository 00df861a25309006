"""What each backend puts on the wire and how it reads the provider's answer."""

from typing import Any

import httpx
import pytest
from openai.types.chat import ChatCompletion
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from pydantic import SecretStr, TypeAdapter

from app.llm import BackendConfig, LLMBadResponse, LLMTimeout, OpenAIBackend, chat_messages
from app.llm.anthropic import ANTHROPIC_VERSION
from app.llm.http import endpoint
from tests.fakes.llm_server import FakeLLM
from tests.support.backends import API_KEY, MakeBackend

pytestmark = pytest.mark.database_agnostic  # touches no database

CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "You summarise."},
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "First."},
    {
        "role": "user",
        "content": [{"type": "text", "text": "Second,"}, {"type": "text", "text": "in parts."}],
    },
    {"role": "assistant", "content": "Noted."},
    {"role": "user", "content": "Now summarise.", "name": "agent"},
]


async def test_anthropic_request_shape(fake_llm: FakeLLM, make: MakeBackend) -> None:
    """System messages lifted into "system", same-role turns merged, max_tokens and headers set."""
    assert await make("anthropic").complete(CONVERSATION, max_tokens=300) == "This is the summary."
    request = fake_llm.last
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == API_KEY
    assert request.headers["anthropic-version"] == ANTHROPIC_VERSION == "2023-06-01"
    assert "authorization" not in request.headers
    assert request.body == {
        "model": "test-model",
        "max_tokens": 300,
        "system": "You summarise.\n\nBe brief.",
        "messages": [
            {"role": "user", "content": "First.\n\nSecond,\nin parts."},
            {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": "Now summarise."},
        ],
    }


async def test_anthropic_without_system_has_no_system_field(
    fake_llm: FakeLLM, make: MakeBackend
) -> None:
    """No system message: no "system" key at all (not an empty one)."""
    await make("anthropic").complete([{"role": "user", "content": "Hi"}], max_tokens=10)
    assert "system" not in fake_llm.last.body


async def test_anthropic_reads_only_text_blocks(fake_llm: FakeLLM, make: MakeBackend) -> None:
    """The text is the concatenation of the "text" blocks; thinking blocks are skipped."""
    fake_llm.set(
        "ok",
        reply={
            "type": "message",
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "x"},
                {"type": "text", "text": "Part one, "},
                {"type": "text", "text": "part two."},
            ],
            "stop_reason": "end_turn",
        },
    )
    assert await make("anthropic").complete(CONVERSATION, max_tokens=50) == "Part one, part two."


async def test_anthropic_needs_a_turn(make: MakeBackend) -> None:
    """Only system messages cannot be sent to Anthropic: ValueError before any request."""
    with pytest.raises(ValueError, match="at least one user or assistant"):
        await make("anthropic").complete([{"role": "system", "content": "x"}], max_tokens=5)


async def test_openai_request_shape(fake_llm: FakeLLM, make: MakeBackend) -> None:
    """OpenAI-compatible: bearer key, messages as given (text content), max_tokens, no stream;
    the body is a valid request for the OpenAI SDK's own types."""
    await make("openai").complete(CONVERSATION, max_tokens=123)
    request = fake_llm.last
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.body == {
        "model": "test-model",
        "messages": chat_messages(CONVERSATION),
        "max_tokens": 123,
        "stream": False,
    }
    TypeAdapter(CompletionCreateParamsNonStreaming).validate_python(request.body)


async def test_openai_uses_max_completion_tokens_on_api_openai_com(
    http: httpx.AsyncClient,
) -> None:
    """api.openai.com gets max_completion_tokens (its newer models refuse max_tokens)."""
    config = BackendConfig(base_url="https://api.openai.com/v1", model="gpt-4o-mini")
    backend = OpenAIBackend(http, config)
    assert backend.url == "https://api.openai.com/v1/chat/completions"
    body = backend.body(chat_messages([{"role": "user", "content": "x"}]), 64)
    assert body["max_completion_tokens"] == 64
    assert "max_tokens" not in body


async def test_openai_without_key_sends_no_authorization(
    fake_llm: FakeLLM, make: MakeBackend
) -> None:
    """A local server with no key configured: no Authorization header at all."""
    await make("openai", api_key=None).complete(CONVERSATION, max_tokens=5)
    assert "authorization" not in fake_llm.last.headers


async def test_openai_reads_content_parts_and_refusal(fake_llm: FakeLLM, make: MakeBackend) -> None:
    """Content as a list of text parts is joined; a refusal with no content is a bad response."""
    message: dict[str, Any] = {"role": "assistant", "content": [{"type": "text", "text": "A."}]}
    fake_llm.set("ok", reply={"choices": [{"index": 0, "message": message}]})
    assert await make("openai").complete(CONVERSATION, max_tokens=5) == "A."
    refusal = {"role": "assistant", "content": None, "refusal": "I can't."}
    fake_llm.set("ok", reply={"choices": [{"index": 0, "message": refusal}]})
    with pytest.raises(LLMBadResponse, match="no text in the answer"):
        await make("openai").complete(CONVERSATION, max_tokens=5)


async def test_fake_openai_answer_is_a_real_chat_completion(fake_llm: FakeLLM) -> None:
    """The fake's OpenAI answer parses with the OpenAI SDK's ChatCompletion type."""
    async with httpx.AsyncClient(base_url=fake_llm.base_url) as client:
        response = await client.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
        )
    completion = ChatCompletion.model_validate(response.json())
    assert completion.choices[0].message.content == "This is the summary."


async def test_ollama_request_shape(fake_llm: FakeLLM, make: MakeBackend) -> None:
    """Ollama: /api/chat, stream false, num_predict = max_tokens, num_ctx = the window."""
    await make("ollama", window=8192).complete(CONVERSATION, max_tokens=77)
    request = fake_llm.last
    assert request.path == "/api/chat"
    assert request.body == {
        "model": "test-model",
        "messages": chat_messages(CONVERSATION),
        "stream": False,
        "options": {"num_predict": 77, "num_ctx": 8192},
    }


def test_chat_messages_validation() -> None:
    """Only system/user/assistant with text (or text parts) are accepted; extras dropped."""
    assert chat_messages([{"role": "user", "content": None, "name": "x"}]) == [
        {"role": "user", "content": ""}
    ]
    with pytest.raises(ValueError, match="role"):
        chat_messages([{"role": "tool", "content": "x", "tool_call_id": "1"}])
    with pytest.raises(ValueError, match="content"):
        chat_messages([{"role": "user", "content": 42}])
    with pytest.raises(ValueError, match="no messages"):
        chat_messages([])


async def test_max_tokens_must_be_positive(make: MakeBackend) -> None:
    """max_tokens < 1 is a caller error, raised before any request."""
    with pytest.raises(ValueError, match="max_tokens"):
        await make("openai").complete(CONVERSATION, max_tokens=0)


@pytest.mark.parametrize(
    ("base_url", "path", "url"),
    [
        ("http://h:1", "/v1/chat/completions", "http://h:1/v1/chat/completions"),
        ("http://h:1/", "/v1/chat/completions", "http://h:1/v1/chat/completions"),
        ("http://h:1/v1", "/v1/chat/completions", "http://h:1/v1/chat/completions"),
        ("https://r.ai/api/v1/", "/v1/chat/completions", "https://r.ai/api/v1/chat/completions"),
        ("http://h:1/v1/messages", "/v1/messages", "http://h:1/v1/messages"),
        ("http://h:11434/api", "/api/chat", "http://h:11434/api/chat"),
    ],
)
def test_endpoint(base_url: str, path: str, url: str) -> None:
    """A base URL with or without the API's "/v1" (or "/api") gives the same endpoint."""
    assert endpoint(base_url, path) == url


@pytest.mark.parametrize(
    "base_url", ["ftp://h/", "h:1", "http://user:pw@h/", "http://h/?key=1", "http://h/#x", ""]
)
def test_endpoint_refuses(base_url: str) -> None:
    """Other schemes, no host, credentials or a query in the URL are refused (and not echoed)."""
    with pytest.raises(ValueError, match="base URL") as caught:
        endpoint(base_url, "/v1/messages")
    assert "pw" not in str(caught.value)


def test_config_repr_hides_key() -> None:
    """A BackendConfig's repr shows no key."""
    config = BackendConfig(base_url="http://h", model="m", api_key=SecretStr(API_KEY))
    assert API_KEY not in repr(config)
    assert API_KEY not in str(config)


async def test_oversized_answer_is_bad_response(
    fake_llm: FakeLLM, make: MakeBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An answer larger than MAX_RESPONSE_BYTES is not read to the end: LLMBadResponse."""
    monkeypatch.setattr("app.llm.http.MAX_RESPONSE_BYTES", 1000)
    fake_llm.set("ok", text="x" * 2000)
    with pytest.raises(LLMBadResponse, match="larger than 1000 bytes"):
        await make("ollama").complete(CONVERSATION, max_tokens=5)
    assert len(fake_llm.requests) == 1


async def test_408_is_a_retried_timeout(fake_llm: FakeLLM, make: MakeBackend) -> None:
    """HTTP 408 (the server timed out reading the request) is retried, then LLMTimeout."""
    fake_llm.set("error", fail_status=408)
    with pytest.raises(LLMTimeout) as caught:
        await make("openai", max_retries=1).complete(CONVERSATION, max_tokens=5)
    assert caught.value.status_code == 408
    assert len(fake_llm.requests) == 2
