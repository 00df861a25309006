"""The fake LLM server itself: it records what it receives and stops with requests in flight."""

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.fakes import llm_server
from tests.fakes.llm_server import FakeLLM, ToolUse, running_fake_llm

fake_llm = llm_server.fake_llm  # the fixture: a real HTTP server on 127.0.0.1

BOUND_S = 5.0


def wait_for_requests(fake: FakeLLM, count: int) -> None:
    deadline = time.monotonic() + BOUND_S
    while len(fake.requests) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(fake.requests) == count


def test_stops_with_hanging_requests_in_flight() -> None:
    """Stopping the server while "hang" requests wait ends them (503) and its thread; while
    they wait, the server still answers other requests."""
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": False}
    with ThreadPoolExecutor(max_workers=3) as pool:
        with running_fake_llm() as fake:
            url = fake.base_url + "/api/chat"
            fake.set("hang")
            futures = [pool.submit(httpx.post, url, json=body, timeout=30) for _ in range(3)]
            wait_for_requests(fake, 3)
            fake.behaviour = "ok"
            assert httpx.post(url, json=body, timeout=BOUND_S).status_code == 200
            assert not any(future.done() for future in futures)
        statuses = [future.result(timeout=BOUND_S).status_code for future in futures]
    assert statuses == [503, 503, 503]


async def test_records_requests(fake_llm: FakeLLM) -> None:
    """Path, lower-case headers and the JSON body (None when not JSON) of every request."""
    async with httpx.AsyncClient(base_url=fake_llm.base_url, timeout=BOUND_S) as client:
        await client.post("/v1/messages", json={"a": 1}, headers={"X-Api-Key": "k"})
        await client.post("/api/chat", content=b"not json")
    first, second = fake_llm.requests
    assert (first.path, first.headers["x-api-key"], first.body) == ("/v1/messages", "k", {"a": 1})
    assert (second.path, second.body) == ("/api/chat", None)


async def test_flaky_counts_failures_then_answers(fake_llm: FakeLLM) -> None:
    """ "flaky" answers 500 ``failures`` times, then 200; set() starts the count again."""
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 5}
    async with httpx.AsyncClient(base_url=fake_llm.base_url, timeout=BOUND_S) as client:
        fake_llm.set("flaky", failures=2)
        codes = [(await client.post("/v1/messages", json=body)).status_code for _ in range(3)]
        fake_llm.set("flaky", failures=1)
        codes += [(await client.post("/v1/messages", json=body)).status_code for _ in range(2)]
    assert codes == [500, 500, 200, 500, 200]


async def test_refuses_what_a_real_server_would(fake_llm: FakeLLM) -> None:
    """ "ok" still answers 400 to a request the real API refuses (Anthropic without max_tokens
    or with a system turn), so request-shape bugs show up as errors."""
    async with httpx.AsyncClient(base_url=fake_llm.base_url, timeout=BOUND_S) as client:
        no_max = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
        system_turn = {
            "model": "m",
            "max_tokens": 5,
            "messages": [{"role": "system", "content": "s"}],
        }
        responses = [await client.post("/v1/messages", json=b) for b in (no_max, system_turn)]
    assert [r.status_code for r in responses] == [400, 400]
    assert responses[0].json()["error"]["message"] == "max_tokens: field required"


def test_set_refuses_unknown_options(fake_llm: FakeLLM) -> None:
    """A misspelt option fails loudly instead of being ignored."""
    with pytest.raises(AttributeError):
        fake_llm.set("flaky", failure=2)


def _turn(path: str, answer: dict[str, Any]) -> Any:
    """An answer's turn: its text, or (name, arguments) of its tool call."""
    if path == "/v1/messages":
        block = answer["content"][0]
        return (block["name"], block["input"]) if block["type"] == "tool_use" else block["text"]
    message = (
        answer["choices"][0]["message"] if path == "/v1/chat/completions" else answer["message"]
    )
    if not message.get("tool_calls"):
        return message["content"]
    function = message["tool_calls"][0]["function"]
    arguments = function["arguments"]  # OpenAI's as JSON text, Ollama's as an object
    return function["name"], json.loads(arguments) if isinstance(arguments, str) else arguments


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages", "/api/chat"])
async def test_a_script_answers_turn_by_turn_in_the_paths_format(
    fake_llm: FakeLLM, path: str
) -> None:
    """A scripted tool call, then a scripted text, then the usual text once the script ran
    out."""
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 5}
    body["stream"] = False
    fake_llm.set("ok", script=[ToolUse("read_file", {"path": "a.py"}), "done"])
    async with httpx.AsyncClient(base_url=fake_llm.base_url, timeout=BOUND_S) as client:
        answers = [(await client.post(path, json=body)).json() for _ in range(3)]
    assert [_turn(path, answer) for answer in answers] == [
        ("read_file", {"path": "a.py"}),
        "done",
        "This is the summary.",
    ]
