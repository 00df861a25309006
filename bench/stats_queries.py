"""GET /stats over 100,000 tasks, unfiltered and with each filter.

Rows are bulk-inserted into a SQLite database built by the app's migrations, each with an
(empty) task directory so the start's reconciliation finds nothing amiss; the service (a real
process) then answers GET /stats over loopback.
"""

import asyncio
import random
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import insert

from app.config import CleanupSettings, Settings
from app.db.engine import open_database
from app.db.models import Task
from app.storage.layout import Layout
from bench.harness import Report, Service, Table, warm_gets
from migrations.upgrade import upgrade_database

NOW = datetime(2026, 11, 23, tzinfo=UTC)
DAYS = 90
STATUS_WEIGHTS = {"running": 3, "paused": 2, "completed": 80, "failed": 15}
USERS = [f"user{n:02d}" for n in range(50)]
OWNERS = [f"org{n:02d}" for n in range(20)]
REPOS = [f"repo{n:03d}" for n in range(150)]  # the same name recurs under several owners


def zipf(rng: random.Random, values: list[str]) -> str:
    """The k-th value about 1/k as often as the first (a few busy users, repos, owners)."""
    return rng.choices(values, cum_weights=_CUMULATIVE[len(values)])[0]


_CUMULATIVE = {
    n: [sum(1 / (k + 1) for k in range(i + 1)) for i in range(n)]
    for n in (len(USERS), len(OWNERS), len(REPOS))
}


def task_row(rng: random.Random) -> dict[str, Any]:
    """One task: Zipf-like users, owners and repos, statuses by weight, created over DAYS days."""
    status = rng.choices(list(STATUS_WEIGHTS), weights=list(STATUS_WEIGHTS.values()))[0]
    created = NOW - timedelta(seconds=rng.uniform(0, DAYS * 86400))
    finished = status in ("completed", "failed")
    completed = created + timedelta(seconds=rng.lognormvariate(7, 1.2)) if finished else None
    calls = rng.randint(1, 200)
    return {
        "uuid": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "task_source": "github" if rng.random() < 0.7 else "gitlab",
        "owner": zipf(rng, OWNERS),
        "repo": zipf(rng, REPOS),
        "task_type": rng.choice(("issue", "pull_request")),
        "task_id": str(rng.randint(1, 5000)),
        "user": zipf(rng, USERS),
        "status": status,
        "created_at": created,
        "started_at": created,
        "updated_at": completed or created,
        "completed_at": completed,
        "llm_provider": "openai",
        "model": "gpt-4o",
        "context_length": 128000,
        "max_output_tokens": 4096,
        "llm_call_count": calls,
        "tool_call_count": calls + rng.randint(0, calls),
        "total_tokens": calls * rng.randint(2_000, 20_000),
        "compression_count": rng.randint(0, calls // 20),
        "total_messages": 3 * calls,
        "error_message": f"error {rng.randint(1, 40)}" if status == "failed" else None,
        "create_fingerprint": "bench",
    }


async def populate(settings: Settings, count: int) -> list[dict[str, Any]]:
    rng = random.Random(5)
    rows = sorted((task_row(rng) for _ in range(count)), key=lambda r: r["created_at"])
    layout = Layout(settings.context_dir)
    layout.ensure()
    for row in rows:
        layout.task_dir(row["status"], row["uuid"]).mkdir()
    table = Task.metadata.tables["tasks"]
    db = open_database(settings.effective_database_url)
    try:
        await upgrade_database(db)
        for start in range(0, count, 5000):
            async with db.transaction() as session:
                # Core, not ORM, insert: a third of the time, and the rows are plain dicts.
                await session.execute(insert(table), rows[start : start + 5000])
    finally:
        await db.dispose()
    return rows


def cases(rows: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Unfiltered, then each filter alone on a middling value, then a week's range."""

    def middling(field: str) -> str:
        counts: dict[str, int] = {}
        for row in rows:
            counts[row[field]] = counts.get(row[field], 0) + 1
        ranked = sorted(counts, key=lambda v: -counts[v])
        return ranked[len(ranked) // 4]

    day = (NOW - timedelta(days=1)).isoformat()
    first_day = (NOW - timedelta(days=DAYS - 1)).isoformat()
    week = ((NOW - timedelta(days=14)).isoformat(), (NOW - timedelta(days=7)).isoformat())
    return {
        "none": {},
        "user": {"user": middling("user")},
        "owner": {"owner": middling("owner")},
        "repo": {"repo": middling("repo")},
        "task_source": {"task_source": "gitlab"},
        "since (last day)": {"since": day},
        "until (first day)": {"until": first_day},
        "since+until (a week)": {"since": week[0], "until": week[1]},
        "user+since (a week)": {"user": middling("user"), "since": week[0]},
    }


def time_cases(url: str, named: dict[str, dict[str, str]], runs: int) -> list[dict[str, Any]]:
    results = []
    with httpx.Client(base_url=url, timeout=120) as client:
        for name, params in named.items():
            timed = warm_gets(client, "/stats", runs, **params)
            results.append(
                {
                    "filter": name,
                    "params": params,
                    "tasks": timed.last.json()["total_tasks"],
                    "p50_ms": timed.p50_ms,
                    "max_ms": timed.max_ms,
                }
            )
    return results


def run(quick: bool, scratch: Path) -> Report:
    count, runs = (2_000, 2) if quick else (100_000, 7)
    # No periodic cleanup: the rows go back DAYS days and would be removed under the bench.
    settings = Settings(context_dir=scratch / "contexts", cleanup=CleanupSettings(days=0))
    started = time.perf_counter()
    rows = asyncio.run(populate(settings, count))
    populate_s = time.perf_counter() - started
    with Service(settings.context_dir, CLEANUP_DAYS="0") as service:
        timings = time_cases(service.url, cases(rows), runs)
        ready_s = service.ready_after_s
    table = Table(
        f"GET /stats over {count:,} tasks, {runs} runs each after one warm-up",
        ["filter", "tasks matched", "p50 ms", "max ms"],
        [[t["filter"], t["tasks"], t["p50_ms"], t["max_ms"]] for t in timings],
        [
            f"Rows bulk-inserted in {populate_s:.1f} s (Zipf-like users, owners and repos over "
            f"{DAYS} days); the service then started in {ready_s:.1f} s."
        ],
    )
    data = {"tasks": count, "runs": runs, "populate_s": populate_s, "ready_s": ready_s}
    return Report([table], data | {"stats": timings})
