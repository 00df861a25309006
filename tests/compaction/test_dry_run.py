"""GET /context's dry run says exactly what the next compaction would do."""

from pathlib import Path

import httpx
import pytest

from app.config import Settings
from tests.support.tasks import task_body


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    """An absolute threshold below the system prompt: the context starts above it, so no append
    ever crosses it and no background condense races the test. A condense keeps one message:
    the automatic one the dry run describes keeps no more under so low a threshold, and the
    tests check it against one asked for through the API, which keeps ``keep_recent``."""
    return Settings(
        context_dir=context_dir,
        storage={"fsync": "never"},
        compaction={"token_threshold": 50, "keep_recent": 1},
    )


async def test_the_dry_run_predicts_the_condense(client: httpx.AsyncClient) -> None:
    body = task_body(context_length=100_000, system_prompt="Rules. " * 60)
    uuid = (await client.post("/tasks", json=body)).json()["uuid"]

    async def turns(count: int) -> None:
        messages = [
            {"role": "user" if n % 2 == 0 else "assistant", "content": f"turn {n} " + "w" * 400}
            for n in range(count)
        ]
        response = await client.post(f"/tasks/{uuid}/messages", json={"messages": messages})
        assert response.status_code == 201, response.text
        assert response.json()["compaction_scheduled"] is False

    await turns(4)
    step = (await client.get(f"/tasks/{uuid}/context")).json()["next_step"]
    assert step == {"action": "none", "condense_skipped": "too_few_messages"}

    await turns(10)
    step = (await client.get(f"/tasks/{uuid}/context")).json()["next_step"]
    assert step["action"] == "condense"
    outcome = (await client.post(f"/tasks/{uuid}/compress", json={"strategy": "condense"})).json()
    assert outcome["kind"] == "condense"
    [summary] = (await client.get(f"/tasks/{uuid}/summaries")).json()["summaries"]
    assert [summary["start_seq"], summary["end_seq"]] == step["hides"]
    assert summary["compressed_message_count"] == step["messages"] == outcome["hidden_messages"]
    assert summary["original_tokens"] == step["tokens"]
