"""Journal pages are capped by bytes as well as by count (SPEC §3.7: nothing loads a whole
context), like history pages (tests/messages/test_history_page_bytes.py)."""

from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    """Small pages by bytes, so the byte cap is exercised."""
    return Settings(context_dir=context_dir, limits={"max_page_bytes": 4096})


async def test_journal_pages_are_capped_by_bytes(
    client: httpx.AsyncClient, task: dict[str, Any]
) -> None:
    uuid = task["uuid"]
    for _ in range(4):
        await client.post(f"/tasks/{uuid}/tools", json={"tool": "t", "result": "r" * 3000})
    first = (await client.get(f"/tasks/{uuid}/tools", params={"limit": 100})).json()
    assert 1 <= len(first["tools"]) <= 2
    assert first["next_after_seq"] == first["tools"][-1]["seq"]
    rest = await client.get(f"/tasks/{uuid}/tools", params={"after_seq": 3, "limit": 100})
    assert [r["seq"] for r in rest.json()["tools"]] == [4]
    assert rest.json()["next_after_seq"] is None
