"""Hostile path parameters (SPEC §12: a uuid is a uuid, no path traversal).

Every route about a task is called with uuids, thread ids and job ids that try to leave
CONTEXT_DIR or confuse the parser: each is a 404 or 422 in the one error shape, never a 500, and
nothing outside CONTEXT_DIR is created, changed, read (where the file system records reads) or
shown. Paths are sent to the app as raw ASGI requests, since httpx would normalise ``..`` away.
A uuid in another spelling (upper case, braces, urn:, no hyphens) is the same task, never a
second directory.
"""

import base64
import os
import time
import urllib.parse
import uuid as uuid_module
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.config import Settings
from app.main import create_app
from tests.support.asgi_raw import raw
from tests.support.errors import assert_error
from tests.support.files import locations, paths_naming, read_jsonl, snapshot_dir, task_dir
from tests.support.routes import BODIES, Route, creates_its_task, outcome, task_routes
from tests.support.settings import fast_settings
from tests.support.tasks import key, task_body
from tests.support.threads import start
from tests.support.waits import settled_jobs

pytestmark = pytest.mark.database_agnostic

SENTINEL = "sentinel outside CONTEXT_DIR: never read, never shown"
DAY_NS = 86_400 * 10**9

# "{uuid}" is the task's own uuid, "{decoy}" the name of a task-like directory next to
# CONTEXT_DIR (tmp/running/{decoy}) that the database does not know.
UUID_JUNK: dict[str, str] = {
    "dotdot": "..",
    "dotdot_dotdot": "../..",
    "encoded_dotdot": "%2e%2e",
    "encoded_traversal": "..%2F..%2Fsentinel.txt",
    "encoded_etc": "..%2F..%2F..%2F..%2Fetc%2Fpasswd",
    "encoded_backslashes": "..%5C..%5Csentinel.txt",
    "double_encoded": "%252e%252e%252fsentinel.txt",
    "absolute": "%2Fetc%2Fpasswd",
    "uuid_then_encoded_traversal": "{uuid}%2F..%2F..%2F..%2Fsentinel.txt",
    "uuid_then_traversal": "{uuid}/../../../sentinel.txt",
    "to_the_decoy": "..%2F..%2Frunning%2F{decoy}",
    "decoy": "{decoy}",
    "nul": "%00",
    "uuid_nul": "{uuid}%00",
    "uuid_nul_suffix": "{uuid}%00.json",
    "uuid_junk": "{uuid}x",
    "uuid_dot_json": "{uuid}.json",
    "uuid_space": "{uuid}%20",
    "uuid_newline": "{uuid}%0A",
    "uuid_twice": "{uuid}{uuid}",
    "uuid_wildcard": "{uuid:.35}*",
    "short_uuid": "{uuid:.35}",
    "very_long": "a" * 10_000,
    "very_long_hex": "0" * 5_000,
    # "550e8400-..." with its first three digits in full width (U+FF15 U+FF15 U+FF10)
    "fullwidth_digits": "%EF%BC%95%EF%BC%95%EF%BC%90e8400-e29b-41d4-a716-446655440000",
    "tilde": "~",
    "storage_names": "tasks.db",
    "trash": ".trash",
    "locks": ".locks",
    "running": "running",
    "unknown": str(uuid_module.uuid4()),
    "nil": "00000000-0000-0000-0000-000000000000",
}
NOT_FOUND = {"decoy", "unknown", "nil"}  # well-formed uuids of no task: exactly 404 task_not_found

THREAD_JUNK: dict[str, str] = {
    "zero": "0",
    "negative": "-1",
    "fraction": "1.5",
    "exponent": "1e3",
    "hex": "0x1",
    "over_int32": "2147483648",
    "huge": "9" * 40,
    "dotdot": "..",
    "encoded_dotdot": "%2e%2e",
    "nul": "1%00",
    "only_nul": "%00",
    "encoded_traversal": "1%2F..%2F..%2F..%2Fsentinel.txt",
    "very_long": "1" * 5_000,
    "unknown": "99",
}
JOB_JUNK: dict[str, str] = {
    "zero": "0",
    "negative": "-1",
    "word": "abc",
    "dotdot": "..",
    "encoded_dotdot": "%2e%2e",
    "nul": "1%00",
    "fraction": "1.5",
    "int64_max_plus_one": str(2**63),
    "huge": "9" * 30,
    "very_long": "1" * 5_000,
    "unknown": "99999",
}
FAR_FUTURE = "9999-12-31T23:59:59-23:59"  # in UTC: after year 9999
FAR_PAST = "0001-01-01T00:00:00+23:59"  # in UTC: before year 1


def cursor_at(when: str) -> str:
    """A cursor shaped like the service's (base64 of "<created_at>|<uuid>")."""
    raw = f"{when}|{uuid_module.uuid4()}".encode()
    return urllib.parse.quote(base64.urlsafe_b64encode(raw).decode())


QUERY_JUNK: dict[str, tuple[str, str]] = {
    "created_after_past_year_9999": ("/tasks", f"created_after={urllib.parse.quote(FAR_FUTURE)}"),
    "created_before_before_year_1": ("/tasks", f"created_before={urllib.parse.quote(FAR_PAST)}"),
    "cursor_past_year_9999": ("/tasks", f"cursor={cursor_at(FAR_FUTURE)}"),
    "cursor_before_year_1": ("/tasks", f"cursor={cursor_at(FAR_PAST)}"),
    "cursor_nul": ("/tasks", "cursor=%00"),
    "stats_since_past_year_9999": ("/stats", f"since={urllib.parse.quote(FAR_FUTURE)}"),
    "stats_until_before_year_1": ("/stats", f"until={urllib.parse.quote(FAR_PAST)}"),
    "jobs_task_uuid_traversal": ("/jobs", "task_uuid=..%2F..%2Fsentinel.txt"),
    "jobs_task_uuid_nul": ("/jobs", "task_uuid=%00"),
}


@cache
def thread_query_routes() -> tuple[Route, ...]:
    """The routes that take ``?thread_id=``, from the app's schema."""
    paths: dict[str, dict[str, Any]] = create_app(Settings()).openapi()["paths"]
    return tuple(
        sorted(
            (method.upper(), path)
            for path, operations in paths.items()
            for method, operation in operations.items()
            if any(
                p["name"] == "thread_id" and p["in"] == "query"
                for p in operation.get("parameters", [])
            )
        )
    )


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    """Shadows conftest's: fast settings (no fsync, quick job polling)."""
    return fast_settings(context_dir)


@dataclass(frozen=True)
class World:
    uuid: str  # a running task with a message and a thread
    thread_id: int
    job_id: int
    decoy: str
    outside: tuple[Path, ...]  # files next to CONTEXT_DIR that no answer may touch


def reads_are_recorded(root: Path) -> bool:
    """Whether this file system updates access times when a file a day old (by atime) is read
    (relatime does; noatime does not)."""
    canary = root / "canary"
    canary.write_text("canary")
    old = time.time_ns() - 3 * DAY_NS
    os.utime(canary, ns=(old, canary.stat().st_mtime_ns))
    canary.read_text()
    recorded = canary.stat().st_atime_ns != old
    canary.unlink()
    return recorded


def make_outside(tmp_path: Path, decoy: str) -> tuple[Path, ...]:
    files = (
        tmp_path / "sentinel.txt",
        tmp_path / "etc" / "passwd",
        tmp_path / "running" / decoy / "messages.jsonl",
        tmp_path / "running" / decoy / "metadata.json",
    )
    old = time.time_ns() - 3 * DAY_NS
    for path in files:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(SENTINEL)
        os.utime(path, ns=(old, old))
    return files


@pytest.fixture
async def world(client: httpx.AsyncClient, tmp_path: Path) -> World:
    created = await client.post("/tasks", json=task_body(system_prompt="You are a coding agent."))
    uuid = created.json()["uuid"]
    message = {"role": "user", "content": "Fix the bug in a.py"}
    assert (await client.post(f"/tasks/{uuid}/messages", json=message)).status_code == 201
    thread = await start(client, uuid, label="sub-agent")
    done = (await client.post("/tasks", json=task_body(task_key=key(task_id="done")))).json()
    assert (await client.post(f"/tasks/{done['uuid']}/complete")).status_code == 200
    jobs = await settled_jobs(client, done["uuid"], "final_summary")
    decoy = str(uuid_module.uuid4())
    return World(uuid, thread["thread_id"], jobs[0]["id"], decoy, make_outside(tmp_path, decoy))


def stats(paths: tuple[Path, ...], with_atime: bool) -> dict[str, tuple[int, ...]]:
    return {
        str(p): (p.stat().st_mtime_ns, p.stat().st_size)
        + ((p.stat().st_atime_ns,) if with_atime else ())
        for p in paths
    }


@dataclass
class Tree:
    """The test's tmp dir: CONTEXT_DIR and what lies next to it, to compare after."""

    root: Path
    context_dir: Path
    outside: tuple[Path, ...]
    with_atime: bool

    def snapshot(self) -> dict[str, Any]:
        # The files outside are compared by stat, never read here: reading them would set the
        # access time a read by the app should have set.
        return {
            "outside": stats(self.outside, self.with_atime),
            "files": snapshot_dir(self.context_dir),
            # Lock files have a test of their own (test_an_unknown_uuid_leaves_nothing_behind).
            "paths": sorted(
                str(p.relative_to(self.root)) for p in self.root.rglob("*") if p.suffix != ".lock"
            ),
        }


@pytest.fixture
def tree(
    tmp_path: Path, context_dir: Path, tmp_path_factory: pytest.TempPathFactory, world: World
) -> Tree:
    # Probed in a directory of its own, so the probe is not part of the tree compared.
    probe = tmp_path_factory.mktemp("atime")
    return Tree(tmp_path, context_dir, world.outside, reads_are_recorded(probe))


def refused(response: httpx.Response, tmp_path: Path) -> str:
    """The outcome of a hostile call, after checking it shows nothing from outside."""
    assert SENTINEL not in response.text
    assert str(tmp_path) not in response.text  # no file system path in any answer
    return outcome(response)


def fill(template: str, world: World) -> str:
    return template.replace("{decoy}", world.decoy).format(uuid=world.uuid)


def is_4xx(answer: str) -> bool:
    return answer.split()[0] in ("404", "422") and len(answer.split()) == 2


# -- uuids ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", UUID_JUNK)
async def test_a_hostile_uuid_on_every_task_route(
    app: FastAPI, tmp_path: Path, world: World, tree: Tree, name: str
) -> None:
    before = tree.snapshot()
    value = fill(UUID_JUNK[name], world)
    answers: dict[str, str] = {}
    for method, path in task_routes():
        raw_path = (
            path.replace("{uuid}", value)
            .replace("{thread_id}", str(world.thread_id))
            .replace("{seq}", "1")
        )
        response = await raw(app, method, raw_path, body=BODIES.get((method, path)))
        answers[f"{method} {path}"] = refused(response, tmp_path)
    if name in NOT_FOUND:
        assert answers == {key: unknown_task_answer(key) for key in answers}
    else:
        assert {k: a for k, a in answers.items() if not is_4xx(a)} == {}
    assert tree.snapshot() == before


def unknown_task_answer(route: str) -> str:
    """404, but on a proxy route (which creates its task from a valid request): what the
    request itself gets, sent without a body."""
    method, path = route.split(" ", 1)
    if creates_its_task(path):
        return "200" if method == "GET" else "422 validation_error"
    return "404 task_not_found"


async def test_an_unknown_uuid_leaves_nothing_behind(
    app: FastAPI, context_dir: Path, world: World, tree: Tree
) -> None:
    """A well-formed uuid of no task is 404 on every route (a proxy route refuses the request
    for its missing body) and leaves no file naming it, not even a lock file: otherwise any
    caller grows .locks/ by one file per guessed uuid."""
    before = tree.snapshot()
    left: dict[str, list[str]] = {}
    for method, path in task_routes():
        unknown = str(uuid_module.uuid4())
        raw_path = path.format(uuid=unknown, thread_id=world.thread_id, seq=1)
        response = await raw(app, method, raw_path, body=BODIES.get((method, path)))
        assert refused(response, context_dir) == unknown_task_answer(f"{method} {path}")
        naming = paths_naming(context_dir, unknown)
        if naming:
            left[f"{method} {path}"] = [str(p.relative_to(context_dir)) for p in naming]
    assert left == {}
    assert tree.snapshot() == before


# -- thread and job ids ---------------------------------------------------------------------------


@pytest.mark.parametrize("junk", list(THREAD_JUNK.values()), ids=list(THREAD_JUNK))
async def test_a_hostile_thread_id(
    app: FastAPI, tmp_path: Path, world: World, tree: Tree, junk: str
) -> None:
    """In the path of the thread routes and in ``?thread_id=`` of the context routes."""
    before = tree.snapshot()
    answers: dict[str, str] = {}
    in_path = [(m, p) for m, p in task_routes() if "{thread_id}" in p]
    assert in_path
    for method, path in in_path:
        raw_path = path.replace("{uuid}", world.uuid).replace("{thread_id}", junk)
        response = await raw(app, method, raw_path, body=BODIES.get((method, path)))
        answers[f"{method} {path}"] = refused(response, tmp_path)
    assert thread_query_routes()
    for method, path in thread_query_routes() if junk != "0" else ():  # 0 is the root there
        raw_path = path.replace("{uuid}", world.uuid).replace("{seq}", "1")
        response = await raw(
            app, method, raw_path, f"thread_id={junk}", body=BODIES.get((method, path))
        )
        answers[f"{method} {path}?thread_id="] = refused(response, tmp_path)
    if junk == THREAD_JUNK["unknown"]:
        assert answers == dict.fromkeys(answers, "404 thread_not_found")
    else:
        assert {k: a for k, a in answers.items() if not is_4xx(a)} == {}
    assert tree.snapshot() == before


@pytest.mark.parametrize("junk", list(JOB_JUNK.values()), ids=list(JOB_JUNK))
async def test_a_hostile_job_id(
    app: FastAPI, tmp_path: Path, world: World, tree: Tree, junk: str
) -> None:
    before = tree.snapshot()
    answer = refused(await raw(app, "GET", f"/jobs/{junk}"), tmp_path)
    if junk == JOB_JUNK["unknown"]:
        assert answer == "404 job_not_found"
    else:
        assert is_4xx(answer), answer
    assert tree.snapshot() == before


@pytest.mark.parametrize(("path", "query"), list(QUERY_JUNK.values()), ids=list(QUERY_JUNK))
async def test_hostile_query_values_are_refused_not_crashed_on(
    app: FastAPI, tmp_path: Path, world: World, tree: Tree, path: str, query: str
) -> None:
    """Datetimes that leave the calendar once in UTC, forged cursors, junk task uuids: 422."""
    before = tree.snapshot()
    answer = refused(await raw(app, "GET", path, query), tmp_path)
    assert is_4xx(answer), answer
    assert answer.startswith("422"), answer
    assert tree.snapshot() == before


# -- one task, however its uuid is spelt ----------------------------------------------------------


def spellings(uuid: str) -> dict[str, str]:
    return {
        "upper": uuid.upper(),
        "braced": "{" + uuid + "}",
        "upper_braced": "{" + uuid.upper() + "}",
        "urn": f"urn:uuid:{uuid}",
        "no_hyphens": uuid.replace("-", ""),
        "upper_no_hyphens": uuid.replace("-", "").upper(),
    }


async def test_a_uuid_in_any_spelling_is_the_same_task(
    client: httpx.AsyncClient, context_dir: Path, tmp_path: Path, world: World
) -> None:
    uuid = world.uuid
    for name, spelt in spellings(uuid).items():
        seen = await client.get(f"/tasks/{urllib.parse.quote(spelt)}")
        assert seen.status_code == 200, (name, seen.text)
        assert seen.json()["uuid"] == uuid
        message = {"role": "user", "content": f"spelt {name}"}
        appended = await client.post(f"/tasks/{urllib.parse.quote(spelt)}/messages", json=message)
        assert appended.status_code == 201, (name, appended.text)
        jobs = await client.get("/jobs", params={"task_uuid": spelt})
        assert jobs.json() == (await client.get("/jobs", params={"task_uuid": uuid})).json()

    # Created again with its uuid in upper case: the same task (idempotent), not a second one.
    again = task_body(system_prompt="You are a coding agent.", uuid=uuid.upper())
    response = await client.post("/tasks", json=again)
    assert response.status_code == 200, response.text
    assert response.json()["uuid"] == uuid

    assert locations(context_dir, uuid) == ["running"]
    contents = [r["content"] for r in read_jsonl(task_dir(context_dir, uuid) / "messages.jsonl")]
    assert contents[-len(spellings(uuid)) :] == [f"spelt {name}" for name in spellings(uuid)]
    listed = (await client.get("/tasks", params={"task_id": "27"})).json()["tasks"]
    assert [t["uuid"] for t in listed] == [uuid]
    assert names_spelt_otherwise(tmp_path, uuid) == []  # only the canonical name is ever used


def names_spelt_otherwise(root: Path, uuid: str) -> list[Path]:
    """Paths under root named with the uuid in a spelling other than the canonical one."""
    variants = {s.strip("{}").removeprefix("urn:uuid:") for s in spellings(uuid).values()}
    variants.discard(uuid)
    return [p for p in root.rglob("*") if any(v in p.name for v in variants)]


async def test_a_hostile_uuid_in_a_create_body_is_refused(
    client: httpx.AsyncClient, tmp_path: Path, world: World, tree: Tree
) -> None:
    before = tree.snapshot()
    for junk in (
        "../sentinel",
        "..%2F..%2Fetc",
        f"{world.uuid}/..",
        f"{world.uuid}\x00",
        "a" * 5000,
    ):
        response = await client.post("/tasks", json=task_body(uuid=junk))
        assert_error(response, 422, "validation_error")
        assert SENTINEL not in response.text
    assert tree.snapshot() == before
