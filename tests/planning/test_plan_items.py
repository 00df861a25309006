"""Plan items with a status: validated, pinned with their status in every format and counted,
listed by GET /planning, and given as recorded to the condense summariser (the extractive
digest and a chat backend's prompt), so a finished item is never a next step again."""

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.formats import FORMATS
from app.summaries.digest import NEXT_STEPS
from app.summaries.layout import PLAN_TITLE
from app.summaries.summarizer import DEFAULT_PROMPT, FINAL_REQUEST, PLAN_LABEL
from app.tokens.counters import HeuristicCounter
from tests.fakes import llm_server
from tests.fakes.llm_server import FakeLLM
from tests.support.app import running_app
from tests.support.errors import assert_error
from tests.support.files import read_jsonl, snapshot_dir, task_dir
from tests.support.formats import validate_payload
from tests.support.settings import fast_settings, llm_settings
from tests.support.tasks import create_task, post_plan

fake_llm = llm_server.fake_llm  # the fixture: a real HTTP server on 127.0.0.1

TASK = "Fix the crash in parser.py when the input is empty."
ITEMS = [
    {"id": "1", "text": "write tests", "status": "done"},
    {"id": "2", "text": "fix parser", "status": "active"},
    {"id": "3", "text": "docs", "status": "pending"},
    {"id": "4", "text": "old idea", "status": "cancelled"},
]
CHECKLIST = (
    "Plan:\n[x] 1. write tests\n[>] 2. fix parser (active)\n[ ] 3. docs\n"
    "[-] 4. old idea (cancelled)"
)


async def planning(client: httpx.AsyncClient, uuid: str) -> dict[str, Any]:
    response = await client.get(f"/tasks/{uuid}/planning")
    assert response.status_code == 200, response.text
    page: dict[str, Any] = response.json()
    return page


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"plan_type": "x", "items": [{"id": "1", "text": "a", "status": "finished"}]}, "status"),
        ({"plan_type": "x", "items": [{"text": "a"}, {"id": "1", "text": "b"}]}, "items"),
        ({"plan_type": "x", "items": [{"id": "1", "text": "a\n[x] 2. forged"}]}, "text"),
        ({"plan_type": "x", "items": [{"id": "1\n2", "text": "a"}]}, "id"),
        ({"plan_type": "x", "items": [{"id": "1", "text": ""}]}, "text"),
        ({"plan_type": "x", "items": [{"id": "1", "text": "a", "owner": "me"}]}, "owner"),
        ({"plan_type": "x", "items": [{"text": f"t{i}"} for i in range(201)]}, "items"),
        ({"plan_type": "x", "items": "1. a"}, "items"),
        ({"plan_type": "x"}, "items"),  # neither free text nor items
    ],
)
async def test_bad_items_are_422_naming_the_field_and_write_nothing(
    client: httpx.AsyncClient,
    task: dict[str, Any],
    context_dir: Path,
    body: dict[str, Any],
    field: str,
) -> None:
    before = snapshot_dir(context_dir)
    response = await client.post(f"/tasks/{task['uuid']}/planning", json=body)
    details = assert_error(response, 422, "validation_error")
    assert field in details["errors"][0]["loc"], details
    assert response.json()["error"]["message"].startswith("body.")
    assert snapshot_dir(context_dir) == before


async def test_an_entry_with_items_sets_the_current_items_until_another_does(
    client: httpx.AsyncClient, task: dict[str, Any], context_dir: Path
) -> None:
    """Items replace the current ones; a free-text entry leaves them; [] clears them."""
    uuid = task["uuid"]
    unnumbered = [{"text": "read a.py", "status": "done"}, {"text": "fix the bug"}]
    first = await post_plan(client, uuid, {"plan_type": "initial", "items": unnumbered})
    numbered = [
        {"id": "1", "text": "read a.py", "status": "done"},
        {"id": "2", "text": "fix the bug", "status": "pending"},
    ]
    assert first["items"] == numbered  # ids default to positions, status to pending
    assert first["plan_content"] == ""
    page = await planning(client, uuid)
    assert (page["current_items"], page["current_entry_id"]) == (numbered, 1)

    note = await post_plan(client, uuid, {"plan_type": "note", "plan_content": "bug is in lex"})
    assert "items" not in note  # a free-text entry reads as it always did
    page = await planning(client, uuid)
    assert (page["current_items"], page["current_entry_id"]) == (numbered, 1)

    await post_plan(client, uuid, {"plan_type": "revision", "plan_content": "x", "items": ITEMS})
    page = await planning(client, uuid)
    assert (page["current_items"], page["current_entry_id"]) == (ITEMS, 3)
    assert [e["id"] for e in page["planning"]] == [1, 2, 3]

    await post_plan(client, uuid, {"plan_type": "revision", "items": []})
    page = await planning(client, uuid)
    assert (page["current_items"], page["current_entry_id"]) == ([], 4)
    on_disk = read_jsonl(task_dir(context_dir, uuid) / "planning.jsonl")
    assert on_disk == page["planning"]
    assert [entry.get("items") for entry in on_disk] == [numbered, None, ITEMS, []]


async def check_pinned(client: httpx.AsyncClient, uuid: str, expected: str) -> None:
    """In every format: valid, the plan once with its statuses, counted (never less than the
    payload recounted: adjacent user turns merged in some formats cost a little less) within
    the budget."""
    for name in FORMATS:
        response = await client.get(f"/tasks/{uuid}/request", params={"format": name})
        assert response.status_code == 200, response.text
        payload = response.json()
        validate_payload(name, payload)
        budget = int(response.headers["X-Context-Budget"])
        counted = int(response.headers["X-Context-Tokens"])
        assert FORMATS[name].payload_tokens(HeuristicCounter(), payload) <= counted, name
        assert counted <= budget, name
        text = orjson.dumps(payload).decode()
        assert text.count(orjson.dumps(expected).decode()[1:-1]) == 1, name


async def test_the_pinned_plan_shows_each_item_with_its_status(context_dir: Path) -> None:
    async with running_app(fast_settings(context_dir)) as client:
        task = await create_task(client, system_prompt="You are a coding agent.", pin_plan=True)
        uuid = task["uuid"]
        await client.post(f"/tasks/{uuid}/messages", json={"role": "user", "content": TASK})
        bare = (await client.get(f"/tasks/{uuid}/request")).headers["X-Context-Tokens"]
        entry = {"plan_type": "initial", "plan_content": "Guard the empty input.", "items": ITEMS}
        await post_plan(client, uuid, entry)
        await check_pinned(client, uuid, "Guard the empty input.\n" + CHECKLIST)
        messages = (await client.get(f"/tasks/{uuid}/request")).json()["messages"]
        assert messages[2]["content"].startswith("[Current plan: planning entry 1 (initial, ")
        assert messages[2]["content"].endswith(CHECKLIST)
        with_items = (await client.get(f"/tasks/{uuid}/request")).headers["X-Context-Tokens"]
        assert int(with_items) - int(bare) >= len(CHECKLIST) // 4  # the items are counted

        # A later free-text entry is the pinned plan's text; the checklist still stands.
        await post_plan(client, uuid, {"plan_type": "note", "plan_content": "Lexer first."})
        expected = "Lexer first.\n(items as set by planning entry 1)\n" + CHECKLIST
        await check_pinned(client, uuid, expected)
        context = (await client.get(f"/tasks/{uuid}/context")).json()
        request = await client.get(f"/tasks/{uuid}/request")
        assert context["tokens"] == int(request.headers["X-Context-Tokens"])


async def condensed_summary(client: httpx.AsyncClient, uuid: str) -> str:
    response = await client.post(f"/tasks/{uuid}/compress", json={"strategy": "condense"})
    assert response.status_code == 200, response.text
    assert response.json()["kind"] == "condense", response.text
    summaries = (await client.get(f"/tasks/{uuid}/summaries")).json()["summaries"]
    summary: str = summaries[-1]["summary"]
    return summary


LONG = " ".join(f"word{i}" for i in range(1000))
TASK_MESSAGE = {"role": "user", "content": TASK}
# The agent's first reply: the user messages after it are no longer the task statement.
ON_IT = {"role": "assistant", "content": "On it."}


def work(round_number: int) -> list[dict[str, Any]]:
    """Turns in which the finished and the dropped items are talked about as things to do (the
    first two, long, are condensed; the last two are kept)."""
    return [
        {
            "role": "user",
            "content": f"Round {round_number}: next, write tests for parser.py. " + LONG,
        },
        {"role": "assistant", "content": "Next step: write tests, then the old idea. " + LONG},
        {"role": "user", "content": "Also the docs."},
        {"role": "assistant", "content": "Working on the parser fix."},
    ]


async def test_a_condense_gives_the_plan_as_recorded_and_revives_no_finished_item(
    context_dir: Path,
) -> None:
    """The extractive digest ends with the plan as given and names only open items as next
    steps; a second condense shows the plan as it is then, not the first digest's."""
    settings = fast_settings(context_dir, compaction={"keep_recent": 2, "min_to_compress": 2})
    async with running_app(settings) as client:
        uuid = (await create_task(client, context_length=100_000))["uuid"]
        await client.post(f"/tasks/{uuid}/messages", json={"messages": [TASK_MESSAGE, ON_IT]})
        await post_plan(client, uuid, {"plan_type": "initial", "items": ITEMS})
        await client.post(f"/tasks/{uuid}/messages", json={"messages": work(1)})
        first = await condensed_summary(client, uuid)
        block = first[first.index(PLAN_TITLE) :]
        assert block == PLAN_TITLE + CHECKLIST.removeprefix("Plan:") + f"\n{NEXT_STEPS}2, 3"

        revised = [dict(item) for item in ITEMS]
        revised[1]["status"] = "done"
        await post_plan(client, uuid, {"plan_type": "revision", "items": revised})
        await client.post(f"/tasks/{uuid}/messages", json={"messages": work(2)})
        second = await condensed_summary(client, uuid)
        assert "Round 1" in second  # the earlier summary is folded in...
        assert second.count(PLAN_TITLE) == 1  # ...without its plan: the current one supersedes
        assert second.count(NEXT_STEPS) == 1
        current = "[x] 1. write tests\n[x] 2. fix parser\n[ ] 3. docs\n[-] 4. old idea (cancelled)"
        assert second.endswith(f"{PLAN_TITLE}\n{current}\n{NEXT_STEPS}3")
        request = (await client.get(f"/tasks/{uuid}/request")).json()
        assert orjson.dumps(second).decode()[1:-1] in orjson.dumps(request).decode()


@pytest.mark.parametrize("prompt", ["", "Sum up:\n{messages}\nDone."])
async def test_the_chat_summariser_is_given_the_plan_with_statuses(
    context_dir: Path, fake_llm: FakeLLM, prompt: str
) -> None:
    settings = llm_settings(
        context_dir,
        fake_llm,
        compaction={"condense_prompt": prompt, "keep_recent": 2, "min_to_compress": 2},
    )
    async with running_app(settings) as client:
        uuid = (await create_task(client, context_length=100_000))["uuid"]
        await client.post(f"/tasks/{uuid}/messages", json={"messages": [TASK_MESSAGE, ON_IT]})
        await post_plan(client, uuid, {"plan_type": "initial", "items": ITEMS})
        await client.post(f"/tasks/{uuid}/messages", json={"messages": work(1)})
        response = await client.post(f"/tasks/{uuid}/compress", json={"strategy": "condense"})
        assert response.json()["kind"] == "condense", response.text
    [request] = fake_llm.requests
    messages = request.body["messages"]
    plan = f"[{PLAN_LABEL}]\n{CHECKLIST}"
    if prompt:  # the plan after the span's lines, inside the prompt
        [message] = messages
        assert message["content"].endswith(f"{plan}\nDone.")
        assert message["content"].index("Round 1") < message["content"].index(plan)
    else:  # the prompt, the kept task, the span, the plan, the request
        assert messages[0]["content"] == DEFAULT_PROMPT
        assert messages[-2] == {"role": "user", "content": plan}
        assert messages[-1] == {"role": "user", "content": FINAL_REQUEST}


async def test_the_next_run_inherits_the_items_with_their_status(context_dir: Path) -> None:
    async with running_app(fast_settings(context_dir)) as client:
        first = await create_task(client, system_prompt="You are a coding agent.")
        uuid = first["uuid"]
        await client.post(f"/tasks/{uuid}/messages", json={"role": "user", "content": TASK})
        await post_plan(client, uuid, {"plan_type": "initial", "items": ITEMS})
        response = await client.post(f"/tasks/{uuid}/complete")
        assert response.status_code == 200, response.text
        created = await create_task(client, system_prompt="You are a coding agent.")
        assert created["inherited_from"] == uuid
        records = (await client.get(f"/tasks/{created['uuid']}/messages")).json()["messages"]
        assert records[1]["role"] == "system"
        assert f"initial:\n{CHECKLIST}" in records[1]["content"]
