"""Real uvicorn processes on 127.0.0.1 for the end-to-end tests, and checks shared by them.

A :class:`ServerPool` (the ``servers`` fixture of tests/conftest.py) starts servers that
share one CONTEXT_DIR. Each :class:`Server` runs ``python -m uvicorn app.main:app`` from the
repository root in its own process group, is ready when ``GET /readyz`` answers 200 (within a
bounded wait), and can be stopped gracefully, killed with SIGKILL, or restarted on the same
CONTEXT_DIR. With ``cli`` it runs ``context-service serve`` instead, as in production: the
connection limits of the settings applied, and uvicorn's access log on. The fixture's teardown
stops every process it started, also when the test failed, and prints the tail of each server's
log (pytest shows it for failed tests).
"""

import contextlib
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil

from tests.support.paths import REPO
from tests.support.postgres import PostgresDatabases
from tests.support.settings import service_env

READY_TIMEOUT_S = 45.0
STOP_TIMEOUT_S = 15.0
KILL_TIMEOUT_S = 10.0
# Under uvicorn's keep-alive timeout (5 s): with httpx's default (also 5 s) a client may send a
# request on a pooled connection the server is closing that moment, and read no answer.
KEEPALIVE_EXPIRY_S = 2.0


def client_limits(connections: int) -> httpx.Limits:
    """Limits for a client of many connections to a server of these tests."""
    return httpx.Limits(
        max_connections=connections,
        max_keepalive_connections=connections,
        keepalive_expiry=KEEPALIVE_EXPIRY_S,
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ServerError(RuntimeError):
    """A server process did not start or stop as expected."""


class Server:
    """One uvicorn process (a supervisor and its workers with ``workers`` > 1)."""

    def __init__(
        self,
        context_dir: Path,
        log_path: Path,
        *,
        workers: int = 1,
        env: dict[str, str] | None = None,
        file_size_limit: int | None = None,
        obey_permissions: bool = False,
        cli: bool = False,
    ) -> None:
        self.context_dir = context_dir
        self.cli = cli
        self.log_path = log_path
        self.workers = workers
        self.extra_env = dict(env or {})
        # RLIMIT_FSIZE for the process: a write past it fails with EFBIG, as on a full disk.
        self.file_size_limit = file_size_limit
        # Without CAP_DAC_OVERRIDE even root obeys file modes (a read-only file stays so).
        self.obey_permissions = obey_permissions
        self.port = free_port()
        self._proc: subprocess.Popen[bytes] | None = None
        self._family: list[psutil.Process] = []
        self.starts = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise ServerError("the server is not running")
        return self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # -- start --------------------------------------------------------------------------

    def start(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Start the process and wait until it (all its workers) is ready; bounded."""
        if self.running:
            raise ServerError("the server is already running")
        for attempt in range(3):
            log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            self._spawn()
            try:
                self._wait_ready(log_offset, timeout)
                return
            except ServerError:
                in_use = "address already in use" in self.log_text(log_offset).lower()
                self._terminate_family(signal.SIGKILL)
                if not in_use or attempt == 2:
                    raise
                self.port = free_port()  # someone took the port meanwhile: take another

    def _spawn(self) -> None:
        env = service_env()
        env.update({"CONTEXT_DIR": str(self.context_dir), "PYTHONUNBUFFERED": "1"})
        env.update(self.extra_env)
        if self.cli:
            command = [str(Path(sys.executable).parent / "context-service"), "serve"]
        else:
            command = [sys.executable, "-m", "uvicorn", "app.main:app", "--no-access-log"]
        if self.obey_permissions:
            capabilities = "-dac_override,-dac_read_search"
            command = ["setpriv", "--bounding-set", capabilities, "--", *command]
        command += ["--host", "127.0.0.1", "--port", str(self.port)]
        if self.workers > 1:
            command += ["--workers", str(self.workers)]
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"=== start {self.starts} on port {self.port} ===\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                command,
                cwd=REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: workers die with it
                preexec_fn=self._limit_file_size if self.file_size_limit else None,
            )
        self._family = [psutil.Process(self._proc.pid)]

    def _limit_file_size(self) -> None:
        # In the child, before exec (Python ignores SIGXFSZ: the write just fails).
        assert self.file_size_limit is not None
        resource.setrlimit(resource.RLIMIT_FSIZE, (self.file_size_limit, self.file_size_limit))

    def _wait_ready(self, log_offset: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with httpx.Client(base_url=self.base_url, timeout=2.0) as http:
            while time.monotonic() < deadline:
                if not self.running:
                    raise ServerError(f"the server exited while starting:\n{self.log_tail()}")
                try:
                    ready = http.get("/readyz").status_code == 200
                except httpx.TransportError:
                    ready = False
                started = self.log_text(log_offset).count("Application startup complete")
                if ready and started >= self.workers:
                    self._remember_family()
                    return
                time.sleep(0.1)
        raise ServerError(f"the server was not ready within {timeout}s:\n{self.log_tail()}")

    def _remember_family(self) -> None:
        assert self._proc is not None
        try:
            leader = psutil.Process(self._proc.pid)
            self._family = [leader, *leader.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass

    # -- stop ---------------------------------------------------------------------------

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Graceful shutdown (SIGTERM); SIGKILL if it does not exit in time."""
        if self._proc is None:
            return
        self._remember_family()
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout)
        self._terminate_family(signal.SIGKILL)

    def kill(self) -> None:
        """SIGKILL the whole process group at once, as a crash would, and reap it."""
        if self._proc is None:
            return
        self._remember_family()
        if self._proc.poll() is None:
            # The leader is alive (not reaped), so its pid is still its group's id.
            os.killpg(self._proc.pid, signal.SIGKILL)
        self._terminate_family(signal.SIGKILL)

    def restart(self) -> None:
        """Graceful stop, then start again on the same CONTEXT_DIR."""
        self.stop()
        self.start()

    def _terminate_family(self, sig: signal.Signals) -> None:
        """Send ``sig`` to every process of this server still alive, then reap them."""
        for member in self._family:
            try:
                if member.is_running():  # also checks the pid was not reused
                    member.send_signal(sig)
            except psutil.NoSuchProcess:
                pass
        if self._proc is not None:
            try:
                self._proc.wait(KILL_TIMEOUT_S)
            except subprocess.TimeoutExpired as exc:
                raise ServerError(f"process {self._proc.pid} survived {sig.name}") from exc
        psutil.wait_procs(self._family, timeout=KILL_TIMEOUT_S)
        self._proc = None
        self._family = []

    # -- inspection ---------------------------------------------------------------------

    def worker_pids(self) -> list[int]:
        """The worker processes of a ``--workers N`` supervisor (none for a single process)."""
        children = psutil.Process(self.pid).children()
        return [c.pid for c in children if "spawn_main" in " ".join(c.cmdline())]

    def rss(self) -> int:
        """Resident memory of the server process (single-worker servers)."""
        return int(psutil.Process(self.pid).memory_info().rss)

    def log_text(self, offset: int = 0) -> str:
        if not self.log_path.exists():
            return ""
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


class ServerPool:
    """Servers sharing one CONTEXT_DIR; :meth:`close` ends all of them."""

    def __init__(self, root: Path) -> None:
        self.context_dir = root / "contexts"
        self.log_dir = root / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.servers: list[Server] = []

    def start(
        self,
        *,
        workers: int = 1,
        env: dict[str, str] | None = None,
        file_size_limit: int | None = None,
        obey_permissions: bool = False,
        cli: bool = False,
    ) -> Server:
        server = Server(
            self.context_dir,
            self.log_dir / f"server{len(self.servers)}.log",
            workers=workers,
            env=env,
            file_size_limit=file_size_limit,
            obey_permissions=obey_permissions,
            cli=cli,
        )
        self.servers.append(server)
        server.start()
        return server

    def close(self) -> None:
        errors = []
        for server in self.servers:
            try:
                server.stop()
            except Exception as exc:  # keep ending the others
                errors.append(exc)
            # Shown by pytest only when the test failed.
            print(f"--- {server.log_path.name} (port {server.port}) ---\n{server.log_tail()}")
        if errors:
            raise errors[0]


@contextlib.contextmanager
def server_of_its_own(
    root: Path, postgres: PostgresDatabases | None, env: dict[str, str]
) -> Iterator[Server]:
    """A server on a database of its own, for a module's tests to share: PostgreSQL's when the
    suite runs there, else SQLite in CONTEXT_DIR (DATABASE_URL "": nothing inherited)."""
    database = postgres.create() if postgres is not None else ""
    pool = ServerPool(root)
    try:
        yield pool.start(env={"DATABASE_URL": database} | env)
    finally:
        pool.close()
        if postgres is not None:
            postgres.drop(database)


# -- checks shared by the e2e tests -----------------------------------------------------------


def jsonl_records(path: Path) -> list[dict[str, Any]]:
    """Every line of a JSONL file, parsed; fails on a partial or unparsable line."""
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n"), f"{path.name} ends in a partial line"
    return [json.loads(line) for line in data.splitlines()]


def assert_seqs_contiguous(records: list[dict[str, Any]]) -> None:
    """seq runs 1, 2, ..., N: strictly increasing by one, no gaps, no duplicates."""
    seqs = [r["seq"] for r in records]
    assert seqs == list(range(1, len(seqs) + 1)), f"seqs are not 1..N: {_first_break(seqs)}"


def _first_break(seqs: list[int]) -> str:
    for i, seq in enumerate(seqs, start=1):
        if seq != i:
            return f"position {i} holds seq {seq}"
    return "ok"


def task_dirs(context_dir: Path, uuid: str) -> list[str]:
    """The status directories (running, paused, completed, ...) holding this task."""
    return sorted(p.parent.name for p in context_dir.glob(f"*/{uuid}") if p.is_dir())


# -- the bytes on the wire ------------------------------------------------------------------


def read_until_closed(sock: socket.socket, timeout: float = 10.0) -> bytes:
    """Everything the server sends until it closes the connection (fails if it does not)."""
    sock.settimeout(timeout)
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def status_and_headers(response: bytes) -> tuple[int, dict[str, str]]:
    """The status and the headers (names lower-cased) of a raw HTTP/1.1 response."""
    head = response.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in head[1:])
    return int(head[0].split()[1]), {name.lower(): value for name, value in headers.items()}
