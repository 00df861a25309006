"""A payload the service cannot serve is a 4xx in the one error shape, never a truncated
payload, and changes nothing (SPEC §3.8): a context over its budget that compaction cannot bring
under it, and a context without messages.

"Changes nothing" is checked three ways for every case (tests/support/unchanged.py): the bytes of
every file under CONTEXT_DIR, every directory under it, and the task as the API reports it.
"""

from pathlib import Path

import httpx

from tests.support.conversations import user
from tests.support.errors import assert_error
from tests.support.tasks import create_task
from tests.support.unchanged import assert_unchanged, state

Client = httpx.AsyncClient


async def test_request_over_budget_is_an_error_not_a_truncated_payload(
    client: Client, context_dir: Path
) -> None:
    """A context that compaction cannot bring under its budget (here tool definitions larger
    than the budget: they go with every payload) makes GET /request 413 context_over_budget,
    every time, and changes nothing."""
    tool = {"type": "function", "function": {"name": "big", "description": "word " * 4000}}
    created = await create_task(client, context_length=2048, max_output_tokens=512, tools=[tool])
    uuid = created["uuid"]
    budget = int(2048 * 0.9) - 512
    response = await client.post(f"/tasks/{uuid}/messages", json=user("go on"))
    assert response.status_code == 201, response.text
    before = await state(client, context_dir, uuid)
    assert before["task"]["context"]["budget"] == budget
    assert before["task"]["context"]["tokens"] > budget

    for _ in range(2):
        response = await client.get(f"/tasks/{uuid}/request")
        details = assert_error(response, 413, "context_over_budget")
        assert details["budget"] == budget
        assert details["tokens"] > budget
        assert "X-Context-Tokens" not in response.headers
    assert_unchanged(before, await state(client, context_dir, uuid))


async def test_request_of_empty_context(client: Client, context_dir: Path) -> None:
    """A task without messages has no payload to serve: 409 context_empty."""
    uuid = (await create_task(client))["uuid"]
    before = await state(client, context_dir, uuid)
    assert_error(await client.get(f"/tasks/{uuid}/request"), 409, "context_empty")
    assert_unchanged(before, await state(client, context_dir, uuid))
