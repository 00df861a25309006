"""The proxy end to end: agents on the official ``openai`` and ``anthropic`` SDKs point their
base URL at a real uvicorn of the service, which forwards to a real fake LLM server. A
tool-using conversation long enough to compact, streaming and not: the upstream gets payloads
within the budget and tool-paired, the service stores what the agent sent plus the replies, a
restart loses nothing, and an agent that edits its history is followed."""

from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import openai
import pytest

from app.formats import FORMATS
from app.proxy.wires import WIRES
from app.tokens.counters import HeuristicCounter
from tests.fakes import llm_server
from tests.fakes.llm_server import FakeLLM
from tests.support.formats import validate_payload
from tests.support.proxy import (
    ANTHROPIC_TOOL,
    SYSTEM,
    anthropic_results,
    anthropic_turn,
    hashes,
    openai_results,
    openai_turn,
    proxy_env,
    script,
    stored_conversation,
)
from tests.support.server import Server, ServerPool

pytestmark = pytest.mark.database_agnostic

fake_llm = llm_server.fake_llm

TASK = "5f0c8a4e-8a43-4f0e-9d43-1a2b3c4d5e6f"
WINDOW = "4000"
READS = 12  # tool calls before the answer: enough to pass the window several times over


def task_headers(task: str = TASK) -> dict[str, str]:
    return {"X-Context-Task": task, "X-Context-Window": WINDOW}


HEADERS = task_headers()


def task_of(server: Server, task: str = TASK) -> dict[str, Any]:
    response = httpx.get(f"{server.base_url}/tasks/{task}", timeout=10)
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


def check_upstream(fake: FakeLLM, wire: str, budget: int) -> None:
    """Every request the fake got is valid for its provider, tool-paired, within the budget."""
    assert fake.requests
    for request in fake.requests:
        payload = {k: v for k, v in request.body.items() if k not in ("stream", "stream_options")}
        validate_payload(wire, payload)
        assert FORMATS[wire].payload_tokens(HeuristicCounter(), payload) <= budget


def openai_conversation(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return WIRES["openai"].conversation({"messages": messages}).messages


def anthropic_conversation(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return WIRES["anthropic"].conversation({"messages": messages}).messages


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_an_openai_agent_runs_a_long_tool_conversation_through_the_proxy(
    servers: ServerPool, fake_llm: FakeLLM, stream: bool
) -> None:
    server = servers.start(env=proxy_env(fake_llm))
    script(fake_llm, READS)
    llm = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Why is the cart total wrong?"},
    ]
    while True:
        reply = openai_turn(llm, messages, stream=stream, headers=task_headers())
        messages.append(reply)
        results = openai_results(reply)
        if not results:
            break
        messages += results
    assert reply["content"] == "The total ignores discounts."
    assert len(fake_llm.requests) == READS + 1
    task = task_of(server)
    assert task["context"]["window"] == 4000
    assert task["statistics"]["llm_call_count"] == READS + 1  # each reply recorded with usage
    assert task["statistics"]["compression_count"] > 0
    check_upstream(fake_llm, "openai", task["context"]["budget"])
    stored = stored_conversation(servers.context_dir, TASK)
    assert stored[0] == stored[0] | {"role": "system", "content": SYSTEM}
    assert hashes(stored[1:]) == hashes(openai_conversation(messages[1:]))
    if stream:  # the agent did not ask for usage: the chunk carrying it was not passed on
        last = fake_llm.last.body
        assert last["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_an_anthropic_agent_runs_a_long_tool_conversation_through_the_proxy(
    servers: ServerPool, fake_llm: FakeLLM, stream: bool
) -> None:
    server = servers.start(env=proxy_env(fake_llm))
    script(fake_llm, READS)
    llm = anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Why is the total wrong?"}]
    while True:
        reply = anthropic_turn(llm, messages, stream=stream, headers=task_headers())
        messages.append(reply)
        results = anthropic_results(reply)
        if not results:
            break
        messages += results
    assert reply["content"] == [{"type": "text", "text": "The total ignores discounts."}]
    task = task_of(server)
    assert task["llm_provider"] == "anthropic"
    assert task["statistics"]["llm_call_count"] == READS + 1
    assert task["statistics"]["compression_count"] > 0
    check_upstream(fake_llm, "anthropic", task["context"]["budget"])
    assert all(r.body["system"] for r in fake_llm.requests)  # the task's system prompt
    stored = stored_conversation(servers.context_dir, TASK)
    assert stored[0]["content"] == SYSTEM
    assert hashes(stored[1:]) == hashes(anthropic_conversation(messages))


def test_a_restart_and_a_turn_past_the_service_lose_nothing(
    servers: ServerPool, fake_llm: FakeLLM
) -> None:
    """The service goes down mid-task; the agent makes one turn straight to the LLM, then
    comes back: its resent history fills the gap."""
    server = servers.start(env=proxy_env(fake_llm))
    script(fake_llm, 6)
    via_service = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="k", max_retries=0)
    direct = openai.OpenAI(base_url=f"{fake_llm.base_url}/v1", api_key="k", max_retries=0)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Why is the cart total wrong?"},
    ]
    turn = 0
    while True:
        if turn == 3:
            server.kill()
            with pytest.raises(openai.APIConnectionError):
                openai_turn(via_service, messages, stream=False, headers=task_headers())
            reply = openai_turn(direct, messages, stream=False, headers={})
            server.start()
        else:
            reply = openai_turn(via_service, messages, stream=turn % 2 == 1, headers=task_headers())
        turn += 1
        messages.append(reply)
        results = openai_results(reply)
        if not results:
            break
        messages += results
    stored = stored_conversation(servers.context_dir, TASK)
    assert hashes(stored[1:]) == hashes(openai_conversation(messages[1:]))
    # The turn past the service was not an LLM call of its: no usage came with it.
    assert task_of(server)["statistics"]["llm_call_count"] == turn - 1


Edit = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda m: m[:-2], id="drops-its-last-exchange"),
        pytest.param(
            lambda m: [m[0], {"role": "user", "content": "Look at cart.py instead."}], id="edits"
        ),
    ],
)
def test_an_agent_that_rewrites_its_history_is_followed(
    servers: ServerPool, fake_llm: FakeLLM, edit: Edit
) -> None:
    """The stored conversation is rewound to the last message both share (nothing is deleted
    from the history file) and the agent's own version appended."""
    server = servers.start(env=proxy_env(fake_llm))
    script(fake_llm, 3)
    llm = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="k", max_retries=0)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Why is the cart total wrong?"},
    ]
    for _ in range(2):
        reply = openai_turn(llm, messages, stream=False, headers=task_headers())
        messages += [reply, *openai_results(reply)]
    posted_before = len(stored_conversation(servers.context_dir, TASK))
    messages = edit(messages)
    reply = openai_turn(llm, messages, stream=False, headers=task_headers())
    stored = stored_conversation(servers.context_dir, TASK)
    assert hashes(stored[1:]) == hashes(openai_conversation([*messages[1:], reply]))
    # What the upstream got last is the agent's version, not the stored one.
    sent = fake_llm.last.body["messages"]
    assert hashes(openai_conversation(sent[1:])) == hashes(openai_conversation(messages[1:]))
    history = httpx.get(f"{server.base_url}/tasks/{TASK}/messages?limit=1000", timeout=10)
    assert len(history.json()["messages"]) > posted_before  # rewound, never deleted


def test_the_same_request_twice_appends_nothing_twice(
    servers: ServerPool, fake_llm: FakeLLM
) -> None:
    """An agent retrying a turn (its first answer lost) resends the same history: the stored
    reply it never saw is rewound away, the new answer recorded, nothing doubled."""
    server = servers.start(env=proxy_env(fake_llm))
    llm = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="k", max_retries=0)
    messages = [{"role": "user", "content": "Hello"}]
    openai_turn(llm, messages, stream=False, headers=task_headers())
    reply = openai_turn(llm, messages, stream=False, headers=task_headers())
    stored = stored_conversation(servers.context_dir, TASK)
    assert hashes(stored) == hashes(openai_conversation([*messages, reply]))


def test_a_request_naming_no_task_is_refused_and_writes_nothing(
    servers: ServerPool, fake_llm: FakeLLM
) -> None:
    server = servers.start(env=proxy_env(fake_llm))
    llm = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="k", max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        openai_turn(llm, [{"role": "user", "content": "Hi"}], stream=False, headers={})
    error = refused.value.body
    assert isinstance(error, dict)
    assert error["code"] == "task_required"
    assert "X-Context-Task" in error["message"]
    assert fake_llm.requests == []
    assert httpx.get(f"{server.base_url}/tasks", timeout=10).json()["tasks"] == []


def test_task_key_headers_find_the_running_task(servers: ServerPool, fake_llm: FakeLLM) -> None:
    """An agent that cannot choose a uuid names its task key: the first request creates the
    task, the next ones continue it; every answer says which task it went to."""
    server = servers.start(env=proxy_env(fake_llm))
    headers = {
        "X-Context-Task-Source": "github",
        "X-Context-Task-Owner": "acme",
        "X-Context-Task-Repo": "shop",
        "X-Context-Task-Type": "issue",
        "X-Context-Task-Id": "42",
        "X-Context-User": "ada",
    }
    llm = anthropic.Anthropic(base_url=server.base_url, api_key="k", max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Hi"}]
    uuids = set()
    for _ in range(2):
        raw = llm.messages.with_raw_response.create(
            model="claude-sonnet-5-5",
            max_tokens=100,
            messages=messages,  # type: ignore[arg-type]
            extra_headers=headers,
        )
        uuids.add(raw.headers["x-context-task"])
        answer = raw.parse().content[0]
        assert answer.type == "text"
        messages += [
            {"role": "assistant", "content": answer.text},
            {"role": "user", "content": "And then?"},
        ]
    (uuid,) = uuids
    task = task_of(server, uuid)
    assert task["task_key"]["task_id"] == "42"
    assert task["user"] == "ada"
    assert task["context"]["window"] == 200_000  # a well-known model's


def test_x_api_key_authenticates_the_anthropic_sdk(servers: ServerPool, fake_llm: FakeLLM) -> None:
    server = servers.start(env=proxy_env(fake_llm, API_KEYS="agent-key-0123456789"))
    messages = [{"role": "user", "content": "Hi"}]
    wrong = anthropic.Anthropic(base_url=server.base_url, api_key="nope", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        anthropic_turn(wrong, messages, stream=False, headers=task_headers())
    assert fake_llm.requests == []
    right = anthropic.Anthropic(
        base_url=server.base_url, api_key="agent-key-0123456789", max_retries=0
    )
    anthropic_turn(right, messages, stream=False, headers=task_headers())
    bearer = openai.OpenAI(
        base_url=f"{server.base_url}/v1", api_key="agent-key-0123456789", max_retries=0
    )
    openai_turn(bearer, messages, stream=False, headers=task_headers())
    # The upstream got the server's key (none here), never the agent's.
    assert all("agent-key" not in str(r.headers) for r in fake_llm.requests)
    assert len(fake_llm.requests) == 2


def test_upstream_errors_come_back_as_they_came(servers: ServerPool, fake_llm: FakeLLM) -> None:
    server = servers.start(env=proxy_env(fake_llm))
    fake_llm.set("reject", error_message="max_tokens is too large")
    llm = anthropic.Anthropic(base_url=server.base_url, api_key="k", max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as rejected:
        anthropic_turn(
            llm, [{"role": "user", "content": "Hi"}], stream=True, headers=task_headers()
        )
    assert rejected.value.body == {
        "type": "error",
        "error": {"type": "api_error", "message": "max_tokens is too large"},
    }
    fake_llm.set("error", fail_status=529)
    openai_llm = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="k", max_retries=0)
    with pytest.raises(openai.InternalServerError) as failed:
        openai_turn(
            openai_llm, [{"role": "user", "content": "Hi"}], stream=False, headers=task_headers()
        )
    assert failed.value.status_code == 529


def test_models_and_token_counts_through_the_sdks(servers: ServerPool, fake_llm: FakeLLM) -> None:
    server = servers.start(env=proxy_env(fake_llm))
    listed = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="k").models.list()
    assert sorted(m.id for m in listed) == ["claude-sonnet-5-5", "gpt-4o"]
    claude = anthropic.Anthropic(base_url=server.base_url, api_key="k").models.list()
    assert sorted(m.id for m in claude) == ["claude-sonnet-5-5", "gpt-4o"]
    counted = anthropic.Anthropic(base_url=server.base_url, api_key="k").messages.count_tokens(
        model="claude-sonnet-5-5",
        system=SYSTEM,
        messages=[{"role": "user", "content": "Why is the total wrong?"}],
        tools=[ANTHROPIC_TOOL],  # type: ignore[list-item]
    )
    assert 30 < counted.input_tokens < 200
    assert fake_llm.requests == []  # counted by the service, nothing sent upstream


def test_an_agent_that_sets_only_a_base_url_names_its_task_in_it(
    servers: ServerPool, fake_llm: FakeLLM
) -> None:
    """OPENAI_BASE_URL=.../tasks/<uuid>/v1, ANTHROPIC_BASE_URL=.../tasks/<uuid>: no header,
    no code; the task is created by the first request and continued by the next."""
    server = servers.start(env=proxy_env(fake_llm))
    other = "9a1f6b52-3c4d-4e5f-8a6b-7c8d9e0f1a2b"
    gpt = openai.OpenAI(base_url=f"{server.base_url}/tasks/{TASK}/v1", api_key="k", max_retries=0)
    claude = anthropic.Anthropic(base_url=f"{server.base_url}/tasks/{other}", api_key="k")
    script(fake_llm, 1)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Why is the total wrong?"}]
    reply = openai_turn(gpt, messages, stream=True, headers={})
    messages += [reply, *openai_results(reply)]
    openai_turn(gpt, messages, stream=False, headers={})
    anthropic_turn(claude, [{"role": "user", "content": "Hi"}], stream=False, headers={})
    assert task_of(server)["statistics"]["llm_call_count"] == 2
    assert task_of(server, other)["llm_provider"] == "anthropic"
    assert (
        claude.messages.count_tokens(
            model="claude-sonnet-5-5", messages=[{"role": "user", "content": "Hi"}]
        ).input_tokens
        > 0
    )


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_a_streamed_answer_is_recorded_before_its_stream_ends(
    servers: ServerPool, fake_llm: FakeLLM, wire: str
) -> None:
    """The event that ends a stream (an SDK's stream ends there) comes after the recording:
    an agent that asks at once, on another connection, finds the call counted."""
    server = servers.start(env=proxy_env(fake_llm))
    fake_llm.set("ok", script=["Done."] * 5)
    path = "/v1/chat/completions" if wire == "openai" else "/v1/messages"
    ending = b"data: [DONE]" if wire == "openai" else b"event: message_stop"
    for turn in range(1, 6):
        body = {"model": "m", "max_tokens": 50, "stream": True}
        body["messages"] = [{"role": "user", "content": f"Question {turn}"}]
        with httpx.Client(base_url=server.base_url, headers=HEADERS, timeout=30) as http:
            with http.stream("POST", path, json=body) as answer:
                assert answer.status_code == 200
                seen = b""
                for chunk in answer.iter_bytes():
                    seen += chunk
                    if ending in seen:
                        break
            assert task_of(server)["statistics"]["llm_call_count"] == turn
