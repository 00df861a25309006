"""The longest corpus trajectories replayed into small windows: every payload fits its budget.

The 6 longest corpus files (by size; they hold tool outputs of up to 1.3M characters) are
posted in batches of 10 messages into tasks with an 8k and a 32k window, with the default
extractive summariser; GET /request is fetched after every batch. Compaction happens as in
production: background condense jobs after appends, and synchronous compaction in /request.

Every /request must be 200, within the budget, valid for the OpenAI request schema and the
openai SDK, with tool pairing intact; every compaction recorded in /summaries made the context
smaller; and the number of compactions stays bounded (no compaction loop): a few per batch,
beside one cut of each message larger than the message cap.
"""

from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import CompactionSettings, Settings
from tests.support.corpus import corpus_messages
from tests.support.paths import CORPUS
from tests.support.schemas import assert_tool_pairing, validate_openai_request
from tests.support.tasks import windowed_task
from tests.support.waits import settled_jobs

pytestmark = pytest.mark.database_agnostic

LONGEST = [p.name for p in sorted(CORPUS.glob("*.jsonl"), key=lambda p: -p.stat().st_size)[:6]]
BATCH = 10
WINDOWS = {8000: 1000, 32000: 4000}  # context_length -> max_output_tokens
MAX_COMPACTIONS_PER_BATCH = 3
MESSAGE_SHARE = CompactionSettings().max_message_share


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    """No fsync: the durability of writes is not what this file is about."""
    return Settings(context_dir=context_dir, storage={"fsync": "never"})


async def all_summaries(client: httpx.AsyncClient, uuid: str) -> list[dict[str, Any]]:
    summaries: list[dict[str, Any]] = []
    after = 0
    while True:
        response = await client.get(
            f"/tasks/{uuid}/summaries", params={"after_id": after, "limit": 1000}
        )
        assert response.status_code == 200, response.text
        page = response.json()
        summaries += page["summaries"]
        if page["next_after_id"] is None:
            return summaries
        after = page["next_after_id"]


@pytest.mark.parametrize("window", sorted(WINDOWS))
@pytest.mark.parametrize("name", LONGEST)
async def test_corpus_replay_stays_within_budget(
    client: httpx.AsyncClient, name: str, window: int
) -> None:
    """Batch after batch, /request serves a valid payload within the budget."""
    messages = corpus_messages(name)
    uuid, budget = await windowed_task(client, window, WINDOWS[window])
    batches = 0
    tokens = 0
    for start in range(0, len(messages), BATCH):
        batch = messages[start : start + BATCH]
        response = await client.post(f"/tasks/{uuid}/messages", json={"messages": batch})
        assert response.status_code == 201, response.text[:2000]
        batches += 1
        response = await client.get(f"/tasks/{uuid}/request")
        assert response.status_code == 200, response.text[:2000]
        tokens = int(response.headers["X-Context-Tokens"])
        assert int(response.headers["X-Context-Budget"]) == budget
        assert tokens <= budget, (start, tokens, budget)
        payload = response.json()
        validate_openai_request(payload)
        assert_tool_pairing(payload["messages"])

    # A condense the last batch scheduled may still run.
    await settled_jobs(client, uuid, at_least_one=False)
    task = (await client.get(f"/tasks/{uuid}")).json()
    summaries = await all_summaries(client, uuid)
    count = task["statistics"]["compression_count"]
    assert count == len(summaries)
    # Beyond one cut of each message over the cap (as it was appended, or when it first had
    # to give way), a batch costs a few compactions at most.
    cap = int(budget * MESSAGE_SHARE)
    capped = {
        s["start_seq"] for s in summaries if s["kind"] == "elision" and s["original_tokens"] > cap
    }
    assert count - len(capped) <= batches * MAX_COMPACTIONS_PER_BATCH
    for summary in summaries:
        assert summary["summary_tokens"] < summary["original_tokens"], summary["id"]
        assert summary["tokens_saved"] == summary["original_tokens"] - summary["summary_tokens"]
    assert task["statistics"]["total_messages"] == len(messages)
    kinds = {
        k: sum(s["kind"] == k for s in summaries) for k in ("condense", "truncation", "elision")
    }
    print(
        f"{name} @ {window}: {len(messages)} messages, {batches} batches, {count} compactions "
        f"{kinds}, final {tokens}/{budget} tokens"
    )
