"""Retention under the default compaction: three short corpus trajectories replayed into an 8k
window as an agent loop does (bench/retention.py's replay and measures), every payload checked
against the whole history so far.

What must never be lost is asserted in every payload: the first instruction, the newest
summary, the pinned plan, every later user message (verbatim or quoted in the summary). File
paths and error lines get a recall floor (the benchmark's targets). The measures are shown to
see a loss first, so that a 100% here is not a measure that cannot fail.
"""

from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from bench.retention import PLAN, SUMMARY_PREFIX, Facts, check, load, replay, summarise

FILES = (
    "claude-code__ccviewer_5c0375b4_ja",  # Japanese request, a later user turn, condensed
    "swe-agent__marshmallow-1867_function_calling_replace",  # condensed; duplicate call ids
    "openhands__multiswe_ponyc-4595",  # truncated and elided at 8k; error lines
)
WINDOW = 8000
ROW_5_28 = "ValueError: NULL date at row 5, 28 (2 more)"
PATHS_FLOOR = 0.95
ERRORS_FLOOR = 0.90


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    """Defaults but fsync (what is measured is what payloads keep, not durability)."""
    return Settings(context_dir=context_dir, storage={"fsync": "never"})


@pytest.mark.parametrize("name", FILES)
async def test_payloads_keep_what_must_not_be_lost(client: httpx.AsyncClient, name: str) -> None:
    trajectory = load(name)
    result = await replay(client, trajectory, WINDOW)
    assert result.refused == {}
    assert len(result.checks) == sum(t[0]["role"] == "assistant" for t in trajectory.turns)
    assert sum(result.compactions.values()) > 0, "nothing compacted: nothing was tested"
    for index, measured in enumerate(result.checks):
        where = f"{name}, payload {index}"
        assert measured.first_instruction is True, where
        assert measured.plan is True, where
        assert measured.summary in (None, True), where
        present, of = measured.users
        assert present == of, where
    totals = summarise([result])
    assert totals["paths"] is None or totals["paths"] >= PATHS_FLOOR, totals
    assert totals["errors"] is None or totals["errors"] >= ERRORS_FLOOR, totals


def test_the_measures_see_a_loss() -> None:
    """A payload that lost a user message, a path, an error line, the newest summary and the
    plan is measured as having lost them; the same payload whole is measured as whole."""
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "Fix the date parser."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "run", "arguments": '{"command": "pytest src/dates.py"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "ValueError: NULL date at row 28"},
        {"role": "user", "content": "Keep the old format working too."},
    ]
    facts = Facts()
    for message in history:
        facts.add(message)
    assert list(facts.paths) == ["src/dates.py"]
    assert list(facts.errors) == ["ValueError: NULL date at row 28"]
    summary = "Ran pytest on src/dates.py."
    pinned = {"role": "user", "content": f"[Current plan]\n{PLAN}"}
    marker = {"role": "user", "content": f"{SUMMARY_PREFIX}(2 messages)]\n{summary}"}

    whole = check([history[0], pinned, *history[1:]], None, facts, None, 100)
    assert (whole.first_instruction, whole.plan, whole.summary, whole.prefix) == (
        True,
        True,
        None,
        None,
    )
    assert (whole.users, whole.paths, whole.errors) == ((1, 1), (1, 1), (1, 1))

    # Truncated behind an old summary: the path survives in the summary's text.
    lost = check([history[0], marker], [history[0], pinned], facts, "another summary", 50)
    assert (lost.first_instruction, lost.plan, lost.summary) == (True, False, False)
    assert (lost.users, lost.paths, lost.errors) == ((0, 1), (1, 1), (0, 1))
    assert (lost.prefix, lost.kept_previous) == (0.5, False)

    # A digest that groups error lines differing in one value shows each value it lists.
    grouped = {**marker, "content": f"{marker['content']}\nErrors:\n- {ROW_5_28}"}
    assert check([history[0], grouped], None, facts, summary, 50).errors == (1, 1)
    elsewhere = {**grouped, "content": grouped["content"].replace("28", "51")}
    assert check([history[0], elsewhere], None, facts, summary, 50).errors == (0, 1)
