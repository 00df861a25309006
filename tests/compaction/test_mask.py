"""Masking, the first compaction tier: older tool results become one-line placeholders.

Every test runs the real app (real SQLite, real files) with the default extractive summariser.
"""

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from tests.api.helpers import assert_error, read_jsonl, task_dir
from tests.compaction.test_engine import SYSTEM, append, new_task
from tests.conftest import running_app, snapshot_dir, task_body
from tests.lifecycle.support import settled_jobs
from tests.support_schemas import assert_tool_pairing

Message = dict[str, Any]
INSTRUCTION = {"role": "user", "content": "Find why the date parser fails and fix it."}
PLACEHOLDER = re.compile(
    r"\[output of run_command\(command=\"pytest tests/test_(\d+)\.py\"\) hidden to save "
    r"context: (\d+) lines, [\d.]+ KB; seq (\d+) of the task's history\]"
)


def tool_turn(i: int, lines: int = 40) -> list[Message]:
    """An assistant running pytest on test file i, and ~850 tokens of output."""
    call = {
        "id": f"call_{i}",
        "type": "function",
        "function": {
            "name": "run_command",
            "arguments": json.dumps({"command": f"pytest tests/test_{i}.py"}),
        },
    }
    output = "\n".join(
        f"tests/test_{i}.py:{n} ValueError: NULL date at row {n * 7 + i}" for n in range(lines)
    )
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": output},
    ]


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    return Settings(context_dir=context_dir, job_backoff_s=0)


async def payload(client: httpx.AsyncClient, uuid: str, fmt: str = "openai") -> list[Message]:
    response = await client.get(f"/tasks/{uuid}/request", params={"format": fmt})
    assert response.status_code == 200, response.text
    assert int(response.headers["X-Context-Tokens"]) <= int(response.headers["X-Context-Budget"])
    messages: list[Message] = response.json()["messages"]
    return messages


async def test_a_small_window_masks_old_outputs_and_keeps_everything_else(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    """Window 4,000, twelve ~850-token tool outputs: the older outputs become placeholders
    naming the call and the seq; the newest three stay whole; nothing else is hidden."""
    uuid = await new_task(client, context_length=4000, max_output_tokens=500)
    await append(client, uuid, [INSTRUCTION])
    for i in range(12):
        await append(client, uuid, tool_turn(i))
    messages = await payload(client, uuid)
    assert_tool_pairing(messages)
    assert messages[0] == SYSTEM
    assert messages[1] == INSTRUCTION
    results = [m for m in messages if m["role"] == "tool"]
    calls = [m for m in messages if m["role"] == "assistant"]
    assert len(calls) == len(results) == 12  # no message hidden: only contents replaced
    masked = [PLACEHOLDER.fullmatch(m["content"]) for m in results[:-3]]
    assert all(masked), [m["content"][:80] for m in results[:-3]]
    assert [int(m.group(1)) for m in masked if m] == list(range(9))
    assert all(m.group(2) == "40" for m in masked if m)
    assert results[-3:] == [tool_turn(i)[1] | {"tool_call_id": f"call_{i}"} for i in (9, 10, 11)]
    # The seq in a placeholder is the result's own: its full text is there in the history.
    history = (await client.get(f"/tasks/{uuid}/messages", params={"limit": 100})).json()
    by_seq = {r["seq"]: r for r in history["messages"]}
    first = masked[0]
    assert first is not None
    assert by_seq[int(first.group(3))]["content"] == tool_turn(0)[1]["content"]
    summaries = (await client.get(f"/tasks/{uuid}/summaries")).json()["summaries"]
    assert [s["kind"] for s in summaries][:1] == ["mask"]
    assert summaries[0]["tokens_saved"] > 0
    # The history is untouched and current.jsonl is what it implies.
    records = read_jsonl(task_dir(context_dir, uuid) / "messages.jsonl")
    assert sum(1 for r in records if r.get("marker") == "mask") == len(
        [s for s in summaries if s["kind"] == "mask"]
    )


async def test_masking_happens_in_batches_so_the_prefix_stays_stable(
    client: httpx.AsyncClient,
) -> None:
    """After a mask, one more small tool turn frees too little to mask again: the payload's
    earlier messages are byte for byte what they were (a provider's prompt cache holds)."""
    uuid = await new_task(client, context_length=16_000, max_output_tokens=1000)
    await append(client, uuid, [INSTRUCTION])
    for i in range(14):
        await append(client, uuid, tool_turn(i))
    response = await client.post(f"/tasks/{uuid}/compress", json={"strategy": "mask"})
    assert response.status_code == 200, response.text
    assert response.json()["kind"] == "mask"
    assert response.json()["hidden_messages"] == 11
    before = await payload(client, uuid)
    await append(client, uuid, tool_turn(14, lines=3))
    response = await client.post(f"/tasks/{uuid}/compress", json={"strategy": "mask"})
    assert response.json() | {"tokens_before": 0, "tokens_after": 0} == {
        "kind": "skipped",
        "reason": "too_little_gain",
        "summary_id": None,
        "hidden_messages": 0,
        "tokens_before": 0,
        "tokens_after": 0,
    }
    after = await payload(client, uuid)
    assert after[: len(before)] == before


async def test_a_rewind_brings_masked_outputs_back(client: httpx.AsyncClient) -> None:
    uuid = await new_task(client, context_length=16_000, max_output_tokens=1000)
    await append(client, uuid, [INSTRUCTION])
    seqs = []
    for i in range(8):
        seqs += await append(client, uuid, tool_turn(i))
    response = await client.post(f"/tasks/{uuid}/compress", json={"strategy": "mask"})
    assert response.json()["kind"] == "mask"
    assert any(PLACEHOLDER.fullmatch(m["content"] or "") for m in await payload(client, uuid))
    response = await client.post(
        f"/tasks/{uuid}/rewind", json={"to_seq": seqs[-1], "include_target": True}
    )
    assert response.status_code == 200, response.text
    results = [m for m in await payload(client, uuid) if m["role"] == "tool"]
    assert [m["content"] for m in results] == [tool_turn(i)[1]["content"] for i in range(8)]


async def test_every_format_counts_the_placeholders_as_it_renders_them(
    client: httpx.AsyncClient,
) -> None:
    uuid = await new_task(client, context_length=4000, max_output_tokens=500)
    await append(client, uuid, [INSTRUCTION])
    for i in range(12):
        await append(client, uuid, tool_turn(i))
    for fmt in ("anthropic", "ollama", "openai"):
        messages = await payload(client, uuid, fmt)
        assert "hidden to save context" in json.dumps(messages), fmt


async def test_a_task_chooses_its_tiers_and_the_context_shows_them(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    uuid = await new_task(
        client,
        context_length=4000,
        max_output_tokens=500,
        compaction={"tiers": ["condense", "truncate", "elide"], "keep_tool_results": 1},
    )
    context = (await client.get(f"/tasks/{uuid}/context")).json()
    assert context["compaction"] == {
        "tiers": ["condense", "truncate", "elide"],
        "keep_tool_results": 1,
    }
    await append(client, uuid, [INSTRUCTION])
    for i in range(12):
        await append(client, uuid, tool_turn(i))
    messages = await payload(client, uuid)
    assert not any(PLACEHOLDER.fullmatch(m["content"] or "") for m in messages)
    kinds = {s["kind"] for s in (await client.get(f"/tasks/{uuid}/summaries")).json()["summaries"]}
    assert "mask" not in kinds
    default = (await client.get(f"/tasks/{await new_task(client)}/context")).json()
    assert default["compaction"] == {
        "tiers": ["mask", "condense", "truncate", "elide"],
        "keep_tool_results": 3,
    }


@pytest.mark.parametrize(
    "choice",
    [
        {"tiers": ["mask", "mask", "elide"]},
        {"tiers": ["mask", "condense"]},  # no elide: a context could stay over budget
        {"tiers": ["forget", "elide"]},
        {"tiers": []},
        {"keep_tool_results": -1},
        {"keep_tool_results": "3"},
        {"tiers": ["elide"], "other": 1},
    ],
)
async def test_a_bad_compaction_choice_is_refused_and_nothing_is_written(
    client: httpx.AsyncClient, context_dir: Path, choice: dict[str, Any]
) -> None:
    before = snapshot_dir(context_dir)
    response = await client.post("/tasks", json=task_body(compaction=choice))
    assert_error(response, 422, "validation_error")
    assert snapshot_dir(context_dir) == before
    assert (await client.get("/tasks")).json()["tasks"] == []


async def test_the_background_compaction_masks_first(settings: Settings, context_dir: Path) -> None:
    """An append crossing the threshold queues the background compaction: it masks, and only
    condenses if the context is still over its threshold after that."""
    async with running_app(settings) as client:
        uuid = await new_task(client, context_length=16_000, max_output_tokens=1000)
        await append(client, uuid, [INSTRUCTION])
        scheduled = False
        for i in range(18):  # ~700 tokens each: the threshold (11,200) is crossed
            response = await client.post(f"/tasks/{uuid}/messages", json={"messages": tool_turn(i)})
            assert response.status_code == 201, response.text
            scheduled = scheduled or response.json()["compaction_scheduled"]
        assert scheduled
        await settled_jobs(client, uuid)
        summaries = (await client.get(f"/tasks/{uuid}/summaries")).json()["summaries"]
        assert [s["kind"] for s in summaries] == ["mask"]  # under the threshold after it
        metrics = (await client.get("/metrics")).text
        assert 'context_compactions_total{kind="mask"}' in metrics
