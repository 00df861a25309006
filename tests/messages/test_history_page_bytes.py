"""History pages are capped by bytes as well as by count (SPEC §3.7: nothing loads a whole
context); the journals' pages too (tests/journals/test_journal_page_bytes.py)."""

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.config import Settings


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    """Small history pages by bytes, so the byte cap is exercised."""
    return Settings(context_dir=context_dir, limits={"max_page_bytes": 4096})


async def test_history_pages_are_capped_by_bytes(
    client: httpx.AsyncClient, task: dict[str, Any]
) -> None:
    """A page stops at the record that brings it to MAX_PAGE_BYTES (it holds at least one), so
    big records never pile up in memory; chaining next_after_seq still visits every record."""
    uuid = task["uuid"]
    big = [{"role": "user", "content": f"{n}" + "x" * 3000} for n in range(6)]
    await client.post(f"/tasks/{uuid}/messages", json={"messages": big})
    seen: list[int] = []
    after = 0
    while True:
        page = (
            await client.get(f"/tasks/{uuid}/messages", params={"after_seq": after, "limit": 100})
        ).json()
        records = page["messages"]
        assert records
        assert sum(len(orjson.dumps(r)) for r in records[:-1]) < 4096
        seen += [m["seq"] for m in page["messages"]]
        if page["next_after_seq"] is None:
            break
        after = page["next_after_seq"]
    assert seen == list(range(1, 8))
