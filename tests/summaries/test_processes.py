"""A condense's extractive digest in a summariser process (app/summaries/processes.py, and
ExtractiveSummaries in app/summaries/summarizer.py): the summary a worker thread makes, from the
file the process reads itself; a process that dies fails its call and the next call gets a new
one; closing the pool leaves no process behind."""

import asyncio
import json
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from app.context.files import RecordSpan
from app.planning.items import ChecklistItem
from app.summaries.limited import SummaryLimit
from app.summaries.processes import SummaryProcesses, SummaryProcessLost
from app.summaries.summarizer import ExtractiveSummaries, SummaryRequest
from app.tokens.counters import counter_for
from tests.support.corpus import corpus_messages
from tests.support.paths import REPO
from tests.support.processes import LOADED, heavy_modules
from tests.support.records import build_batch, lines_of
from tests.support.waits import until

pytestmark = pytest.mark.database_agnostic

TRAJECTORY = "claude-code__spotter_ae4a77f8.jsonl"  # 466 messages, half of them tool results
SPAN_MESSAGES = 400
PLAN = (
    ChecklistItem("1", "reproduce the failure", "done"),
    ChecklistItem("2", "fix the parser", "active"),
)


@pytest.fixture
def span(tmp_path: Path) -> Iterator[RecordSpan]:
    """A real trajectory's records in a messages.jsonl, open, as a condense hands them over:
    all but the first and the last few."""
    messages = corpus_messages(TRAJECTORY)[:SPAN_MESSAGES]
    path = tmp_path / "task" / "messages.jsonl"
    path.parent.mkdir()
    path.write_bytes(lines_of(build_batch(1, messages)))
    with path.open("rb") as handle:
        yield RecordSpan(handle, path, path.stat().st_size, 2, len(messages) - 5)


def request(tokens: int, counter: str) -> SummaryRequest:
    kept = {"role": "user", "content": "Fix the parser: the test suite fails on nested lists."}
    limit = SummaryLimit(tokens, counter_for("", counter))
    return SummaryRequest(prompt="", kept=kept, limit=limit, plan=PLAN)


@pytest.mark.parametrize("counter", ["o200k_base", "heuristic"])
@pytest.mark.parametrize("tokens", [1500, 64])  # 64: about the smallest a limit gets
async def test_a_process_digests_a_span_as_a_worker_thread_does(
    span: RecordSpan, processes: SummaryProcesses, tokens: int, counter: str
) -> None:
    in_thread = await ExtractiveSummaries().summarize(span, request(tokens, counter))
    pooled = await ExtractiveSummaries(processes).summarize(span, request(tokens, counter))
    assert multiprocessing.active_children(), "the digest ran in a process of the pool"
    assert in_thread.strip()
    assert pooled == in_thread


async def test_a_process_imports_only_what_the_digest_needs(
    span: RecordSpan, processes: SummaryProcesses
) -> None:
    """A summariser process starts quickly and stays small: digesting a span loads neither
    the web framework, nor the database, nor any LLM client."""
    await ExtractiveSummaries(processes).summarize(span, request(1500, "o200k_base"))
    loaded = await processes.run(eval, LOADED)
    assert "app.summaries.limited" in loaded
    assert heavy_modules(loaded) == []


# A service run as `context-service serve` is, from the console script pip writes (its first
# two lines): a spawned process runs that script again as its main module. Prints the modules
# its summariser process holds.
CONSOLE_SCRIPT = f"""
import sys
from app.cli import main
if __name__ == "__main__":
    import asyncio, json
    from app.summaries.processes import SummaryProcesses

    async def loaded():
        pool = SummaryProcesses(1)
        try:
            return await pool.run(eval, {LOADED!r})
        finally:
            await pool.close()

    print(json.dumps(asyncio.run(loaded())))
"""


async def test_a_process_of_the_console_script_imports_no_command(tmp_path: Path) -> None:
    script = tmp_path / "context-service"
    script.write_text(CONSOLE_SCRIPT)
    service = await asyncio.create_subprocess_exec(
        sys.executable, str(script), stdout=asyncio.subprocess.PIPE, cwd=REPO
    )
    output, _ = await service.communicate()
    assert service.returncode == 0
    loaded = json.loads(output)
    assert "app.cli" in loaded  # the script ran again as the process's main
    assert heavy_modules(loaded) == []


async def test_a_span_whose_directory_moved_is_digested_from_the_open_file(
    span: RecordSpan, processes: SummaryProcesses
) -> None:
    """A status change moves a task's directory: the path the process would read is gone, the
    open file is read here instead."""
    in_thread = await ExtractiveSummaries().summarize(span, request(1500, "heuristic"))
    span.path.parent.rename(span.path.parent.with_name("moved"))
    pooled = await ExtractiveSummaries(processes).summarize(span, request(1500, "heuristic"))
    assert pooled == in_thread


async def test_a_killed_process_fails_its_call_and_the_next_call_gets_a_new_one(
    processes: SummaryProcesses,
) -> None:
    call = asyncio.create_task(processes.run(time.sleep, 60.0))
    await until(lambda: bool(multiprocessing.active_children()))
    (child,) = multiprocessing.active_children()
    assert child.pid is not None
    os.kill(child.pid, signal.SIGKILL)
    with pytest.raises(SummaryProcessLost):
        await call
    assert await processes.run(len, "abc") == 3
    assert child.pid not in [p.pid for p in multiprocessing.active_children()]


async def test_closing_the_pool_ends_its_processes() -> None:
    pool = SummaryProcesses(2)
    assert not multiprocessing.active_children(), "nothing is started before the first call"
    assert await pool.run(len, "abc") == 3
    pids = [child.pid for child in multiprocessing.active_children()]
    assert pids
    await pool.close()
    assert not multiprocessing.active_children()
    assert not [pid for pid in pids if pid is not None and psutil.pid_exists(pid)]


async def test_the_processes_run_at_a_lower_priority() -> None:
    pool = SummaryProcesses(1, niceness=5)
    try:
        assert await pool.run(os.nice, 0) == min(19, os.nice(0) + 5)
    finally:
        await pool.close()


# A service that starts a summariser process, writes its pid to the file argv[1] names, then is
# killed with -9.
KILLED_SERVICE = """
import asyncio, multiprocessing, os, pathlib, signal, sys
from app.summaries.processes import SummaryProcesses

async def main():
    await SummaryProcesses(1).run(len, "abc")
    (child,) = multiprocessing.active_children()
    pathlib.Path(sys.argv[1]).write_text(str(child.pid))
    os.kill(os.getpid(), signal.SIGKILL)

asyncio.run(main())
"""


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def test_the_processes_end_when_the_service_is_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    service = await asyncio.create_subprocess_exec(
        sys.executable, "-c", KILLED_SERVICE, str(pid_file), stdout=asyncio.subprocess.DEVNULL
    )
    assert await service.wait() == -signal.SIGKILL
    pid = int(pid_file.read_text())
    await until(lambda: gone(pid))
