"""``scripts/test-postgres run COMMAND`` (what ``make test-postgres`` runs): COMMAND gets the
server's URL and its exit status is the script's; a server the script started is stopped
afterwards (it was left running), one already running is used and left running."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.server import free_port

SCRIPT = REPO / "scripts" / "test-postgres"

pytestmark = pytest.mark.skipif(
    not list(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl")) or shutil.which("runuser") is None,
    reason="needs Debian's PostgreSQL (scripts/test-postgres installs it)",
)


def script(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def listening(port: int) -> bool:
    bindir = sorted(Path("/usr/lib/postgresql").glob("*/bin"))[-1]
    ready = [str(bindir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port)]
    return subprocess.run(ready, check=False).returncode == 0


def test_run_stops_the_server_it_started_and_leaves_a_running_one() -> None:
    port = free_port()  # the data directory is the script's default for it, under /tmp
    env = {k: v for k, v in os.environ.items() if k != "PG_TEST_DATA"} | {"PG_TEST_PORT": str(port)}
    url = f"postgresql+asyncpg://postgres@127.0.0.1:{port}/postgres"
    try:
        ran = script(env, "run", "sh", "-c", 'echo "$TEST_DATABASE_URL"; exit 3')
        assert ran.returncode == 3, ran.stderr
        assert ran.stdout.strip() == url
        assert not listening(port)  # started by the run, stopped by it

        started = script(env)
        assert started.returncode == 0, started.stderr
        ran = script(env, "run", "true")
        assert ran.returncode == 0, ran.stderr
        assert listening(port)  # someone else's: left running
    finally:
        script(env, "stop")
        shutil.rmtree(f"/tmp/context-service-pg-{port}", ignore_errors=True)
    assert not listening(port)
