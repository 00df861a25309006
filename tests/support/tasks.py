"""Tasks as the tests drive them through the API: the body of POST /tasks, a task created, its
contexts filled and read back, its planning entries, its end."""

from typing import Any

import httpx

DEFAULT_KEY: dict[str, str] = {
    "task_source": "github",
    "owner": "notfolder",
    "repo": "coding_agent",
    "task_type": "issue",
    "task_id": "27",
}


def task_body(**overrides: Any) -> dict[str, Any]:
    """A POST /tasks body (the default task key, an openai gpt-4o task with a 128k window),
    some fields replaced."""
    body: dict[str, Any] = {
        "task_key": dict(DEFAULT_KEY),
        "user": "notfolder",
        "llm_provider": "openai",
        "model": "gpt-4o",
        "context_length": 128000,
        "max_output_tokens": 4096,
    }
    body.update(overrides)
    return body


def key(**overrides: str) -> dict[str, str]:
    """A task key: the default one with some fields replaced."""
    return DEFAULT_KEY | overrides


async def create_task(client: httpx.AsyncClient, **overrides: Any) -> dict[str, Any]:
    """POST /tasks with task_body(**overrides); asserts 201 and returns the task."""
    response = await client.post("/tasks", json=task_body(**overrides))
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


async def windowed_task(
    client: httpx.AsyncClient, window: int, max_output_tokens: int
) -> tuple[str, int]:
    """A task with this window and output reserve; returns its uuid and its budget
    (window * (1 - CONTEXT_BUFFER 0.1) - reserve, SPEC §6)."""
    created = await create_task(client, context_length=window, max_output_tokens=max_output_tokens)
    return created["uuid"], int(window * 0.9) - max_output_tokens


SYSTEM_PROMPT = "You are a coding agent."


async def new_task(client: httpx.AsyncClient, **overrides: Any) -> str:
    """A running task with SYSTEM_PROMPT (unless ``overrides`` say otherwise); its uuid."""
    created = await create_task(client, **({"system_prompt": SYSTEM_PROMPT} | overrides))
    uuid: str = created["uuid"]
    return uuid


async def post_messages(
    client: httpx.AsyncClient, uuid: str, body: dict[str, Any], thread_id: int = 0
) -> dict[str, Any]:
    """POST /messages (one message or a batch) to a context; asserts 201 and returns the
    answer."""
    response = await client.post(
        f"/tasks/{uuid}/messages", params={"thread_id": thread_id}, json=body
    )
    assert response.status_code == 201, response.text[:2000]
    answer: dict[str, Any] = response.json()
    return answer


async def append(
    client: httpx.AsyncClient, uuid: str, *messages: dict[str, Any], thread_id: int = 0
) -> list[int]:
    """POST the messages to a context as one batch; asserts 201 and returns their seqs."""
    seqs: list[int] = (await post_messages(client, uuid, {"messages": messages}, thread_id))["seqs"]
    return seqs


async def task_with_messages(client: httpx.AsyncClient, count: int, prefix: str = "message") -> str:
    """A task with SYSTEM_PROMPT and ``count`` user messages "<prefix> <i>", posted one at a
    time; its uuid."""
    uuid = await new_task(client)
    for i in range(count):
        await post_messages(client, uuid, {"role": "user", "content": f"{prefix} {i}"})
    return uuid


async def task_context(client: httpx.AsyncClient, uuid: str) -> dict[str, Any]:
    """The ``context`` block of GET /tasks/{uuid}."""
    response = await client.get(f"/tasks/{uuid}")
    assert response.status_code == 200, response.text
    context: dict[str, Any] = response.json()["context"]
    return context


async def post_plan(client: httpx.AsyncClient, uuid: str, body: dict[str, Any]) -> Any:
    """POST /planning; asserts 201 and returns the entry."""
    response = await client.post(f"/tasks/{uuid}/planning", json=body)
    assert response.status_code == 201, response.text
    return response.json()


async def run_and_finish(
    client: httpx.AsyncClient,
    action: str = "complete",
    *,
    messages: list[dict[str, Any]] | None = None,
    plans: tuple[str, ...] = (),
    **task: Any,
) -> dict[str, Any]:
    """A task with a short conversation and planning entries, completed or failed."""
    created = await create_task(client, system_prompt=SYSTEM_PROMPT, **task)
    uuid = created["uuid"]
    conversation = messages or [
        {"role": "user", "content": "Fix the crash in parser.py when the input is empty."},
        {"role": "assistant", "content": "I will read parser.py and add a guard."},
    ]
    response = await client.post(f"/tasks/{uuid}/messages", json={"messages": conversation})
    assert response.status_code == 201, response.text
    for number, plan in enumerate(plans):
        kind = "initial" if number == 0 else "revision"
        response = await client.post(
            f"/tasks/{uuid}/planning", json={"plan_type": kind, "plan_content": plan}
        )
        assert response.status_code == 201, response.text
    body = {"error_message": "tests failed: test_empty_input"} if action == "fail" else None
    response = await client.post(f"/tasks/{uuid}/{action}", json=body)
    assert response.status_code == 200, response.text
    finished: dict[str, Any] = response.json()
    return finished


async def all_messages(
    client: httpx.AsyncClient, uuid: str, thread_id: int = 0, limit: int = 100
) -> list[dict[str, Any]]:
    """A context's whole GET /messages, page by page (``limit`` records a page at most),
    checking that the pages chain and that the last one ends at the context's last seq."""
    records: list[dict[str, Any]] = []
    after = 0
    for _ in range(10_000):  # bounded: far more pages than any test writes
        response = await client.get(
            f"/tasks/{uuid}/messages",
            params={"thread_id": thread_id, "after_seq": after, "limit": limit},
        )
        assert response.status_code == 200, response.text
        page = response.json()
        assert len(page["messages"]) <= limit
        records += page["messages"]
        if page["next_after_seq"] is None:
            assert page["last_seq"] == (records[-1]["seq"] if records else 0)
            return records
        assert page["next_after_seq"] == page["messages"][-1]["seq"]
        after = page["next_after_seq"]
    raise AssertionError("GET /messages never reached its last page")
