"""Work done in one of the service's CPU processes where it can be, in a worker thread where it
cannot: no processes, a file no longer at its path (read from the open one here instead)."""

import asyncio
import multiprocessing
import os
import threading
import time
from pathlib import Path

from app.compaction.indexing import PickledEntries, ToIndex, entries_at
from app.context.files import ContextFiles, ViewToPrepare, prepared_path, prepared_view
from app.context.processes import in_a_process
from app.context.records import HeadState
from app.context.shapes import Marker
from app.summaries.processes import SummaryProcesses
from tests.support.processes import LOADED, heavy_modules
from tests.support.waits import until


def size_at(path: Path) -> tuple[int, int]:
    """The file's size, and the process that read it."""
    return path.stat().st_size, os.getpid()


def read_here(handle_path: Path) -> tuple[int, int]:
    assert threading.current_thread() is not threading.main_thread()
    return handle_path.stat().st_size, os.getpid()


def file_of(tmp_path: Path, size: int) -> Path:
    path = tmp_path / "messages.jsonl"
    path.write_bytes(b"x" * size)
    return path


async def size_read(processes: SummaryProcesses | None, path: Path) -> tuple[int, int]:
    """The file's size, read in a process by its path or here from the "open" file."""
    return await in_a_process(processes, size_at, path, lambda: read_here(path))


async def test_the_work_runs_in_a_process_once_it_is_up(
    processes: SummaryProcesses, tmp_path: Path
) -> None:
    """Not before: starting one takes a second or so, which a condense a payload waits for
    cannot spare (the first digest starts it)."""
    path = file_of(tmp_path, 10)
    assert await size_read(processes, path) == (10, os.getpid())
    assert not multiprocessing.active_children()
    assert await processes.run(len, "up") == 2
    size, pid = await size_read(processes, path)
    assert size == 10
    assert pid != os.getpid()


async def test_a_file_not_at_its_path_is_read_here(
    processes: SummaryProcesses, tmp_path: Path
) -> None:
    """The task's directory moved (a status change) after the caller opened the file."""
    moved = tmp_path / "moved.jsonl"
    moved.write_bytes(b"x" * 7)
    await processes.run(len, "up")
    size, pid = await in_a_process(
        processes, size_at, tmp_path / "gone.jsonl", lambda: read_here(moved)
    )
    assert (size, pid) == (7, os.getpid())


async def test_while_every_process_is_busy_the_work_runs_here(
    processes: SummaryProcesses, tmp_path: Path
) -> None:
    """Another condense's digest takes seconds: the work does not queue behind it."""
    path = file_of(tmp_path, 5)
    await processes.run(len, "up")
    digest = asyncio.create_task(processes.run(time.sleep, 1.0))
    await until(lambda: not processes.available)
    assert await size_read(processes, path) == (5, os.getpid())
    assert not digest.done()
    await digest


async def test_without_processes_the_work_runs_in_a_thread(tmp_path: Path) -> None:
    assert await size_read(None, file_of(tmp_path, 3)) == (3, os.getpid())


async def test_a_condenses_indexing_and_rendering_load_nothing_heavy(
    processes: SummaryProcesses, tmp_path: Path
) -> None:
    """What a condense hands a process besides its digest: the process stays as small."""
    (tmp_path / "messages.jsonl").touch()
    (tmp_path / "current.jsonl").touch()
    files = ContextFiles(tmp_path)
    indexed = await processes.run(entries_at, ToIndex(files.messages, 0, "openai"))
    assert indexed == PickledEntries([])
    marker: Marker = {"role": "user", "content": "[Summary]", "marker": "condense", "tokens": 3}
    job = ViewToPrepare(
        files, HeadState(), {**marker, "hides": [1, 1]}, False, prepared_path(files)
    )
    prepared = await processes.run(prepared_view, job)
    prepared.discard()
    loaded = await processes.run(eval, LOADED)
    assert "app.compaction.indexing" in loaded
    assert heavy_modules(loaded) == []
