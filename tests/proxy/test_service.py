"""The proxy over the real app (ASGI): what the upstream gets, what is refused and that a
refusal writes nothing, and how an upstream that cannot be reached is reported."""

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes import llm_server
from tests.fakes.llm_server import FakeLLM
from tests.support.app import running_app
from tests.support.errors import assert_error
from tests.support.files import snapshot_dir
from tests.support.server import free_port
from tests.support.settings import fast_settings

fake_llm = llm_server.fake_llm

TASK = "0b7d7a3c-7e51-4a61-8d3a-6f1e2d3c4b5a"
HEADERS = {"X-Context-Task": TASK, "X-Context-Window": "8000"}
CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}]}


def proxied(context_dir: Path, base_url: str, **extra: Any) -> Any:
    backends = {"gpt": {"kind": "openai", "base_url": base_url, "model": "gpt-4o"}}
    return fast_settings(
        context_dir,
        llm={
            "backends": backends,
            "max_retries": 1,
            "retry_backoff_s": 0,
            "retry_backoff_max_s": 0,
            **extra,
        },
        proxy={"openai_backend": "gpt"},
    )


@pytest.fixture
async def client(context_dir: Path, fake_llm: FakeLLM) -> AsyncIterator[httpx.AsyncClient]:
    async with running_app(proxied(context_dir, fake_llm.base_url)) as http:
        yield http


async def test_the_request_upstream_is_the_tasks_payload_with_the_agents_parameters(
    client: httpx.AsyncClient, fake_llm: FakeLLM
) -> None:
    tool = {"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}
    body = {
        "model": "gpt-4o-mini",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        "tools": [tool],
        "tool_choice": "none",
        "temperature": 0.3,
        "stop": ["END"],
        "max_tokens": 100,
    }
    answer = await client.post("/v1/chat/completions", json=body, headers=HEADERS)
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-context-task"] == TASK
    assert answer.json()["choices"][0]["message"]["content"] == fake_llm.text
    assert fake_llm.last.body == {
        "model": "gpt-4o-mini",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        "tools": [tool],
        "tool_choice": "none",
        "temperature": 0.3,
        "stop": ["END"],
        "max_tokens": 100,
    }
    assert "authorization" not in fake_llm.last.headers  # the backend has no key; never the agent's
    task = (await client.get(f"/tasks/{TASK}")).json()
    assert (task["model"], task["context_length"], task["max_output_tokens"]) == (
        "gpt-4o-mini",
        8000,
        100,
    )
    assert task["statistics"]["llm_call_count"] == 1


@pytest.mark.parametrize(
    ("body", "headers", "status", "code"),
    [
        (CHAT, {}, 400, "task_required"),
        ({"model": "gpt-4o", "messages": []}, HEADERS, 422, "validation_error"),
        ({"messages": CHAT["messages"]}, HEADERS, 422, "validation_error"),
        (CHAT, {**HEADERS, "X-Context-Window": "lots"}, 422, "validation_error"),
        (
            {
                "model": "gpt-4o",
                "messages": [{"role": "tool", "tool_call_id": "c", "content": "x"}],
            },
            HEADERS,
            422,
            "unknown_tool_call",
        ),
    ],
    ids=["no-task", "no-messages", "no-model", "bad-window", "unpaired-result"],
)
async def test_a_refused_request_writes_nothing_and_calls_no_one(
    client: httpx.AsyncClient,
    fake_llm: FakeLLM,
    context_dir: Path,
    body: dict[str, Any],
    headers: dict[str, str],
    status: int,
    code: str,
) -> None:
    before = snapshot_dir(context_dir)
    answer = await client.post("/v1/chat/completions", json=body, headers=headers)
    assert_error(answer, status, code)
    assert fake_llm.requests == []
    if code != "unknown_tool_call":  # the task is made before its first batch is refused
        assert snapshot_dir(context_dir) == before


async def test_a_wire_without_a_backend_says_which_setting_to_set(
    client: httpx.AsyncClient,
) -> None:
    answer = await client.post(
        "/v1/messages",
        json={
            "model": "claude-x",
            "max_tokens": 9,
            "messages": [{"role": "user", "content": "Hi"}],
        },
        headers=HEADERS,
    )
    assert_error(answer, 503, "proxy_not_configured")
    assert "PROXY__ANTHROPIC_BACKEND" in answer.json()["error"]["message"]


async def test_an_upstream_that_cannot_be_reached_is_a_502(context_dir: Path) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    async with running_app(proxied(context_dir, nowhere)) as client:
        answer = await client.post("/v1/chat/completions", json=CHAT, headers=HEADERS)
        assert_error(answer, 502, "upstream_unavailable")
        assert answer.json()["error"]["details"] == {"attempts": 2}
        # The agent's message is kept: its retry appends nothing twice.
        again = await client.post("/v1/chat/completions", json=CHAT, headers=HEADERS)
        assert_error(again, 502, "upstream_unavailable")
        history = (await client.get(f"/tasks/{TASK}/messages")).json()["messages"]
        assert [m["content"] for m in history] == ["Hi"]


async def test_an_upstream_that_does_not_answer_in_time_is_a_504(
    context_dir: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.set("hang")
    async with running_app(proxied(context_dir, fake_llm.base_url, timeout_s=0.2)) as client:
        answer = await client.post("/v1/chat/completions", json=CHAT, headers=HEADERS)
    assert_error(answer, 504, "upstream_timeout")


async def test_a_flaky_upstream_is_retried(client: httpx.AsyncClient, fake_llm: FakeLLM) -> None:
    fake_llm.set("flaky", failures=1)
    answer = await client.post("/v1/chat/completions", json=CHAT, headers=HEADERS)
    assert answer.status_code == 200, answer.text
    assert len(fake_llm.requests) == 2


async def test_a_streamed_answer_is_passed_on_event_by_event(
    client: httpx.AsyncClient, fake_llm: FakeLLM
) -> None:
    body = CHAT | {"stream": True, "stream_options": {"include_usage": True}}
    async with client.stream("POST", "/v1/chat/completions", json=body, headers=HEADERS) as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        raw = b"".join([chunk async for chunk in answer.aiter_bytes()])
    events = [e for e in raw.split(b"\n\n") if e]
    assert events[-1] == b"data: [DONE]"
    usage = json.loads(events[-2].removeprefix(b"data: "))
    assert usage["usage"]["prompt_tokens"] == 10  # asked for: passed on
    task = (await client.get(f"/tasks/{TASK}")).json()
    assert task["statistics"]["llm_call_count"] == 1


async def test_a_token_count_names_no_task_and_writes_nothing(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    before = snapshot_dir(context_dir)
    body = {"model": "claude-x", "messages": [{"role": "user", "content": "Hi " * 100}]}
    counted = await client.post("/v1/messages/count_tokens", json=body)
    assert counted.status_code == 200, counted.text
    assert 50 <= counted.json()["input_tokens"] < 200  # "Hi " a hundred times
    tool = {"name": "ls", "input_schema": {"type": "object"}}
    with_tool = await client.post("/v1/messages/count_tokens", json=body | {"tools": [tool]})
    assert with_tool.json()["input_tokens"] > counted.json()["input_tokens"]
    refused_bodies: list[dict[str, Any]] = [
        {"model": "claude-x"},
        {"messages": body["messages"]},
        body | {"system": 42},
        body | {"tools": "ls"},
        {"model": "m", "messages": [{"role": "assistant", "content": [{"type": "thinking"}]}]},
    ]
    for refused_body in refused_bodies:
        refused = await client.post("/v1/messages/count_tokens", json=refused_body)
        assert_error(refused, 422, "validation_error")
    assert snapshot_dir(context_dir) == before


async def test_a_rate_limit_comes_back_with_its_headers_after_the_retries(
    client: httpx.AsyncClient, fake_llm: FakeLLM
) -> None:
    fake_llm.set("error", fail_status=429, retry_after="7", error_message="slow down")
    answer = await client.post("/v1/chat/completions", json=CHAT, headers=HEADERS)
    assert answer.status_code == 429
    assert answer.headers["retry-after"] == "7"
    assert answer.json()["error"]["message"] == "slow down"  # the upstream's own body
    assert len(fake_llm.requests) == 2


async def test_the_answers_usage_calibrates_the_task(
    client: httpx.AsyncClient, fake_llm: FakeLLM
) -> None:
    """The reply is recorded with its usage: the LLM's prompt tokens against the payload the
    proxy sent tune the task's counts, with no call of the agent's own."""
    question = {"role": "user", "content": "Why does the parser fail on nested lists? " * 10}
    first = await client.post(
        "/v1/chat/completions", json=CHAT | {"messages": [question]}, headers=HEADERS
    )
    assert first.status_code == 200
    served = (await client.get(f"/tasks/{TASK}")).json()["context"]["tokens"]
    fake_llm.set(
        "ok",
        reply={
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "gpt-4o",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "Depth."},
                    "finish_reason": "stop",
                }
            ],
            # The model counts half as much again as the service: its tokenizer is another.
            "usage": {"prompt_tokens": round(served * 1.5), "completion_tokens": 3},
        },
    )
    again = [question, first.json()["choices"][0]["message"], {"role": "user", "content": "Go on."}]
    second = await client.post(
        "/v1/chat/completions", json=CHAT | {"messages": again}, headers=HEADERS
    )
    assert second.status_code == 200
    task = (await client.get(f"/tasks/{TASK}")).json()
    assert task["context"]["calibration"] > 1.2
    assert task["statistics"]["llm_call_count"] == 2


async def test_another_tenants_task_answers_as_a_uuid_taken_by_any_task(
    context_dir: Path, fake_llm: FakeLLM
) -> None:
    """Named by a key scoped to another user, bob's task is not found as his: the request
    goes where one naming a free uuid would, to a create. Out of the key's scope that is the
    403 any such create gets; in it, the 409 of a uuid taken by any task. Nothing tells the
    task is there, and nothing is written or sent upstream."""
    keys = {
        "alice": {"key": "alice-9Kd4rW2mQ7xP1vB6", "users": ["alice"]},
        "bob": {"key": "bob-4Tq8cN2xL6vR0mJ3", "users": ["bob"]},
    }
    settings = proxied(context_dir, fake_llm.base_url).model_copy(
        update={"auth": fast_settings(context_dir, auth={"api_keys": keys}).auth}
    )
    alice = {"Authorization": f"Bearer {keys['alice']['key']}"}
    bob = {"Authorization": f"Bearer {keys['bob']['key']}"}
    free = "5e0c1d2f-3a4b-4c5d-8e6f-7a8b9c0d1e2f"
    async with running_app(settings) as client:
        made = await client.post(
            "/v1/chat/completions", json=CHAT, headers={**HEADERS, **bob, "X-Context-User": "bob"}
        )
        assert made.status_code == 200, made.text
        sent, before = len(fake_llm.requests), snapshot_dir(context_dir)
        for user, status, code in (("bob", 403, "out_of_scope"), ("alice", 409, "task_exists")):
            for task in (TASK, free) if status == 403 else (TASK,):
                answer = await client.post(
                    "/v1/chat/completions",
                    json=CHAT,
                    headers={**HEADERS, "X-Context-Task": task, **alice, "X-Context-User": user},
                )
                assert_error(answer, status, code)
        assert (len(fake_llm.requests), snapshot_dir(context_dir)) == (sent, before)
