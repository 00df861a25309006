"""What stays the root's in a task with threads (SPEC §8, seed 003): the calibration compares
a reported usage with the root's payload only, and the pinned plan is the root's alone (a
thread's payload neither carries nor counts it)."""

from typing import Any

import httpx

from tests.support.payloads import context_view, served
from tests.support.tasks import append, create_task
from tests.support.threads import FORMATS, LABEL, ROOT_TURN, THREAD_TURNS, send, start

PLAN = "PLAN-7: guard parse() against empty input, then run test_parser.py"


async def calibration(client: httpx.AsyncClient, uuid: str) -> tuple[float, int]:
    """The task's calibration factor and samples; GET /tasks/{uuid} agrees on the factor."""
    shown = (await context_view(client, uuid, 0))["calibration"]
    task = (await client.get(f"/tasks/{uuid}")).json()
    assert task["context"]["calibration"] == shown["factor"]
    return shown["factor"], shown["samples"]


async def report(
    client: httpx.AsyncClient, uuid: str, prompt_tokens: int, thread_id: int = 0
) -> None:
    """An assistant answer carrying its call's usage."""
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": 5}
    answer = {"role": "assistant", "content": "The guard is in.", "usage": usage}
    response = await send(client, uuid, answer, thread_id)
    assert response.status_code == 201, response.text


async def calibration_scene(client: httpx.AsyncClient) -> tuple[str, int, int]:
    """A root costing about twice the thread's payload, so that a report about the one
    compared with the other would move the factor; the uuid, the thread and the root's
    counted tokens as served (which records them for the next report)."""
    uuid = (await create_task(client, system_prompt="You are a coding agent."))["uuid"]
    await append(client, uuid, {"role": "user", "content": "ROOT: " + "fix the parser " * 150})
    thread_id = (await start(client, uuid))["thread_id"]
    await append(client, uuid, *THREAD_TURNS, thread_id=thread_id)
    root = int((await served(client, uuid, 0)).headers["X-Context-Tokens"])
    return uuid, thread_id, root


async def test_a_thread_s_payload_is_no_evidence_for_the_calibration(
    client: httpx.AsyncClient,
) -> None:
    uuid, thread_id, root = await calibration_scene(client)
    answer = await client.get(f"/tasks/{uuid}/request", params={"thread_id": thread_id})
    assert answer.status_code == 200, answer.text  # the provider's (openai) format
    thread = int(answer.headers["X-Context-Tokens"])
    assert 1.25 <= root / thread <= 3, (root, thread)  # compared, it would move the factor
    await report(client, uuid, root)
    assert await calibration(client, uuid) == (1.0, 1)  # compared with the root's payload


async def test_a_usage_reported_in_a_thread_never_calibrates(client: httpx.AsyncClient) -> None:
    uuid, thread_id, root = await calibration_scene(client)
    await report(client, uuid, 2 * root, thread_id)
    assert await calibration(client, uuid) == (1.0, 0)
    answer = await served(client, uuid, thread_id)
    assert answer.headers["X-Token-Calibration"] == "1.0"
    # The root's served payload still waits for its own report.
    await report(client, uuid, root)
    assert await calibration(client, uuid) == (1.0, 1)


# -- 3. the pinned plan ----------------------------------------------------------------------


async def counts(client: httpx.AsyncClient, uuid: str, thread_id: int) -> dict[str, Any]:
    """Per format: the payload's X- headers, and whether the plan is in its text."""
    found: dict[str, Any] = {}
    for fmt in FORMATS:
        answer = await served(client, uuid, thread_id, fmt)
        headers = {k: v for k, v in answer.headers.items() if k.startswith("x-")}
        found[fmt] = (headers, answer.text.count(PLAN))
    view = await context_view(client, uuid, thread_id)
    found["context"] = (view["tokens"], view["protected_tokens"], str(view).count(PLAN))
    return found


async def test_the_pinned_plan_is_the_root_s_alone(client: httpx.AsyncClient) -> None:
    uuid = (await create_task(client, system_prompt="You are a coding agent.", pin_plan=True))[
        "uuid"
    ]
    await append(client, uuid, ROOT_TURN)
    thread_id = (await start(client, uuid, label=LABEL))["thread_id"]
    await append(client, uuid, *THREAD_TURNS, thread_id=thread_id)
    root_before = await counts(client, uuid, 0)
    thread_before = await counts(client, uuid, thread_id)

    response = await client.post(
        f"/tasks/{uuid}/planning", json={"plan_type": "initial", "plan_content": PLAN}
    )
    assert response.status_code == 201, response.text

    root_after = await counts(client, uuid, 0)
    for fmt in FORMATS:
        (before, absent), (after, present) = root_before[fmt], root_after[fmt]
        assert (absent, present) == (0, 1), fmt
        assert int(after["x-context-tokens"]) > int(before["x-context-tokens"]), fmt
    assert root_after["context"][2] == 1
    assert root_after["context"][0] > root_before["context"][0]
    # The thread's payloads, their headers (X-Thread-Tokens, X-Context-Tokens,
    # X-Protected-Tokens) and its /context are as they were before the plan.
    assert await counts(client, uuid, thread_id) == thread_before
    assert all(thread_before[fmt][1] == 0 for fmt in FORMATS)
    assert all("x-thread-tokens" in thread_before[fmt][0] for fmt in FORMATS)
