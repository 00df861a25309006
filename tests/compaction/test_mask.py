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
from app.lifespan import open_services
from app.messages.schemas import MessageBatch
from app.tasks.schemas import TaskCreate
from tests.support.app import running_app
from tests.support.errors import assert_error
from tests.support.files import read_jsonl, snapshot_dir, task_dir
from tests.support.payloads import payload_messages
from tests.support.schemas import assert_tool_pairing
from tests.support.tasks import SYSTEM_PROMPT, append, new_task, task_body
from tests.support.waits import settled_jobs

Message = dict[str, Any]
SYSTEM = {"role": "system", "content": SYSTEM_PROMPT}
INSTRUCTION = {"role": "user", "content": "Find why the date parser fails and fix it."}
PLACEHOLDER = re.compile(
    r"\[output of run_command\(command=\"pytest tests/test_(\d+)\S*\) hidden: "
    r"(\d+) lines, (?:[\d.]+ KB|\d+ bytes), seq (\d+)\]"
)


ELIDED = "elided to fit the context window"
# ~280 tokens of output: under a 4,000 window's message cap (a tenth of its 3,100 budget).
LINES_UNDER_CAP = 17


def placeholder(content: str | None) -> re.Match[str] | None:
    """The first line of a masked result's content, parsed (None for any other content)."""
    return PLACEHOLDER.fullmatch((content or "").split("\n")[0])


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
        f"tests/test_{i}.py: ValueError: NULL date at row {n * 7 + i}" for n in range(lines)
    )
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": output},
    ]


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    return Settings(context_dir=context_dir, job={"backoff_s": 0})


async def task_keeping(client: httpx.AsyncClient, keep_tool_results: int, **window: int) -> str:
    """A running task whose masking keeps this many newest tool results; returns its uuid."""
    return await new_task(client, compaction={"keep_tool_results": keep_tool_results}, **window)


async def test_a_small_window_masks_old_outputs_first_and_loses_no_step(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    """Window 4,000, twelve ~280-token tool outputs (just under the message cap): older
    outputs become placeholders naming the call, the seq and the errors, a condense summary
    takes what still does not fit (keeping the newest steps that leave room for the next
    turns), and the payload keeps the instruction, the newest summary, the newest output whole,
    none older than the newest three at the last mask whole, and a trace of every earlier step
    (the finding: truncation hid the summary, and nothing of steps 0-9 survived)."""
    uuid = await new_task(client, context_length=4000, max_output_tokens=500)
    await append(client, uuid, INSTRUCTION)
    for i in range(12):
        await append(client, uuid, *tool_turn(i, LINES_UNDER_CAP))
    messages = await payload_messages(client, uuid)
    assert_tool_pairing(messages)
    assert messages[:2] == [SYSTEM, INSTRUCTION]
    results = [m for m in messages if m["role"] == "tool"]
    assert results[-1] == tool_turn(11, LINES_UNDER_CAP)[1]
    whole = [m["tool_call_id"] for m in results if placeholder(m["content"]) is None]
    # Masked in one batch when the threshold was crossed (the newest three kept whole then);
    # the turn appended since is whole too, until the next batch.
    assert set(whole) <= {"call_8", "call_9", "call_10", "call_11"}
    summaries = (await client.get(f"/tasks/{uuid}/summaries")).json()["summaries"]
    assert summaries[0]["kind"] == "mask"
    assert summaries[0]["tokens_saved"] > 0
    # The condense the threshold queued runs in the background: when it has run before the
    # payload is read, its summary may have taken every masked output.
    condensed = [s for s in summaries if s["kind"] == "condense"]
    assert condensed or len(whole) < len(results)
    text = json.dumps(messages)
    assert all(f"tests/test_{i}.py" in text for i in range(12))
    if condensed:
        assert any(m["content"].startswith("[Summary of") for m in messages[2:3])
    # A placeholder's seq is the result's own: its full text is there in the history.
    masked = [match for m in results if (match := placeholder(m["content"]))]
    history = (await client.get(f"/tasks/{uuid}/messages", params={"limit": 100})).json()
    by_seq = {r["seq"]: r for r in history["messages"]}
    for match in masked:
        i = int(match.group(1))
        assert match.group(2) == str(LINES_UNDER_CAP)
        assert by_seq[int(match.group(3))]["content"] == tool_turn(i, LINES_UNDER_CAP)[1]["content"]
    records = read_jsonl(task_dir(context_dir, uuid) / "messages.jsonl")
    assert sum(1 for r in records if r.get("marker") == "mask") == len(
        [s for s in summaries if s["kind"] == "mask"]
    )


async def test_a_placeholder_keeps_the_outputs_error_lines_grouped(
    client: httpx.AsyncClient,
) -> None:
    uuid = await new_task(client, context_length=64_000, max_output_tokens=1000)
    await append(client, uuid, INSTRUCTION)
    for i in range(5):
        await append(client, uuid, *tool_turn(i))
    response = await client.post(f"/tasks/{uuid}/compress", json={"strategy": "mask"})
    assert response.json()["kind"] == "mask"
    first = next(m for m in await payload_messages(client, uuid) if m["role"] == "tool")
    line, errors = first["content"].split("\n")
    assert placeholder(line) is not None
    assert errors.startswith("error: tests/test_0.py: ValueError: NULL date at row 0, 7, 14,")


async def test_masking_happens_in_batches_so_the_prefix_stays_stable(
    settings: Settings,
) -> None:
    """An agent's loop at a 16k window, 40 tool turns: the background compaction masks when the
    threshold is crossed, several results at once, never one a turn; between two masks every
    payload starts with the previous one byte for byte (a provider's prompt cache holds)."""
    async with running_app(settings) as client:
        uuid = await new_task(
            client,
            context_length=16_000,
            max_output_tokens=1000,
            compaction={"tiers": ["mask", "truncate", "elide"]},
        )
        await append(client, uuid, INSTRUCTION)
        previous: list[Message] = []
        masks_seen = stable = 0
        for i in range(40):
            await append(client, uuid, *tool_turn(i))
            await settled_jobs(client, uuid, at_least_one=False)
            summaries = (await client.get(f"/tasks/{uuid}/summaries")).json()["summaries"]
            messages = await payload_messages(client, uuid)
            if len(summaries) == masks_seen:
                assert messages[: len(previous)] == previous, f"turn {i}"
                stable += 1
            masks_seen = len(summaries)
            previous = messages
    assert {s["kind"] for s in summaries} == {"mask"}
    assert len(summaries) >= 2
    assert all(s["compressed_message_count"] >= 2 for s in summaries)
    assert stable >= 40 - len(summaries)


async def test_a_rewind_brings_masked_outputs_back(client: httpx.AsyncClient) -> None:
    uuid = await new_task(client, context_length=16_000, max_output_tokens=1000)
    await append(client, uuid, INSTRUCTION)
    seqs = []
    for i in range(8):
        seqs += await append(client, uuid, *tool_turn(i))
    response = await client.post(f"/tasks/{uuid}/compress", json={"strategy": "mask"})
    assert response.json()["kind"] == "mask"
    assert any(placeholder(m["content"]) for m in await payload_messages(client, uuid))
    response = await client.post(
        f"/tasks/{uuid}/rewind", json={"to_seq": seqs[-1], "include_target": True}
    )
    assert response.status_code == 200, response.text
    results = [m for m in await payload_messages(client, uuid) if m["role"] == "tool"]
    assert [m["content"] for m in results] == [tool_turn(i)[1]["content"] for i in range(8)]


async def test_every_format_counts_the_placeholders_as_it_renders_them(
    client: httpx.AsyncClient,
) -> None:
    uuid = await new_task(client, context_length=64_000, max_output_tokens=1000)
    await append(client, uuid, INSTRUCTION)
    for i in range(8):
        await append(client, uuid, *tool_turn(i))
    response = await client.post(f"/tasks/{uuid}/compress", json={"strategy": "mask"})
    assert response.json()["kind"] == "mask"
    for fmt in ("anthropic", "ollama", "openai"):
        response = await client.get(f"/tasks/{uuid}/request", params={"format": fmt})
        assert response.status_code == 200, response.text
        assert response.text.count(") hidden: ") == 5, fmt
        counted = (await client.get(f"/tasks/{uuid}/context", params={"format": fmt})).json()
        assert int(response.headers["X-Context-Tokens"]) == counted["tokens"], fmt


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
    await append(client, uuid, INSTRUCTION)
    for i in range(12):
        await append(client, uuid, *tool_turn(i))
    messages = await payload_messages(client, uuid)
    assert not any(placeholder(m["content"]) for m in messages)
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
    """An append crossing the threshold queues the background compaction: it masks first (a
    condense follows only to bring the context down to its relief level: next test)."""
    async with running_app(settings) as client:
        uuid = await new_task(client, context_length=16_000, max_output_tokens=1000)
        await append(client, uuid, INSTRUCTION)
        scheduled = False
        for i in range(18):  # ~700 tokens each: the threshold (11,200) is crossed
            response = await client.post(f"/tasks/{uuid}/messages", json={"messages": tool_turn(i)})
            assert response.status_code == 201, response.text
            scheduled = scheduled or response.json()["compaction_scheduled"]
        assert scheduled
        await settled_jobs(client, uuid)
        summaries = (await client.get(f"/tasks/{uuid}/summaries")).json()["summaries"]
        kinds = [s["kind"] for s in summaries]
        assert kinds[0] == "mask"
        assert set(kinds) <= {"mask", "condense"}
        metrics = (await client.get("/metrics")).text
        assert 'context_compactions_total{kind="mask"}' in metrics


@pytest.mark.parametrize(("relief_share", "kinds"), [(1.0, ["mask"]), (0.4, ["mask", "condense"])])
async def test_the_background_compaction_goes_on_down_to_its_relief_level(
    context_dir: Path, relief_share: float, kinds: list[str]
) -> None:
    """Masking that leaves the context under its threshold but above RELIEF_SHARE of it is
    followed by a condense: a compaction frees room for several turns, rather than the next
    append crossing the threshold again (and breaking the prompt's prefix again)."""
    settings = Settings(
        context_dir=context_dir, job={"backoff_s": 0}, compaction={"relief_share": relief_share}
    )
    async with running_app(settings) as client:
        uuid = await task_keeping(client, 10, context_length=16_000, max_output_tokens=1000)
        await append(client, uuid, INSTRUCTION)
        for i in range(18):  # ~700 tokens each: the threshold (11,200) is crossed
            response = await client.post(f"/tasks/{uuid}/messages", json={"messages": tool_turn(i)})
            assert response.status_code == 201, response.text
        await settled_jobs(client, uuid)
        summaries = (await client.get(f"/tasks/{uuid}/summaries")).json()["summaries"]
        assert [s["kind"] for s in summaries] == kinds
        context = (await client.get(f"/tasks/{uuid}/context")).json()
        assert context["tokens"] < context["threshold"]


async def test_placeholders_that_do_not_fit_are_cut_not_refused(client: httpx.AsyncClient) -> None:
    """Six large results of one call, masked, whose placeholders (with their error lines)
    still do not fit a tiny window: elision cuts the placeholders themselves (never bringing
    the outputs back), rather than GET /request answering 413. Regression: masked results
    were never elision candidates."""
    uuid = await task_keeping(client, 0, context_length=1024, max_output_tokens=256)
    calls = [
        {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "run_command", "arguments": json.dumps({"command": f"t{i}"})},
        }
        for i in range(6)
    ]
    filler = "\n".join(f"line {n}: reading rows, all well so far" for n in range(200))
    results = [
        {
            "role": "tool",
            "tool_call_id": call["id"],
            "content": "\n".join(
                f"{kind}Error: run {i} failed reading the {kind.lower()} table, " + "row " * 40
                for kind in ("Value", "Key", "Type")
            )
            + "\n"
            + filler,
        }
        for i, call in enumerate(calls)
    ]
    call_message = {"role": "assistant", "content": None, "tool_calls": calls}
    await append(client, uuid, INSTRUCTION, call_message, *results)

    messages = await payload_messages(client, uuid)

    shown = [m["content"] for m in messages if m["role"] == "tool"]
    assert len(shown) == 6
    # Each was cut to the message cap as it came; masked after (unless its cut was already
    # smaller than a placeholder), then the placeholders themselves cut.
    placeholders = [c for c in shown if c.startswith("[output of run_command(")]
    assert len(placeholders) >= 4
    assert all(ELIDED in c for c in shown if c not in placeholders)
    assert any(ELIDED in c for c in placeholders)
    assert not any("reading rows" in content for content in placeholders)


async def test_a_fit_that_masked_under_the_budget_but_not_the_threshold_condenses_too(
    context_dir: Path,
) -> None:
    """The services alone, no job runner: GET /request's own fit, no background compaction
    first. Masking brings the payload under its budget but leaves it at its threshold; the
    fit condenses too, in the same request, so both changes reach the prompt at once and the
    context has room for the next turns (a mask alone would be followed by a condense a
    turn or two later: two breaks of the provider's prompt cache instead of one)."""
    settings = Settings(context_dir=context_dir, token_counter="heuristic")
    budget, threshold = int(16_000 * 0.9) - 1000, int(16_000 * 0.7)
    async with open_services(settings) as services:
        created, _ = await services.task_creation.create(
            TaskCreate.model_validate(
                task_body(
                    system_prompt=SYSTEM_PROMPT, context_length=16_000, max_output_tokens=1000
                )
            )
        )
        uuid = created.task.uuid
        turns = [INSTRUCTION]
        for i in range(13):  # ~1,050 tokens each: ~700 of reasoning, ~300 of output
            call, result = tool_turn(i, lines=25)
            turns += [call | {"content": f"Step {i}: " + "reasoning " * 300}, result]
        appended, _ = await services.messages.append(
            uuid, MessageBatch(messages=turns).messages, None
        )
        stream = await services.payloads.request(uuid, None)
        tokens = int(stream.headers["X-Context-Tokens"])
        await stream.read()

    summaries = read_jsonl(task_dir(context_dir, uuid) / "summaries.jsonl")
    assert [s["kind"] for s in summaries] == ["mask", "condense"]
    assert appended.context_tokens > budget
    assert appended.context_tokens - summaries[0]["tokens_saved"] >= threshold  # the mask fit
    assert tokens < threshold
