"""The ops page over 100,000 tasks: the task list (first page, filtered, a page deep in the
keyset), the live counts and the stats page with its charts per day and per hour.

The rows are those of ``stats_queries`` (bulk-inserted, Zipf-like users, owners and repos over
90 days); the service is a real process, the pages are fetched over loopback as HTML.
"""

import asyncio
import re
import statistics
from html import unescape
from pathlib import Path
from typing import Any

import httpx

from app.config import CleanupSettings, Settings
from bench.harness import Report, Service, Table, warm_gets
from bench.stats_queries import populate

DEEP_PAGES = 20  # the list followed through its "next page" links this many times


def deep_link(client: httpx.Client, pages: int) -> str:
    """The task list's URL ``pages`` pages in, followed as a browser would."""
    url = "/ui"
    for _ in range(pages):
        found = re.search(r'<a href="([^"]+)" id="next-page">', client.get(url).text)
        if found is None:
            break
        url = unescape(found.group(1))
    return url


def time_pages(url: str, rows: list[dict[str, Any]], runs: int) -> list[dict[str, Any]]:
    busiest_user = statistics.mode(row["user"] for row in rows)
    with httpx.Client(base_url=url, timeout=120) as client:
        pages = {
            "tasks, first page": "/ui",
            "tasks, failed": "/ui?status=failed",
            f"tasks, user {busiest_user}": f"/ui?user={busiest_user}",
            "tasks, a week": "/ui?created_after=2026-11-10T00:00&created_before=2026-11-17T00:00",
            f"tasks, page {DEEP_PAGES + 1}": deep_link(client, DEEP_PAGES),
            "live counts": "/ui/counts",
            "stats, per day (30 days)": "/ui/stats?bucket=day",
            "stats, per hour (48 hours)": "/ui/stats?bucket=hour",
        }
        results = []
        for name, path in pages.items():
            timed = warm_gets(client, path, runs)
            results.append(
                {"page": name, "path": path, "p50_ms": timed.p50_ms, "max_ms": timed.max_ms}
            )
    return results


def run(quick: bool, scratch: Path) -> Report:
    count, runs = (2_000, 2) if quick else (100_000, 7)
    # No periodic cleanup: the rows go back 90 days and would be removed under the bench.
    settings = Settings(context_dir=scratch / "contexts", cleanup=CleanupSettings(days=0))
    rows = asyncio.run(populate(settings, count))
    with Service(settings.context_dir, CLEANUP_DAYS="0") as service:
        timings = time_pages(service.url, rows, runs)
    table = Table(
        f"The ops page over {count:,} tasks, {runs} runs each after one warm-up",
        ["page", "p50 ms", "max ms"],
        [[t["page"], t["p50_ms"], t["max_ms"]] for t in timings],
        [
            "Whole HTML answers over loopback (no keys set). The list reads one page of the "
            "created_at keyset; the counts one grouped read of the status index; the charts "
            "one grouped read of the created_at range."
        ],
    )
    return Report([table], {"tasks": count, "runs": runs, "pages": timings})
