"""GET /metrics over the real app: each metric moves by exactly what was done."""

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from app.config import Settings
from app.db.engine import open_database
from app.jobs.queue import JobQueue
from app.observability.metrics import CONTENT_TYPE
from tests.fakes import llm_server
from tests.fakes.llm_server import FakeLLM
from tests.support.app import running_app
from tests.support.conversations import file_turns
from tests.support.metrics import scrape, series, value
from tests.support.settings import layered
from tests.support.tasks import new_task

fake_llm = llm_server.fake_llm  # the fixture: a real HTTP server on 127.0.0.1

HTTP = "context_http_request_duration_seconds_count"
UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-")


def base_settings(context_dir: Path, **extra: Any) -> Settings:
    values: dict[str, Any] = {"context_dir": context_dir, "storage": {"fsync": "never"}}
    return Settings(**layered(values, extra))


async def test_requests_messages_and_tasks(context_dir: Path) -> None:
    async with running_app(base_settings(context_dir, limits={"max_body_bytes": 4096})) as client:
        response = await client.get("/metrics")
        assert response.headers["content-type"] == CONTENT_TYPE
        before = await scrape(client)
        assert value(before, "context_messages_appended_total") == 0
        assert value(before, "context_tasks", status="running") == 0

        uuid = await new_task(client)
        other = await new_task(client)
        path = f"/tasks/{uuid}/messages"
        assert (await client.post(path, json={"messages": file_turns(3)})).status_code == 201
        keyed = {"Idempotency-Key": "k-1"}
        assert (await client.post(path, json=file_turns(1)[0], headers=keyed)).status_code == 201
        replay = await client.post(path, json=file_turns(1)[0], headers=keyed)
        assert replay.headers["Idempotent-Replayed"] == "true"  # appends nothing
        too_big = await client.post(path, content=b"x" * 5000)
        assert too_big.status_code == 413  # refused by the body limit, before routing
        assert (await client.get("/no/such/route")).status_code == 404
        assert (await client.post(f"/tasks/{other}/complete")).status_code == 200

        after = await scrape(client)

    assert value(after, "context_messages_appended_total") == 4  # messages, not requests
    template = "/tasks/{uuid}/messages"
    assert value(after, HTTP, method="POST", route=template, status="201") == 3
    assert value(after, HTTP, method="POST", route=template, status="413") == 1
    assert value(after, HTTP, method="POST", route="/tasks", status="201") == 2
    assert value(after, HTTP, method="GET", route="unmatched", status="404") == 1
    assert value(after, HTTP, method="GET", route="/metrics", status="200") == 2
    # Bounded cardinality: route labels are templates, never a task's path.
    routes = {labels["route"] for labels in series(after, HTTP)}
    assert not [r for r in routes if UUID_RE.search(r)], routes
    assert "/tasks/{uuid}/complete" in routes
    # Tasks by status: every status has a sample, filled at scrape time.
    tasks = {
        labels["status"]: value(after, "context_tasks", **labels)
        for labels in series(after, "context_tasks")
    }
    assert tasks == {"running": 1, "paused": 0, "completed": 1, "failed": 0}


async def test_job_queue_depth_by_kind_and_status(context_dir: Path) -> None:
    settings = base_settings(context_dir)
    async with running_app(settings) as client:
        uuid = await new_task(client)
        # Jobs the runner will not claim during the test: due in an hour, or leased for one.
        later = datetime.now(UTC) + timedelta(hours=1)
        db = open_database(settings.effective_database_url)
        try:
            queue = JobQueue(db, max_attempts=3, lease_s=30)
            async with db.transaction() as session:
                for kind, status in [
                    ("condense", "queued"),
                    ("condense", "queued"),
                    ("webhook", "running"),
                    ("condense", "succeeded"),
                    ("condense", "failed"),
                ]:
                    job = queue.new(uuid, kind)
                    job.status, job.not_before, job.lease_until = status, later, later
                    session.add(job)
        finally:
            await db.dispose()
        samples = await scrape(client)

    assert value(samples, "context_jobs", kind="condense", status="queued") == 2
    assert value(samples, "context_jobs", kind="condense", status="running") == 0
    assert value(samples, "context_jobs", kind="webhook", status="running") == 1
    assert value(samples, "context_jobs", kind="webhook", status="queued") == 0
    statuses = {labels["status"] for labels in series(samples, "context_jobs")}
    assert statuses == {"queued", "running"}  # finished jobs are not queue depth
    # Every kind the runner handles shows a 0 rather than no sample.
    kinds = {labels["kind"] for labels in series(samples, "context_jobs")}
    assert {"condense", "webhook"} <= kinds


async def test_compactions_and_llm_calls(context_dir: Path, fake_llm: FakeLLM) -> None:
    settings = base_settings(
        context_dir,
        token_counter="heuristic",
        llm={
            "backend": "openai",
            "base_url": fake_llm.base_url,
            "model": "fake-model",
            "max_retries": 0,
            "timeout_s": 5.0,
        },
    )
    async with running_app(settings) as client:
        uuid = await new_task(client)
        small = await new_task(client)
        response = await client.post(f"/tasks/{uuid}/messages", json={"messages": file_turns(16)})
        assert response.status_code == 201, response.text
        compress = f"/tasks/{uuid}/compress"

        fake_llm.behaviour = "error"  # HTTP 500: the condense fails
        assert (await client.post(compress, json={"strategy": "condense"})).status_code == 502
        failed = await scrape(client)

        fake_llm.behaviour = "ok"
        condensed = await client.post(compress, json={"strategy": "condense"})
        assert condensed.status_code == 200, condensed.text
        assert condensed.json()["kind"] == "condense"
        truncated = await client.post(compress, json={"strategy": "truncate"})
        assert truncated.json()["kind"] == "truncation"
        skipped = await client.post(f"/tasks/{small}/compress", json={"strategy": "condense"})
        assert skipped.json()["kind"] == "skipped"  # too few messages to summarise
        done = await scrape(client)

    assert len(fake_llm.requests) == 2
    llm_count = "context_llm_call_duration_seconds_count"
    errors = "context_llm_errors_total"
    assert value(failed, llm_count, backend_kind="openai") == 1
    assert value(failed, errors, backend_kind="openai", error="LLMUnavailable") == 1
    assert value(failed, "context_compactions_total", kind="failed") == 1
    assert value(failed, "context_compactions_total", kind="condense") == 0

    assert value(done, llm_count, backend_kind="openai") == 2
    assert value(done, errors, backend_kind="openai", error="LLMUnavailable") == 1  # unchanged
    for kind in ("condense", "truncation", "skipped", "failed"):
        assert value(done, "context_compactions_total", kind=kind) == 1, kind
        count = value(done, "context_compaction_duration_seconds_count", kind=kind)
        assert count == 1, kind
    assert value(done, "context_compaction_duration_seconds_sum", kind="condense") > 0
    assert value(done, HTTP, method="POST", route="/tasks/{uuid}/compress", status="502") == 1


async def test_metrics_are_per_app(context_dir: Path, tmp_path: Path) -> None:
    """Two apps in one process count into their own registries (no global state)."""
    async with (
        running_app(base_settings(context_dir)) as first,
        running_app(base_settings(tmp_path / "other")) as second,
    ):
        for _ in range(3):
            await first.get("/healthz")
        await second.get("/healthz")
        one, two = await scrape(first), await scrape(second)
    assert value(one, HTTP, method="GET", route="/healthz", status="200") == 3
    assert value(two, HTTP, method="GET", route="/healthz", status="200") == 1
