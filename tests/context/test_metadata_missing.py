"""A task whose metadata.json is gone: its tool definitions and request defaults exist nowhere
else (the task row holds neither), so it cannot be rebuilt. Reading its history, serving its
payload and appending to it all answer the same named 500 `task_metadata_missing` saying what
was lost and how to restore it, with ``Connection: close``; nothing is written. Before, reads
were an anonymous `internal_error` while appends answered 201. The task itself can still be
shown and deleted."""

from pathlib import Path
from typing import Any

import httpx

from tests.support.errors import assert_error
from tests.support.files import snapshot_dir, task_dir

TOOL = {
    "type": "function",
    "function": {"name": "read_file", "parameters": {"type": "object", "properties": {}}},
}


async def test_every_use_of_the_context_answers_the_same_named_error(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    created = await client.post(
        "/tasks",
        json={
            "task_key": {
                "task_source": "github",
                "owner": "o",
                "repo": "r",
                "task_type": "issue",
                "task_id": "1",
            },
            "model": "gpt-4o",
            "system_prompt": "You are a coding agent.",
            "tools": [TOOL],
            "request_defaults": {"temperature": 0.2},
        },
    )
    assert created.status_code == 201, created.text
    uuid = created.json()["uuid"]
    (task_dir(context_dir, uuid) / "metadata.json").unlink()
    files_before = snapshot_dir(context_dir)
    task_before = (await client.get(f"/tasks/{uuid}")).json()

    answers = [
        await client.get(f"/tasks/{uuid}/messages"),
        await client.get(f"/tasks/{uuid}/request"),
        await client.post(
            f"/tasks/{uuid}/messages", json={"messages": [{"role": "user", "content": "x"}]}
        ),
    ]
    for response in answers:
        details: dict[str, Any] = assert_error(response, 500, "task_metadata_missing")
        assert details == {
            "uuid": uuid,
            "file": "metadata.json",
            "lost": ["tools", "request_defaults", "summary_backend", "inherit"],
        }
        assert "restore" in response.json()["error"]["message"]
        assert response.headers["connection"] == "close"

    assert snapshot_dir(context_dir) == files_before
    assert (await client.get(f"/tasks/{uuid}")).json() == task_before
    deleted = await client.delete(f"/tasks/{uuid}")
    assert deleted.status_code == 204, deleted.text
    assert (await client.get(f"/tasks/{uuid}")).status_code == 404
