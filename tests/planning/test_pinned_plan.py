"""The pinned plan: the latest planning entry in every payload, right after the first user
message, counted in the budget, through compactions (issue 5, part 4)."""

from pathlib import Path
from typing import Any

import httpx
import orjson

from app.formats import FORMATS
from app.tokens.counters import HeuristicCounter
from tests.support.app import running_app
from tests.support.formats import validate_payload
from tests.support.settings import fast_settings
from tests.support.tasks import create_task
from tests.support.waits import settle

TASK = "Fix the crash in parser.py when the input is empty."
PLANS = ("PLAN-A: read parser.py, then add a guard", "PLAN-B: guard added; run the tests next")


async def add_plan(client: httpx.AsyncClient, uuid: str, kind: str, plan: Any) -> None:
    response = await client.post(
        f"/tasks/{uuid}/planning", json={"plan_type": kind, "plan_content": plan}
    )
    assert response.status_code == 201, response.text


async def check_payloads(client: httpx.AsyncClient, uuid: str, plan: str) -> None:
    """In every format: valid, within the budget, the plan once and right after the task."""
    for name in FORMATS:
        response = await client.get(f"/tasks/{uuid}/request", params={"format": name})
        assert response.status_code == 200, response.text
        payload = response.json()
        validate_payload(name, payload)
        assert int(response.headers["X-Context-Tokens"]) <= int(
            response.headers["X-Context-Budget"]
        )
        exact = FORMATS[name].payload_tokens(HeuristicCounter(), payload)
        assert exact <= int(response.headers["X-Context-Budget"]), name  # recounted
        text = orjson.dumps(payload).decode()
        assert text.count(plan) == 1, name
        assert text.index(TASK) < text.index(plan), name
        if name in ("openai", "lmstudio"):
            messages = payload["messages"]
            first_user = next(i for i, m in enumerate(messages) if m["role"] == "user")
            assert messages[first_user]["content"] == TASK
            assert plan in messages[first_user + 1]["content"]
            assert messages[first_user + 1]["role"] == "user"


async def test_the_current_plan_survives_every_compaction(context_dir: Path) -> None:
    settings = fast_settings(context_dir, compaction={"keep_recent": 4, "min_to_compress": 2})
    async with running_app(settings) as client:
        task = await create_task(
            client,
            system_prompt="You are a coding agent.",
            pin_plan=True,
            context_length=4096,
            max_output_tokens=512,
        )
        assert task["pin_plan"] is True
        uuid = task["uuid"]
        await client.post(f"/tasks/{uuid}/messages", json={"role": "user", "content": TASK})
        await add_plan(client, uuid, "initial", PLANS[0])
        await check_payloads(client, uuid, PLANS[0])
        for round_number in range(6):
            turns = [
                {"role": "assistant", "content": f"round {round_number} work " + "w " * 500},
                {"role": "user", "content": f"round {round_number} result " + "r " * 500},
            ]
            response = await client.post(f"/tasks/{uuid}/messages", json={"messages": turns})
            assert response.status_code == 201, response.text
            if round_number == 2:
                await add_plan(client, uuid, "revision", PLANS[1])
            plan = PLANS[1] if round_number >= 2 else PLANS[0]
            await check_payloads(client, uuid, plan)  # GET /request compacts when over budget
        # The background condense kept only what leaves room: a few more turns to compact, once
        # it has ended (one still running would condense them itself, leaving nothing to do).
        await settle(client)
        for round_number in range(6, 9):
            turns = [
                {"role": "assistant", "content": f"round {round_number} work " + "w " * 100},
                {"role": "user", "content": f"round {round_number} result " + "r " * 100},
            ]
            response = await client.post(f"/tasks/{uuid}/messages", json={"messages": turns})
            assert response.status_code == 201, response.text
        for strategy in ("condense", "truncate"):
            response = await client.post(f"/tasks/{uuid}/compress", json={"strategy": strategy})
            assert response.json()["kind"] != "skipped", response.text
            await check_payloads(client, uuid, PLANS[1])
        summaries = (await client.get(f"/tasks/{uuid}/summaries")).json()["summaries"]
        assert {s["kind"] for s in summaries} >= {"condense", "truncation"}
        assert (
            PLANS[0]
            not in orjson.dumps((await client.get(f"/tasks/{uuid}/request")).json()).decode()
        )


async def test_the_plan_counts_in_the_budget(context_dir: Path) -> None:
    async with running_app(fast_settings(context_dir)) as client:
        tokens = {}
        for pin in (False, True):
            task = await create_task(client, pin_plan=pin, inherit=False)
            uuid = task["uuid"]
            await client.post(f"/tasks/{uuid}/messages", json={"role": "user", "content": TASK})
            await add_plan(client, uuid, "initial", {"steps": ["read", "fix", "test"]})
            response = await client.get(f"/tasks/{uuid}/request")
            tokens[pin] = int(response.headers["X-Context-Tokens"])
            context = (await client.get(f"/tasks/{uuid}/context")).json()
            assert context["tokens"] == tokens[pin]
            assert context["message_count"] == 1  # the pinned plan is no context message...
            assert len(context["messages"]) == 1 + pin  # ...but /context shows what is sent
            text = orjson.dumps(response.json()).decode()
            assert ('\\"steps\\"' in text) is pin  # a JSON plan is sent as indented JSON text
    plan_tokens = tokens[True] - tokens[False]
    assert plan_tokens > 10


async def test_a_huge_plan_is_capped_to_a_quarter_of_the_budget(context_dir: Path) -> None:
    async with running_app(fast_settings(context_dir)) as client:
        task = await create_task(client, pin_plan=True, context_length=4096, max_output_tokens=512)
        uuid = task["uuid"]
        await client.post(f"/tasks/{uuid}/messages", json={"role": "user", "content": TASK})
        await add_plan(client, uuid, "initial", "P" * 50_000)
        response = await client.get(f"/tasks/{uuid}/request")
        assert response.status_code == 200, response.text
        budget = int(response.headers["X-Context-Budget"])
        plan = response.json()["messages"][1]["content"]
        assert plan.startswith("[Current plan: planning entry 1 (initial, ")
        assert len(plan) // 4 <= budget // 4  # the heuristic counter: characters / 4
        assert int(response.headers["X-Context-Tokens"]) <= budget


async def test_without_a_user_message_the_plan_never_splits_a_tool_call(
    context_dir: Path,
) -> None:
    """No user message yet and a tool call waiting for its result: the plan goes before the
    assistant's turn, so every format still pairs the call with its result."""
    async with running_app(fast_settings(context_dir)) as client:
        task = await create_task(client, system_prompt="You are a coding agent.", pin_plan=True)
        uuid = task["uuid"]
        call: dict[str, Any] = {"id": "call_1", "type": "function"}
        call["function"] = {"name": "read_file", "arguments": '{"path": "a.py"}'}
        opened = {"role": "assistant", "content": None, "tool_calls": [call]}
        assert (await client.post(f"/tasks/{uuid}/messages", json=opened)).status_code == 201
        await add_plan(client, uuid, "initial", PLANS[0])
        for step in ("open", "answered"):
            for name in FORMATS:
                response = await client.get(f"/tasks/{uuid}/request", params={"format": name})
                assert response.status_code == 200, response.text
                payload = response.json()
                validate_payload(name, payload)
                assert orjson.dumps(payload).decode().count(PLANS[0]) == 1
            messages = (await client.get(f"/tasks/{uuid}/request")).json()["messages"]
            assert [m["role"] for m in messages[:3]] == ["system", "user", "assistant"]
            assert PLANS[0] in messages[1]["content"]
            if step == "open":
                result = {"role": "tool", "tool_call_id": "call_1", "content": "print(1)"}
                response = await client.post(f"/tasks/{uuid}/messages", json=result)
                assert response.status_code == 201, response.text


async def test_a_plan_that_crosses_the_threshold_schedules_a_condense(context_dir: Path) -> None:
    async with running_app(fast_settings(context_dir, job={"poll_s": 60.0})) as client:
        task = await create_task(client, pin_plan=True, context_length=4096, max_output_tokens=512)
        uuid = task["uuid"]
        turns = [
            {"role": "user", "content": TASK},
            # About 2250 tokens, each message under the message cap (a tenth of the budget).
            *({"role": "assistant", "content": f"step {i} " + "w " * 550} for i in range(8)),
        ]
        await client.post(f"/tasks/{uuid}/messages", json={"messages": turns})
        context = (await client.get(f"/tasks/{uuid}")).json()["context"]
        assert context["tokens"] < context["threshold"]
        assert (await client.get("/jobs", params={"task_uuid": uuid})).json()["jobs"] == []
        await add_plan(client, uuid, "initial", "p " * 1300)  # about 650 tokens
        context = (await client.get(f"/tasks/{uuid}")).json()["context"]
        assert context["tokens"] >= context["threshold"]
        jobs = (await client.get("/jobs", params={"task_uuid": uuid})).json()["jobs"]
        assert [job["kind"] for job in jobs] == ["condense"]
