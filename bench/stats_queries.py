"""Benchmark: GET /stats over 100k tasks, unfiltered and with each filter.

Rows are bulk-inserted into a temporary SQLite database built by the app's migrations, each with
an (empty) task directory so startup reconciliation finds nothing amiss; the real app then
answers GET /stats over httpx's ASGI transport, in this process. Prints a table and writes
bench/results/stats_queries.json.

    .venv/bin/python -m bench.stats_queries [--tasks 100000] [--runs 7]
"""

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from asgi_lifespan import LifespanManager
from sqlalchemy import insert

from app.config import Settings
from app.db.engine import open_database
from app.db.migrate import upgrade_to_head
from app.db.models import Task
from app.main import create_app
from app.storage.layout import Layout
from bench.machine import run_facts

RESULTS = Path(__file__).parent / "results" / "stats_queries.json"
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
        await upgrade_to_head(db.engine)
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


async def time_cases(
    settings: Settings, named: dict[str, dict[str, str]], runs: int
) -> list[dict[str, Any]]:
    results = []
    app = create_app(settings)
    # Startup reconciles every task directory: far beyond the default 5 s for 100k tasks.
    async with LifespanManager(app, startup_timeout=600) as manager:
        transport = httpx.ASGITransport(app=manager.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            for name, params in named.items():
                times, answer = [], None
                for _ in range(runs + 1):  # the first run warms the page cache
                    start = time.perf_counter()
                    response = await client.get("/stats", params=params)
                    times.append((time.perf_counter() - start) * 1000)
                    response.raise_for_status()
                    answer = response.json()
                assert answer is not None
                times = times[1:]
                results.append(
                    {
                        "filter": name,
                        "params": params,
                        "tasks": answer["total_tasks"],
                        "p50_ms": round(statistics.median(times), 1),
                        "max_ms": round(max(times), 1),
                    }
                )
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=Path(__file__).parent.parent) as tmp:
        # No periodic cleanup: the rows go back DAYS days and would be removed under the bench.
        settings = Settings(context_dir=Path(tmp) / "contexts", cleanup_days=0, log_level="WARNING")
        started = time.perf_counter()
        rows = asyncio.run(populate(settings, args.tasks))
        populate_s = round(time.perf_counter() - started, 1)
        timings = asyncio.run(time_cases(settings, cases(rows), args.runs))
    results = {
        **run_facts(),
        "tasks": args.tasks,
        "runs": args.runs,
        "populate_s": populate_s,
        "stats": timings,
    }
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"{args.tasks:,} tasks inserted in {populate_s} s; GET /stats, {args.runs} runs each")
    print(f"{'filter':>22} {'tasks':>8} {'p50 ms':>8} {'max ms':>8}")
    for row in timings:
        print(f"{row['filter']:>22} {row['tasks']:>8,} {row['p50_ms']:>8} {row['max_ms']:>8}")
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
