"""Per-model profile thresholds (seed 002) reach the task's budget and the condense trigger."""

from pathlib import Path

import httpx
import pytest

from app.config import Settings
from tests.support.tasks import create_task


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    return Settings(
        context_dir=context_dir,
        compaction={
            "condense_profile_thresholds": {"small-model": 0.5, "odd-model": 3.0, "same-model": -1}
        },
    )


@pytest.mark.parametrize(
    ("model", "threshold"),
    [("small-model", 5000), ("odd-model", 7000), ("same-model", 7000), ("gpt-4o", 7000)],
)
async def test_profile_threshold_of_the_task_model(
    client: httpx.AsyncClient, model: str, threshold: int
) -> None:
    task = await create_task(client, model=model, context_length=10_000, max_output_tokens=500)
    view = (await client.get(f"/tasks/{task['uuid']}")).json()
    assert view["context"]["threshold"] == threshold
    assert view["context"]["budget"] == 9000 - 500
