"""Tasks for the ops page's tests, made over the API: a compacted one (a small window filled
with long tool outputs: masks and condenses) and many plain ones (more than a page)."""

import json
from typing import Any

import httpx

from tests.support.tasks import append, create_task, key
from tests.support.waits import settled_jobs

TOOL_OUTPUT = "".join(f"src/module_{i}.py:{i}: def handler_{i}(request): ...\n" for i in range(60))


async def compacted_task(client: httpx.AsyncClient, **overrides: Any) -> str:
    """A running task in a 4k window whose tool outputs overflowed it: long outputs cut as
    they came, masked and condensed in the background; the uuid, once no compaction runs."""
    created = await create_task(
        client,
        system_prompt="You are a coding agent.",
        context_length=4096,
        max_output_tokens=512,
        **overrides,
    )
    uuid: str = created["uuid"]
    await append(client, uuid, {"role": "user", "content": "Find why the handlers crash."})
    for turn in range(10):
        call = {
            "id": f"call_{turn}",
            "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": f"f{turn}.py"})},
        }
        await append(
            client,
            uuid,
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{turn}", "content": TOOL_OUTPUT},
        )
    await settled_jobs(client, uuid, "condense")
    response = await client.get(f"/tasks/{uuid}/request")  # fits the payload, if need be
    assert response.status_code == 200, response.text[:500]
    await settled_jobs(client, uuid, "condense", at_least_one=False)
    return uuid


async def compactions(client: httpx.AsyncClient, uuid: str) -> list[dict[str, Any]]:
    """The task's summaries.jsonl records (GET /summaries)."""
    response = await client.get(f"/tasks/{uuid}/summaries", params={"limit": 1000})
    assert response.status_code == 200, response.text
    records: list[dict[str, Any]] = response.json()["summaries"]
    return records


async def plain_tasks(client: httpx.AsyncClient, count: int, **overrides: Any) -> list[str]:
    """``count`` tasks without messages, each with its own task id; their uuids, oldest
    first."""
    uuids = []
    for number in range(count):
        created = await create_task(client, task_key=key(task_id=f"plain-{number}"), **overrides)
        uuids.append(created["uuid"])
    return uuids
