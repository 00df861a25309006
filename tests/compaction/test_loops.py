"""No compaction loops: a long trajectory replayed at a 4k window compacts a bounded number
of times, and keeps the head and the newest summary in every payload.

The bound: every mask, condense or truncation frees at least MIN_GAIN_SHARE of the context it
compacts (net of its own marker), and a context is compacted only when it holds at least
RELIEF_SHARE of its threshold (in the background, which starts at the threshold) or when it is
over its budget (for a payload), so each frees at least ``MIN_GAIN_SHARE * min(RELIEF_SHARE *
threshold, budget)`` tokens. What is freed was appended first, so over a replay that appends T
tokens there are at most T divided by that many of them. Elisions (the last resort, which must
fit whatever it frees) are bounded by the fit's rounds per payload.
"""

from pathlib import Path
from typing import Any

import httpx
import pytest

from app.compaction.service import MAX_FIT_ROUNDS
from app.config import Settings
from tests.support.app import running_app
from tests.support.corpus import corpus_messages
from tests.support.payloads import payload_messages
from tests.support.tasks import task_body
from tests.support.waits import settled_jobs

TRAJECTORY = "claude-code__ccviewer_fe5e1c67_subagent.jsonl"
WINDOW = 4000


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    return Settings(context_dir=context_dir, storage={"fsync": "never"}, job={"backoff_s": 0})


async def test_a_long_trajectory_at_4k_compacts_a_bounded_number_of_times(
    settings: Settings,
) -> None:
    messages = corpus_messages(TRAJECTORY)
    async with running_app(settings) as client:
        body = task_body(context_length=WINDOW, max_output_tokens=500)
        response = await client.post("/tasks", json=body)
        assert response.status_code == 201, response.text
        uuid = response.json()["uuid"]
        appended = requests = 0
        instruction = None
        index = 0
        while index < len(messages):
            # The agent's loop: a request before each assistant turn, then the turn and its
            # results in one batch.
            group = [messages[index]]
            index += 1
            while index < len(messages) and messages[index]["role"] == "tool":
                group.append(messages[index])
                index += 1
            if group[0]["role"] == "assistant" and instruction is not None:
                # The background compaction settled first: the newest summary is then the one
                # the payload must show (one committed meanwhile would be newer than it).
                await settled_jobs(client, uuid, at_least_one=False)
                payload = await payload_messages(client, uuid)
                requests += 1
                assert any(m == instruction for m in payload), (
                    payload[0]["content"][-300:],
                    [s["kind"] for s in await summaries_of(client, uuid)],
                )
                summaries = await summaries_of(client, uuid)
                condensed = [s for s in summaries if s["kind"] == "condense"]
                if condensed:
                    newest = condensed[-1]["summary"].splitlines()[0]
                    assert any(newest in str(m.get("content")) for m in payload)
            if instruction is None and group[0]["role"] == "user":
                instruction = group[0]
            response = await client.post(f"/tasks/{uuid}/messages", json={"messages": group})
            assert response.status_code == 201, response.text[:500]
            appended += sum(response.json()["tokens"])
        context = (await client.get(f"/tasks/{uuid}/context")).json()
        summaries = await summaries_of(client, uuid)
    gaining = [s for s in summaries if s["kind"] != "elision"]
    floor = settings.compaction.min_gain_share * min(
        settings.compaction.relief_share * context["threshold"],
        context["budget"],
    )
    assert requests > 20
    assert len(gaining) <= appended / floor, (len(gaining), appended, floor)
    elisions = len(summaries) - len(gaining)
    assert elisions <= requests * MAX_FIT_ROUNDS


async def summaries_of(client: httpx.AsyncClient, uuid: str) -> list[dict[str, Any]]:
    response = await client.get(f"/tasks/{uuid}/summaries", params={"limit": 1000})
    assert response.status_code == 200, response.text
    summaries: list[dict[str, Any]] = response.json()["summaries"]
    return summaries
