"""One rolling condense summary, bounded by a share of the budget, over the real app.

A condense summary costs at most ``SUMMARY_MAX_SHARE`` of the context's budget whatever the
summariser (the extractive digest sizes itself to it; a chat backend is asked for at most it and
its answer is cut on a line boundary); a new condense folds the previous summary in, so the
context shows one summary, which still carries the earlier one's facts.
"""

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.compaction.service import SUMMARY_HEADER
from app.config import Settings
from app.summaries.layout import digest_sections
from app.summaries.limited import CUT_NOTE
from app.summaries.rules import shows_error_line
from tests.fakes import llm_server
from tests.fakes.llm_server import FakeLLM
from tests.support.app import running_app
from tests.support.settings import impatient_llm_settings
from tests.support.tasks import append, new_task
from tests.support.waits import settled_jobs

Client = httpx.AsyncClient
fake_llm = llm_server.fake_llm  # the fixture: a real HTTP server on 127.0.0.1
SHARE = 0.25
ROWS_PER_OUTPUT = 40
ROOT = "/home/agent/orders-service"
TASK = {"system_prompt": "Be useful.", "max_output_tokens": 800}  # and a window of its own


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    """Characters / 4 tokens, and a job runner that polls often."""
    return Settings(
        context_dir=context_dir,
        token_counter="heuristic",
        storage={"fsync": "never"},
        job={"poll_s": 0.05},
    )


def load_step(step: int, first_row: int = 0) -> tuple[dict[str, Any], dict[str, Any]]:
    """An assistant's call that loads a CSV file and its ~850-token output: the same error on
    40 rows (rows differ from step to step)."""
    path = f"{ROOT}/data/orders_{step}.csv"
    call = {
        "id": f"call_{step}",
        "type": "function",
        "function": {"name": "run", "arguments": json.dumps({"command": f"python load.py {path}"})},
    }
    rows = range(first_row + step * 7, first_row + step * 7 + ROWS_PER_OUTPUT * 13, 13)
    lines = [f"ValueError: NULL date at row {row} of {path} (column shipped)" for row in rows]
    output = "\n".join(lines)
    return (
        {"role": "assistant", "content": f"Loading {path}.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{step}", "content": output},
    )


async def context_of(client: Client, uuid: str) -> dict[str, Any]:
    response = await client.get(f"/tasks/{uuid}/context")
    assert response.status_code == 200, response.text
    context: dict[str, Any] = response.json()
    return context


async def condense_summaries(client: Client, uuid: str) -> list[dict[str, Any]]:
    summaries = (await client.get(f"/tasks/{uuid}/summaries")).json()["summaries"]
    return [s for s in summaries if s["kind"] == "condense"]


async def visible_condense_markers(client: Client, uuid: str) -> list[str]:
    """The condense summaries the effective context shows (messages under their heading)."""
    heading = SUMMARY_HEADER.split("(")[0]
    messages = [item["message"] for item in (await context_of(client, uuid))["messages"]]
    return [m["content"] for m in messages if (m.get("content") or "").startswith(heading)]


async def test_a_digest_at_a_4k_window_fits_its_share_of_the_budget(client: Client) -> None:
    """Window 4,000, twelve ~850-token tool outputs of 40 error lines each: the background
    condense's digest costs at most a quarter of the budget, and its errors are grouped.

    Regression: the digest was ~1,800 tokens (64% of a 2,800-token budget) because its size was
    a fixed 6,000 characters; it listed all 40 error lines of every tool output."""
    uuid = await new_task(client, context_length=4000, **TASK)
    await append(client, uuid, {"role": "user", "content": "Load the order files."})
    for step in range(12):
        await append(client, uuid, *load_step(step))
    jobs = await settled_jobs(client, uuid, "condense")
    assert any(job["result"]["kind"] == "condense" for job in jobs), jobs
    budget = (await context_of(client, uuid))["budget"]
    summaries = await condense_summaries(client, uuid)
    assert summaries
    for summary in summaries:
        assert summary["summary_tokens"] <= SHARE * budget, (summary["summary_tokens"], budget)
    latest = summaries[-1]["summary"]
    assert "ValueError: NULL date at row" in latest
    # Grouped: one line per file's error, not forty.
    assert latest.count("ValueError: NULL date at row") < ROWS_PER_OUTPUT


def files_of(summary: str) -> list[str]:
    sections = digest_sections(summary)
    assert sections is not None, summary
    return sections.get("Files", [])


async def test_repeated_condenses_leave_one_summary_that_carries_the_first(
    context_dir: Path,
) -> None:
    """Three condenses, each after more work: the context shows one condense summary, the
    newest, and it still lists the first one's files (each once, none garbled) and quotes the
    first digest's header.

    Regression: the earlier summary was one item of "Earlier summaries", left out whole when
    it did not fit, and its $ROOT paths came back as "ROOT/..." paths."""
    settings = Settings(
        context_dir=context_dir,
        token_counter="heuristic",
        storage={"fsync": "never"},
        compaction={"condense_threshold": 0.99},
    )
    async with running_app(settings) as client:
        uuid = await new_task(client, context_length=16_000, **TASK)
        await append(client, uuid, {"role": "user", "content": "Load the order files."})
        for round_number in range(3):
            for step in range(round_number * 6, round_number * 6 + 6):
                await append(client, uuid, *load_step(step))
            response = await client.post(f"/tasks/{uuid}/compress", json={})
            assert response.json()["kind"] == "condense", response.text
        summaries = await condense_summaries(client, uuid)
        visible = await visible_condense_markers(client, uuid)
        budget = (await context_of(client, uuid))["budget"]
    assert len(summaries) == 3
    assert visible == [summaries[-1]["summary"]]
    first, latest = summaries[0]["summary"], summaries[-1]["summary"]
    assert summaries[-1]["summary_tokens"] <= SHARE * budget
    used = {f"{ROOT}/data/orders_{step}.csv" for step in range(18)} | {"load.py"}
    files = files_of(latest)
    assert len(files) == len(set(files))
    assert set(files) <= used | {item for item in files if item.startswith("(+")}
    assert set(files_of(first)) <= set(files)
    first_header = first.split("\n")[1]
    assert first_header.startswith("Extractive digest of")
    earlier = digest_sections(latest)
    assert earlier is not None
    assert any(item.startswith(first_header) for item in earlier["Earlier summaries"])


async def test_error_lines_that_differ_in_a_row_number_all_survive_grouped(
    client: Client,
) -> None:
    """Five tool outputs repeat one error at different rows: the summary lists the error once
    with all five rows.

    Regression: the latest summary kept 1 of the 5 distinct error lines."""
    uuid = await new_task(client, context_length=100_000, **TASK)
    await append(client, uuid, {"role": "user", "content": "Import the orders."})
    rows = [5, 28, 51, 77, 90]
    for step, row in enumerate(rows):
        call = {
            "id": f"call_{step}",
            "type": "function",
            "function": {"name": "run", "arguments": json.dumps({"command": "python imp.py"})},
        }
        log = [f"INFO batch {n} of {ROOT}/data/orders.csv loaded" for n in range(60)]
        output = "\n".join([*log, f"ValueError: NULL date at row {row}"])
        await append(
            client,
            uuid,
            {"role": "assistant", "content": "Importing.", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{step}", "content": output},
        )
    for turn in range(3):
        await append(
            client,
            uuid,
            {"role": "user", "content": f"Go on ({turn})."},
            {"role": "assistant", "content": "Going on."},
        )
    response = await client.post(f"/tasks/{uuid}/compress", json={})
    assert response.json()["kind"] == "condense", response.text
    [summary] = await condense_summaries(client, uuid)
    sections = digest_sections(summary["summary"])
    assert sections is not None
    errors = sections["Errors"]
    assert errors == ["ValueError: NULL date at row 5, 28, 51, 77, 90"]
    for row in rows:
        assert any(shows_error_line(item, f"ValueError: NULL date at row {row}") for item in errors)


async def test_a_chat_backend_is_asked_for_the_share_and_a_longer_answer_is_cut(
    context_dir: Path, fake_llm: FakeLLM
) -> None:
    """With SUMMARY_MAX_TOKENS above a quarter of the budget, the backend is asked for at
    most the share, and its answer, far longer, is cut on a line boundary with
    a note, to fit the share as the task's counter counts it."""
    answer = "\n".join(
        f"- step {n}: loaded {ROOT}/data/orders_{n}.csv, 40 NULL dates" for n in range(200)
    )
    fake_llm.set("ok", text=answer)
    settings = impatient_llm_settings(
        context_dir, fake_llm, compaction={"condense_threshold": 0.99, "summary_max_tokens": 8000}
    )
    async with running_app(settings) as client:
        uuid = await new_task(client, context_length=12_000, **TASK)
        await append(client, uuid, {"role": "user", "content": "Load the order files."})
        for step in range(6):
            await append(client, uuid, *load_step(step))
        response = await client.post(f"/tasks/{uuid}/compress", json={})
        assert response.json()["kind"] == "condense", response.text
        [summary] = await condense_summaries(client, uuid)
        budget = (await context_of(client, uuid))["budget"]
    [request] = fake_llm.requests
    assert request.body["max_tokens"] <= SHARE * budget
    text = summary["summary"]
    assert text.endswith("\n" + CUT_NOTE)
    kept = text.split("\n")[1:-1]  # after the summary's heading, before the note
    assert kept
    assert all(line in answer.split("\n") for line in kept)
    assert summary["summary_tokens"] <= SHARE * budget
