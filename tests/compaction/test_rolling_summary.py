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


from app.config import Settings
from app.context.effective import marker_kind
from tests.compaction.test_jobs import llm_settings
from tests.conftest import running_app, task_body
from tests.fakes import llm_server
from tests.fakes.llm_server import FakeLLM
from tests.lifecycle.support import settled_jobs

Client = httpx.AsyncClient
fake_llm = llm_server.fake_llm  # the fixture: a real HTTP server on 127.0.0.1
SHARE = 0.25
ROWS_PER_OUTPUT = 40


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    """Characters / 4 tokens, and a job runner that polls often."""
    return Settings(
        context_dir=context_dir, token_counter="heuristic", fsync="never", job_poll_s=0.05
    )


async def new_task(client: Client, window: int) -> str:
    body = task_body(context_length=window, max_output_tokens=800, system_prompt="Be useful.")
    response = await client.post("/tasks", json=body)
    assert response.status_code == 201, response.text
    uuid: str = response.json()["uuid"]
    return uuid


async def append(client: Client, uuid: str, *messages: dict[str, Any]) -> None:
    response = await client.post(f"/tasks/{uuid}/messages", json={"messages": list(messages)})
    assert response.status_code == 201, response.text


def load_step(step: int, first_row: int = 0) -> tuple[dict[str, Any], dict[str, Any]]:
    """An assistant's call that loads a CSV file and its ~850-token output: the same error on
    40 rows (rows differ from step to step)."""
    path = f"data/orders_{step}.csv"
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


async def budget_of(client: Client, uuid: str) -> int:
    response = await client.get(f"/tasks/{uuid}/request")
    assert response.status_code == 200, response.text
    return int(response.headers["X-Context-Budget"])


async def condense_summaries(client: Client, uuid: str) -> list[dict[str, Any]]:
    summaries = (await client.get(f"/tasks/{uuid}/summaries")).json()["summaries"]
    return [s for s in summaries if s["kind"] == "condense"]


async def visible_condense_markers(client: Client, uuid: str) -> list[str]:
    """The condense summaries the effective context shows (GET /context)."""
    response = await client.get(f"/tasks/{uuid}/context")
    assert response.status_code == 200, response.text
    messages = response.json()["messages"]
    return [m["content"] for m in messages if marker_kind(m) == "condense"]


async def test_a_digest_at_a_4k_window_fits_its_share_of_the_budget(client: Client) -> None:
    """Window 4,000, twelve ~850-token tool outputs of 40 error lines each: the background
    condense's digest costs at most a quarter of the budget, and its errors are grouped.

    Regression: the digest was ~1,800 tokens (64% of a 2,800-token budget) because its size was
    a fixed 6,000 characters; it listed all 40 error lines of every tool output."""
    uuid = await new_task(client, window=4000)
    await append(client, uuid, {"role": "user", "content": "Load the order files."})
    for step in range(12):
        await append(client, uuid, *load_step(step))
    jobs = await settled_jobs(client, uuid, "condense")
    assert any(job["result"]["kind"] == "condense" for job in jobs), jobs
    budget = await budget_of(client, uuid)
    summaries = await condense_summaries(client, uuid)
    assert summaries
    for summary in summaries:
        assert summary["summary_tokens"] <= SHARE * budget, (summary["summary_tokens"], budget)
    latest = summaries[-1]["summary"]
    assert "ValueError: NULL date at row" in latest
    # Grouped: one line per file's error, not forty.
    assert latest.count("ValueError: NULL date at row") < ROWS_PER_OUTPUT
