"""Threads as the tests drive them: starting one, the scene most tests play (a task with a
thread of two turns), ending it, and what its chronicle leaves in the parent."""

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from app.config import Settings
from app.storage import layout
from tests.fakes.llm_server import FakeLLM, RecordedRequest
from tests.support.files import read_jsonl, task_dir
from tests.support.payloads import served
from tests.support.settings import layered, llm_settings
from tests.support.tasks import SYSTEM_PROMPT, append, create_task
from tests.support.waits import settled_jobs

FORMATS = ("openai", "lmstudio", "anthropic", "ollama")
CHRONICLE = "The parser now guards empty input; test_empty passes."
LABEL = "fix parser"
ROOT_TURN = {"role": "user", "content": "ROOT: make the parser accept empty input."}
THREAD_TURNS = [
    {"role": "user", "content": "THREAD: read parser.py and find the crash."},
    {"role": "assistant", "content": "THREAD: parse() indexed tokens[0]; guarded, tests pass."},
]
WHEN = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"


def chronicle_settings(context_dir: Path, fake: FakeLLM, **extra: Any) -> Settings:
    """The fake LLM as the default backend, one call per attempt."""
    return llm_settings(context_dir, fake, **layered({"llm": {"max_retries": 0}}, extra))


async def start(client: httpx.AsyncClient, uuid: str, **body: Any) -> dict[str, Any]:
    """POST /threads; asserts 201 and returns the thread."""
    response = await client.post(f"/tasks/{uuid}/threads", json=body)
    assert response.status_code == 201, response.text
    thread: dict[str, Any] = response.json()
    return thread


async def send(
    client: httpx.AsyncClient, uuid: str, body: dict[str, Any], thread_id: int = 0
) -> httpx.Response:
    """POST /messages to a context."""
    return await client.post(f"/tasks/{uuid}/messages", params={"thread_id": thread_id}, json=body)


async def finish(
    client: httpx.AsyncClient, uuid: str, thread_id: int, action: str = "end", **body: Any
) -> httpx.Response:
    """POST .../threads/{id}/end or /abort."""
    return await client.post(f"/tasks/{uuid}/threads/{thread_id}/{action}", json=body)


async def ended(
    client: httpx.AsyncClient, uuid: str, thread_id: int, action: str = "end", **body: Any
) -> dict[str, Any]:
    response = await finish(client, uuid, thread_id, action, **body)
    assert response.status_code == 200, response.text
    thread: dict[str, Any] = response.json()
    return thread


async def scene(client: httpx.AsyncClient, *, label: str = LABEL, **thread: Any) -> tuple[str, int]:
    """A task with a system prompt and a user turn, and a thread with two turns of its own."""
    uuid = (await create_task(client, system_prompt=SYSTEM_PROMPT))["uuid"]
    await append(client, uuid, ROOT_TURN)
    thread_id: int = (await start(client, uuid, label=label, **thread))["thread_id"]
    await append(client, uuid, *THREAD_TURNS, thread_id=thread_id)
    return uuid, thread_id


def nodes(tree: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield tree
    for child in tree["children"]:
        yield from nodes(child)


async def rows(client: httpx.AsyncClient, uuid: str) -> dict[int, dict[str, Any]]:
    """Every context of the task by id, as GET /threads shows it (children left out)."""
    response = await client.get(f"/tasks/{uuid}/threads")
    assert response.status_code == 200, response.text
    return {
        n["thread_id"]: {k: v for k, v in n.items() if k != "children"}
        for n in nodes(response.json())
    }


def strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


async def payload_text(client: httpx.AsyncClient, uuid: str, fmt: str, thread_id: int = 0) -> str:
    """Every string of a context's payload in format ``fmt``, one after the other."""
    return "\n\n".join(strings((await served(client, uuid, thread_id, fmt)).json()))


def records(root: Path, uuid: str, thread_id: int = 0) -> list[dict[str, Any]]:
    """A context's messages.jsonl."""
    return read_jsonl(layout.context_dir(task_dir(root, uuid), thread_id) / layout.MESSAGES)


def embeddings(found: list[dict[str, Any]], thread_id: int) -> list[dict[str, Any]]:
    """The records embedding this thread's chronicle."""
    return [r for r in found if (r.get("metadata") or {}).get("stelis_thread_id") == thread_id]


def embedded_text(status: str, label: str, chronicle: str) -> str:
    return f"[Thread {status}: {label}]\n\n## Chronicle\n{chronicle}"


async def chronicle_jobs(client: httpx.AsyncClient, uuid: str) -> dict[int, dict[str, Any]]:
    """The task's chronicle jobs by thread, once all are done."""
    return {job["thread_id"]: job for job in await settled_jobs(client, uuid, "chronicle")}


def prompt_and_text(request: RecordedRequest) -> tuple[str, str]:
    """What a chronicle call sent: its system prompt, and the rest of its messages' text."""
    messages = request.body["messages"]
    assert messages[0]["role"] == "system"
    return messages[0]["content"], "\n".join(str(m["content"]) for m in messages[1:])


async def assert_parent_shows(
    client: httpx.AsyncClient,
    uuid: str,
    *,
    parent: int,
    thread_id: int,
    status: str,
    chronicle: str,
    label: str = LABEL,
) -> None:
    """In every format, the parent's payload holds the embedding once and the thread's anchor
    in full, with the chronicle and the end."""
    ended_at = WHEN if status == "completed" else f"aborted {WHEN}"
    anchor = re.compile(
        rf"\[Thread: {re.escape(label)}\]\n- ID: {thread_id}\n- Started: {WHEN}\n"
        rf"- Ended: {ended_at}\n- Messages: \d+\n\n## Chronicle\n{re.escape(chronicle)}"
    )
    for fmt in FORMATS:
        text = await payload_text(client, uuid, fmt, parent)
        assert text.count(f"[Thread {status}: {label}]") == 1, (fmt, text)
        assert embedded_text(status, label, chronicle) in text, fmt
        assert len(anchor.findall(text)) == 1, (fmt, text)
        assert text.count(chronicle) == 2, fmt  # the anchor's and the embedding's
