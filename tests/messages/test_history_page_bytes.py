"""History pages are capped by bytes as well as by count (SPEC §3.7: nothing loads a whole
context), for messages and the journals alike."""

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.config import Settings


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    """Small history pages by bytes, so the byte cap is exercised."""
    return Settings(context_dir=context_dir, max_page_bytes=4096)


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
