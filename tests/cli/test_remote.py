"""``context-service tasks|task|jobs|stats`` as real processes against a real running service
with an admin key: tables for people, the service's JSON with ``--json``, and the service's
errors (or why it cannot be reached) on stderr with exit status 1."""

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.paths import REPO
from tests.support.postgres import PostgresDatabases
from tests.support.server import Server, free_port, server_of_its_own
from tests.support.tasks import key, task_body

pytestmark = [pytest.mark.e2e, pytest.mark.database_agnostic]

CLI = Path(sys.executable).parent / "context-service"
ADMIN_KEY = "cli-test-admin-key-0123456789"


def cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith("CONTEXT_SERVICE_")
    } | env
    return subprocess.run(
        [str(CLI), *args], cwd=REPO, env=environment, capture_output=True, text=True, timeout=60
    )


@pytest.fixture(scope="module")
def live(
    tmp_path_factory: pytest.TempPathFactory, postgres: PostgresDatabases | None
) -> Iterator[Server]:
    env = {"API_KEYS": "", "ADMIN_API_KEYS": ADMIN_KEY}
    with server_of_its_own(tmp_path_factory.mktemp("cli"), postgres, env) as server:
        yield server


@pytest.fixture(scope="module")
def world(live: Server) -> dict[str, Any]:
    """Two tasks: one running, one completed (its final summary is a job)."""
    auth = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with httpx.Client(base_url=live.base_url, headers=auth, timeout=30) as http:
        running = http.post("/tasks", json=task_body(task_key=key(task_id="101")))
        done = http.post("/tasks", json=task_body(task_key=key(task_id="102"), user="ada"))
        assert running.status_code == done.status_code == 201, (running.text, done.text)
        uuid = done.json()["uuid"]
        message = {"role": "user", "content": "Fix the parser."}
        assert http.post(f"/tasks/{uuid}/messages", json=message).status_code == 201
        assert http.post(f"/tasks/{uuid}/complete").status_code == 200
        return {"running": running.json()["uuid"], "completed": uuid, "url": live.base_url}


def connected(world: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    """The command with the service's URL and key from the environment, as ops would set."""
    result = cli(*args, CONTEXT_SERVICE_URL=world["url"], CONTEXT_SERVICE_API_KEY=ADMIN_KEY)
    assert result.returncode == 0, result.stderr
    return result


def test_version_and_serve_help_say_what_they_are() -> None:
    version = cli("--version")
    assert version.returncode == 0
    assert version.stdout.split()[0] == "context-service"
    assert version.stdout.split()[1][0].isdigit()
    serve = cli("serve", "--help")
    assert serve.returncode == 0
    for flag, default in (("--host", "127.0.0.1"), ("--port", "8080"), ("--workers", "1")):
        assert flag in serve.stdout
        assert f"(default: {default})" in " ".join(serve.stdout.split()), flag


def test_tasks_lists_a_table_and_filters(world: dict[str, Any]) -> None:
    table = connected(world, "tasks").stdout
    header = table.splitlines()[0].split()
    assert header[:3] == ["uuid", "status", "task"]
    assert world["running"] in table
    assert world["completed"] in table
    assert "github:notfolder/coding_agent issue 102" in table

    completed = connected(world, "tasks", "--status", "completed").stdout
    assert world["completed"] in completed
    assert world["running"] not in completed
    by_user = json.loads(connected(world, "tasks", "--user", "ada", "--json").stdout)
    assert [t["uuid"] for t in by_user["tasks"]] == [world["completed"]]


def test_tasks_pages_with_the_cursor_it_prints(world: dict[str, Any]) -> None:
    first = connected(world, "tasks", "--limit", "1").stdout
    more = [line for line in first.splitlines() if line.startswith("more: --cursor ")]
    assert len(more) == 1
    cursor = more[0].removeprefix("more: --cursor ")
    second = connected(world, "tasks", "--limit", "1", "--cursor", cursor).stdout
    assert world["completed"] in first  # newest first
    assert world["running"] in second
    assert world["completed"] not in second


def test_task_shows_the_record_statistics_and_context(world: dict[str, Any]) -> None:
    shown = connected(world, "task", world["completed"]).stdout
    fields = {line.split("  ")[0]: line for line in shown.splitlines()}
    assert world["completed"] in fields["uuid"]
    assert "completed" in fields["status"]
    assert "1" in fields["messages"]
    assert "of" in fields["context tokens"]
    as_json = json.loads(connected(world, "task", world["completed"], "--json").stdout)
    assert as_json["uuid"] == world["completed"]
    assert as_json["statistics"]["total_messages"] == 1


def test_jobs_lists_the_service_jobs(world: dict[str, Any]) -> None:
    answer = json.loads(connected(world, "jobs", "--task", world["completed"], "--json").stdout)
    jobs = answer["jobs"]
    assert jobs, "completing a task queues its final summary"
    table = connected(world, "jobs", "--task", world["completed"]).stdout
    assert table.splitlines()[0].split()[:5] == ["id", "task", "thread", "kind", "status"]
    for job in jobs:
        assert any(
            line.split()[:2] == [str(job["id"]), job["task_uuid"]] for line in table.splitlines()
        )
    none = connected(world, "jobs", "--task", world["running"]).stdout
    assert none.strip() == "no jobs"


def test_stats_sums_up_the_service(world: dict[str, Any]) -> None:
    table = connected(world, "stats").stdout
    rows = {" ".join(line.split()[:-1]): line.split()[-1] for line in table.splitlines() if line}
    assert rows["tasks"] == "2"
    assert rows["running"] == "1"
    assert rows["completed"] == "1"
    figures = json.loads(connected(world, "stats", "--json").stdout)
    assert figures["total_tasks"] == 2


def test_errors_say_what_the_service_said(world: dict[str, Any]) -> None:
    unknown = "00000000-0000-4000-8000-000000000000"
    missing = cli("task", unknown, "--url", world["url"], "--api-key", ADMIN_KEY)
    assert missing.returncode == 1
    assert missing.stderr.startswith("error: HTTP 404 task_not_found: ")
    assert missing.stdout == ""

    keyless = cli("tasks", "--url", world["url"])
    assert keyless.returncode == 1
    assert keyless.stderr.startswith("error: HTTP 401 unauthorized: ")


def test_an_unreachable_service_is_named() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = cli("stats", "--url", url)
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: cannot reach the service at {url}: ")
