"""A full disk under a real server: writes fail with a clear 507, nothing acknowledged is lost,
and the service works again once there is room; files that cannot be written: 503.

A full disk is either the process's RLIMIT_FSIZE (a write past it fails with EFBIG, as ENOSPC
does on a full disk) or a real one: CONTEXT_DIR on a small tmpfs of its own, the SQLite
database inside it as by default, filled up with a ballast file. Faults at the true edge of the
world, no code of ours patched.
"""

import asyncio
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx
import pytest

from tests.support.schemas import validate_openai_request
from tests.support.server import ServerPool, assert_seqs_contiguous
from tests.support.tasks import all_messages, task_body
from tests.support.waits import WAIT_S, until

pytestmark = pytest.mark.e2e

DISK_BYTES = 24 << 20  # the tmpfs of a real full disk
FREE_FLOOR = 2 << 20  # READY_MIN_FREE_BYTES of its server
LEFT_FREE = 400_000  # what the ballast leaves: a few dozen appends, then full
LIMIT = 2 << 20  # bytes any one file of the server may reach
MESSAGE_CHARS = 60_000  # so messages.jsonl reaches LIMIT after a few dozen appends
MAX_APPENDS = 200  # far more than it takes to fill LIMIT


async def test_a_full_disk_refuses_writes_with_507_and_loses_nothing(
    servers: ServerPool,
) -> None:
    srv = servers.start(file_size_limit=LIMIT, env={"CLEANUP_DAYS": "0"})
    acknowledged: list[tuple[int, str]] = []  # (seq, text) of every 201
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
        created = await http.post("/tasks", json=task_body(context_length=1_000_000))
        assert created.status_code == 201, created.text
        uuid = created.json()["uuid"]
        refusal = None
        for i in range(MAX_APPENDS):
            text = f"message {i}: " + "x" * MESSAGE_CHARS
            response = await http.post(
                f"/tasks/{uuid}/messages",
                json={"role": "user", "content": text},
                headers={"Idempotency-Key": f"m-{i}"},
            )
            if response.status_code != 201:
                refusal = response
                break
            acknowledged.append((response.json()["seqs"][0], text))
        assert refusal is not None, "the limit was never reached"
        assert refusal.status_code == 507, refusal.text
        body = refusal.json()
        assert body["error"]["code"] == "insufficient_storage"
        assert str(srv.context_dir) not in refusal.text  # no server path in the answer
        assert acknowledged  # some fitted before the disk filled up

        # Still full: reads work, a write that does not fit fails as cleanly (its torn bytes
        # were cut: a small one could still fit), the server stays up.
        assert (await http.get(f"/tasks/{uuid}")).status_code == 200
        big = {"role": "user", "content": "y" * MESSAGE_CHARS * 2}
        again = await http.post(f"/tasks/{uuid}/messages", json=big)
        assert again.status_code == 507, again.text
        assert (await http.get("/healthz")).status_code == 200
    srv.kill()

    # Room again: a server without the limit on the same CONTEXT_DIR.
    roomy = servers.start(env={"CLEANUP_DAYS": "0"})
    async with httpx.AsyncClient(base_url=roomy.base_url, timeout=30) as http:
        records = await all_messages(http, uuid)
        assert_seqs_contiguous(records)
        by_seq = {r["seq"]: r["content"] for r in records}
        for seq, text in acknowledged:
            assert by_seq.get(seq) == text, f"acknowledged seq {seq} was lost"
        # A refused append may have reached messages.jsonl whole before current.jsonl failed:
        # recovered, like a crash's, but only as the one message that was sent.
        assert len(records) - len(acknowledged) <= 2
        payload = await http.get(f"/tasks/{uuid}/request")
        assert payload.status_code == 200, payload.text
        validate_openai_request(payload.json())
        after = await http.post(f"/tasks/{uuid}/messages", json={"role": "user", "content": "ok"})
        assert after.status_code == 201, after.text
        assert after.json()["seqs"] == [records[-1]["seq"] + 1]


async def test_read_only_task_files_refuse_writes_with_503_and_lose_nothing(
    servers: ServerPool,
) -> None:
    """A task directory that cannot be written (read-only modes; the server runs without the
    capability that lets root ignore them): appends answer 503 `storage_unavailable`, with no
    path in the answer; reads go on; once writable again nothing acknowledged is missing."""
    srv = servers.start(obey_permissions=True)
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
        created = await http.post("/tasks", json=task_body(system_prompt="You are a coding agent."))
        assert created.status_code == 201, created.text
        uuid = created.json()["uuid"]
        for i in range(3):
            response = await http.post(
                f"/tasks/{uuid}/messages", json={"role": "user", "content": f"before {i}"}
            )
            assert response.status_code == 201, response.text
        directory = srv.context_dir / "running" / uuid
        files = [p for p in directory.rglob("*") if p.is_file()]
        for path in files:
            path.chmod(0o444)
        directory.chmod(0o555)
        try:
            refused = await http.post(
                f"/tasks/{uuid}/messages", json={"role": "user", "content": "refused"}
            )
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"]["code"] == "storage_unavailable"
            assert str(srv.context_dir) not in refused.text
            history = await all_messages(http, uuid)
            assert [m["content"] for m in history][1:] == [f"before {i}" for i in range(3)]
            payload = await http.get(f"/tasks/{uuid}/request")
            assert payload.status_code == 200, payload.text
            validate_openai_request(payload.json())
        finally:
            directory.chmod(0o755)
            for path in files:
                path.chmod(0o644)
        after = await http.post(
            f"/tasks/{uuid}/messages", json={"role": "user", "content": "after"}
        )
        assert after.status_code == 201, after.text
        assert after.json()["seqs"] == [5]
        history = await all_messages(http, uuid)
        assert_seqs_contiguous(history)
        assert [m["content"] for m in history][1:] == [*(f"before {i}" for i in range(3)), "after"]


@contextmanager
def tmpfs(path: Path, size: int) -> Iterator[Path]:
    """A tmpfs of ``size`` bytes mounted at ``path`` (skipped where nothing can be mounted)."""
    path.mkdir(parents=True)
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)]
    try:
        subprocess.run(mount, check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot mount a tmpfs here: {exc}")
    try:
        yield path
    finally:
        # Lazily: the pool's servers (stopped after this) still hold files on it.
        subprocess.run(["umount", "--lazy", str(path)], check=True)


@pytest.fixture
def small_disk(servers: ServerPool) -> Iterator[Path]:
    """The pool's CONTEXT_DIR on a tmpfs of DISK_BYTES."""
    with tmpfs(servers.context_dir, DISK_BYTES) as path:
        yield path


def free_bytes(path: Path) -> int:
    disk = os.statvfs(path)
    return disk.f_bavail * disk.f_frsize


def fill_up(path: Path) -> None:
    """Write ``path`` until its disk has not one byte left."""
    with open(path, "wb", buffering=0) as ballast:
        for chunk in (1 << 20, 4096, 1):
            with suppress(OSError):
                while True:
                    ballast.write(b"\0" * chunk)


@pytest.mark.sqlite_only  # the database is a SQLite file on that disk, whatever the suite runs on
async def test_a_full_database_disk_still_acknowledges_appends_and_serves_reads(
    servers: ServerPool, tmp_path: Path
) -> None:
    """A SQLite database (whatever the suite runs on) alone on a disk with no room left
    (CONTEXT_DIR has plenty): an append is committed by its fsynced files, so it is
    acknowledged while its head waits for room in the database (in its own transaction, with
    HEAD_FLUSH_MS=0, it is refused: 507); a payload served cannot record its tokens and a read
    cannot write the heads, and both still answer 200; /readyz names the database's disk; with
    room again nothing acknowledged is missing and the counters count it."""
    with tmpfs(tmp_path / "db", DISK_BYTES) as db_disk:
        srv = servers.start(
            env={
                "CLEANUP_DAYS": "0",
                "DATABASE_URL": f"sqlite+aiosqlite:///{db_disk / 'tasks.db'}",
                "READY_MIN_FREE_BYTES": str(FREE_FLOOR),
                "WAL_CHECKPOINT_INTERVAL_S": "0.2",
            }
        )
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
            created = await http.post("/tasks", json=task_body(system_prompt="You are an agent."))
            assert created.status_code == 201, created.text
            uuid = created.json()["uuid"]
            texts = [f"before {i}" for i in range(3)]
            for text in texts:
                response = await http.post(
                    f"/tasks/{uuid}/messages", json={"role": "user", "content": text}
                )
                assert response.status_code == 201, response.text
            wal = db_disk / "tasks.db-wal"
            # The log checkpointed away: the next write needs new room.
            await until(lambda: wal_bytes(wal) == 0)
            fill_up(db_disk / "ballast")

            payload = await http.get(f"/tasks/{uuid}/request")
            assert payload.status_code == 200, payload.text
            pending = await http.post(
                f"/tasks/{uuid}/messages", json={"role": "user", "content": "pending"}
            )
            assert pending.status_code == 201, pending.text
            history = await all_messages(http, uuid)
            assert [m["content"] for m in history][1:] == [*texts, "pending"]
            assert (await http.get(f"/tasks/{uuid}")).status_code == 200
            assert "pending heads not written" in srv.log_text()
            ready = await http.get("/readyz")
            assert ready.status_code == 503, ready.text
            assert ready.json()["checks"]["database_dir"].startswith("error:"), ready.text

            (db_disk / "ballast").unlink()
            after = await http.post(
                f"/tasks/{uuid}/messages", json={"role": "user", "content": "after"}
            )
            assert after.status_code == 201, after.text
            history = await all_messages(http, uuid)
            assert_seqs_contiguous(history)
            assert [m["content"] for m in history][1:] == [*texts, "pending", "after"]
            task = (await http.get(f"/tasks/{uuid}")).json()
            assert task["statistics"]["total_messages"] == len(texts) + 3
            assert (await http.get("/readyz")).status_code == 200
        srv.stop()


async def test_a_full_disk_with_the_database_on_it_answers_507_and_serves_reads(
    servers: ServerPool, small_disk: Path
) -> None:
    """The default layout (tasks.db inside CONTEXT_DIR) on a disk that fills up: every append
    answers 201 or 507, also when it is the database's own write that finds no room (never a
    500, never a dropped connection); reads answer 200; /readyz says not ready until room is
    freed; the write-ahead log is checkpointed down to nothing once it can be; nothing
    acknowledged is lost."""
    srv = servers.start(
        env={
            "CLEANUP_DAYS": "0",
            "READY_MIN_FREE_BYTES": str(FREE_FLOOR),
            "WAL_CHECKPOINT_INTERVAL_S": "0.2",
        }
    )
    acknowledged: list[tuple[int, str]] = []  # (seq, text) of every 201
    answers: dict[str, int] = {}
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:

        async def append(text: str, key: str) -> None:
            try:
                response = await http.post(
                    f"/tasks/{uuid}/messages",
                    json={"role": "user", "content": text},
                    headers={"Idempotency-Key": key},
                )
            except httpx.TransportError as exc:  # a reset connection: counted, and fails below
                answers[type(exc).__name__] = answers.get(type(exc).__name__, 0) + 1
                return
            answers[str(response.status_code)] = answers.get(str(response.status_code), 0) + 1
            if response.status_code == 201:
                acknowledged.append((response.json()["seqs"][0], text))
            elif response.status_code == 507:
                assert response.json()["error"]["code"] == "insufficient_storage"
                assert str(small_disk) not in response.text

        created = await http.post("/tasks", json=task_body(context_length=1_000_000))
        assert created.status_code == 201, created.text
        uuid = created.json()["uuid"]
        for i in range(3):
            await append(f"before {i}", f"before-{i}")
        ballast = small_disk / "ballast"
        ballast.write_bytes(b"\0" * (free_bytes(small_disk) - LEFT_FREE))

        # Appends of many sizes fill the disk; then tiny ones, which still fit in the last
        # page of the JSONL files while the database's log finds no room for its own.
        for i in range(150):
            await append(f"m{i} " + "z" * (50 + i * 997 % 3000), f"m-{i}")
        for i in range(30):
            await append(f"t{i}", f"t-{i}")
        assert set(answers) <= {"201", "507"}, answers
        assert "507" in answers, "the disk never filled up"
        # Which refuses first, the files or the database's log, depends on where the last free
        # page goes; the database alone on a full disk is the test above.

        # Still full: reads answer, readiness says why not.
        assert (await http.get(f"/tasks/{uuid}")).status_code == 200
        history = await all_messages(http, uuid)
        assert_seqs_contiguous(history)
        payload = await http.get(f"/tasks/{uuid}/request")
        assert payload.status_code == 200, payload.text
        validate_openai_request(payload.json())
        ready = await http.get("/readyz")
        assert ready.status_code == 503, ready.text
        assert ready.json()["checks"]["context_dir"].startswith("error:"), ready.text

        # Room again, the same server: ready, the log checkpointed away, appends go on.
        ballast.unlink()
        wal = small_disk / "tasks.db-wal"
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            ready = await http.get("/readyz")
            if ready.status_code == 200 and wal_bytes(wal) == 0:
                break
            await asyncio.sleep(0.1)
        assert ready.status_code == 200, ready.text
        assert wal_bytes(wal) == 0, "the write-ahead log was not checkpointed"
        await append("after", "after")
        assert acknowledged[-1][1] == "after"

        records = await all_messages(http, uuid)
        assert_seqs_contiguous(records)
        by_seq = {r["seq"]: r["content"] for r in records}
        for seq, text in acknowledged:
            assert by_seq.get(seq) == text, f"acknowledged seq {seq} was lost"


@contextmanager
def read_only(directory: Path, how: str) -> Iterator[None]:
    """``directory`` cannot be written for a while: its modes ("modes": for a server that obeys
    them) or a read-only bind mount over it ("mount", skipped where nothing can be mounted)."""
    if how == "mount":
        try:
            subprocess.run(["mount", "--bind", directory, directory], check=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            pytest.skip(f"cannot bind-mount here: {exc}")
        try:
            subprocess.run(["mount", "-o", "remount,bind,ro", directory, directory], check=True)
            yield
        finally:
            # Lazy: a descriptor the server still holds there for a moment (a lock file its
            # background work took) would make a plain umount fail as busy.
            subprocess.run(["umount", "--lazy", directory], check=True)
        return
    paths = [directory, *directory.rglob("*")]
    modes = {path: path.stat().st_mode for path in paths}
    for path in paths:
        path.chmod(modes[path] & ~0o222)
    try:
        yield
    finally:
        for path in paths:
            path.chmod(modes[path])


@pytest.mark.parametrize("how", ["modes", "mount"])
async def test_a_read_only_context_dir_serves_reads_and_refuses_writes_with_503(
    servers: ServerPool, tmp_path: Path, how: str
) -> None:
    """All of CONTEXT_DIR read-only (its lock files too; the database elsewhere): the task, its
    history and its payload answer 200, /readyz says not ready, appends answer 503
    `storage_unavailable`; writable again, nothing acknowledged is missing."""
    env = {"CLEANUP_DAYS": "0"}
    if not os.environ.get("DATABASE_URL"):  # SQLite: a file outside CONTEXT_DIR
        (tmp_path / "db").mkdir()
        env["DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp_path / 'db' / 'tasks.db'}"
    srv = servers.start(env=env, obey_permissions=True)
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
        created = await http.post("/tasks", json=task_body(system_prompt="You are a coding agent."))
        assert created.status_code == 201, created.text
        uuid = created.json()["uuid"]
        texts = [f"before {i}" for i in range(3)]
        for text in texts:
            response = await http.post(
                f"/tasks/{uuid}/messages", json={"role": "user", "content": text}
            )
            assert response.status_code == 201, response.text
        with read_only(srv.context_dir, how):
            task = await http.get(f"/tasks/{uuid}")
            assert task.status_code == 200, task.text
            history = await all_messages(http, uuid)
            assert [m["content"] for m in history][1:] == texts
            payload = await http.get(f"/tasks/{uuid}/request")
            assert payload.status_code == 200, payload.text
            validate_openai_request(payload.json())
            ready = await http.get("/readyz")
            assert ready.status_code == 503, ready.text
            assert ready.json()["checks"]["context_dir"] == "error: not writable"
            refused = await http.post(
                f"/tasks/{uuid}/messages", json={"role": "user", "content": "refused"}
            )
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"]["code"] == "storage_unavailable"
            assert str(srv.context_dir) not in refused.text
        after = await http.post(
            f"/tasks/{uuid}/messages", json={"role": "user", "content": "after"}
        )
        assert after.status_code == 201, after.text
        history = await all_messages(http, uuid)
        assert_seqs_contiguous(history)
        assert [m["content"] for m in history][1:] == [*texts, "after"]


def wal_bytes(wal: Path) -> int:
    """The size of SQLite's write-ahead log (none: 0; the last connection to close removes it)."""
    return wal.stat().st_size if wal.exists() else 0
