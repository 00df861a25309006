"""Small file work runs on the event loop while it is quick there, in a worker thread when the
caller keeps it off the loop, and in worker threads for a while after it was slow: a stall, or
a disk gone slow, must not keep blocking every request of the process."""

import gc
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from app.storage.file_work import (
    AGAIN_WITHIN_S,
    FIRST_BACKOFF_S,
    MAX_BACKOFF_S,
    SCHEDSTAT,
    BusyClock,
    FileWork,
    NotQuick,
    RanOn,
)

LIMIT_S = 0.001


class Clock:
    """Time that passes only when a test says so (work "takes" what it adds): wall time
    (``now``), and the time the thread that runs the work ran or was ready to run
    (``spent``)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.spent = 0.0

    def __call__(self) -> float:
        return self.now

    def busy(self) -> float:
        return self.spent


def file_work(
    limit_s: float, clock: Clock, on_run: Callable[[RanOn], None] | None = None
) -> FileWork:
    return FileWork(limit_s, "appends", on_run=on_run, clock=clock, busy_clock=clock.busy)


def taking(clock: Clock, seconds: float, *, busy: bool = False) -> threading.Thread:
    """Work that takes ``seconds`` (waiting for the disk, or ``busy``: computing, or waiting
    for a CPU) and tells which thread ran it."""
    clock.now += seconds
    if busy:
        clock.spent += seconds
    return threading.current_thread()


async def runs_on_the_loop(work: FileWork, clock: Clock, seconds: float = 0.0002) -> bool:
    """Runs work of ``seconds`` that may block the loop; whether it ran there."""
    ran_on = await work.run(lambda: taking(clock, seconds), may_block_loop=True)
    return ran_on is threading.current_thread()


async def test_quick_work_runs_on_the_loop_and_says_so() -> None:
    clock, runs = Clock(), list[RanOn]()
    work = file_work(LIMIT_S, clock, runs.append)
    for _ in range(3):
        assert await runs_on_the_loop(work, clock)
    assert runs == ["event_loop"] * 3


async def test_only_the_works_waits_count_not_its_computing_nor_its_wait_for_a_cpu() -> None:
    """Work that computes for several limits blocks the loop no more than it would hold the
    interpreter's lock in a thread, and a process that waits for a CPU waits as long in a
    thread: such work stays on the loop. The same time spent waiting for the disk does
    not."""
    clock = Clock()
    work = file_work(LIMIT_S, clock)
    for _ in range(50):
        ran_on = await work.run(lambda: taking(clock, 3 * LIMIT_S, busy=True), may_block_loop=True)
        assert ran_on is threading.current_thread()
    assert work.on_loop_now()
    for _ in range(10):
        await runs_on_the_loop(work, clock, seconds=3 * LIMIT_S)
    assert not work.on_loop_now()


async def test_work_the_caller_keeps_off_the_loop_runs_in_a_worker_thread() -> None:
    runs = list[RanOn]()
    work = FileWork(LIMIT_S, "appends", on_run=runs.append, clock=Clock())
    ran_on = await work.run(threading.current_thread, may_block_loop=False)
    assert ran_on is not threading.current_thread()
    assert runs == ["worker_thread"]


async def test_a_limit_of_zero_keeps_all_work_in_worker_threads() -> None:
    work = FileWork(0, "appends", clock=Clock())
    assert not work.on_loop_now()
    ran_on = await work.run(threading.current_thread, may_block_loop=True)
    assert ran_on is not threading.current_thread()


async def test_a_stall_sends_work_to_threads_for_a_second_then_back_to_the_loop() -> None:
    clock = Clock()
    work = file_work(LIMIT_S, clock)
    assert await runs_on_the_loop(work, clock)
    assert await runs_on_the_loop(work, clock, seconds=0.05)  # ran there, and stalled it
    assert not work.on_loop_now()
    assert not await runs_on_the_loop(work, clock)
    clock.now += FIRST_BACKOFF_S - 0.01
    assert not await runs_on_the_loop(work, clock)
    clock.now += 0.02
    assert await runs_on_the_loop(work, clock)
    assert work.on_loop_now()


async def test_a_rare_slow_run_keeps_the_loop_and_slow_runs_in_a_row_leave_it() -> None:
    """A run of three limits (one write the disk was slow to take) changes little; a disk whose work
    now takes three limits every time is off the loop after a few runs."""
    clock = Clock()
    work = file_work(LIMIT_S, clock)
    for _ in range(20):
        assert await runs_on_the_loop(work, clock)
    assert await runs_on_the_loop(work, clock, seconds=3 * LIMIT_S)
    assert work.on_loop_now()
    slow_runs = 0
    while work.on_loop_now():
        assert await runs_on_the_loop(work, clock, seconds=3 * LIMIT_S)
        slow_runs += 1
    assert 2 <= slow_runs <= 10


async def test_stalls_close_together_keep_work_in_threads_longer_up_to_a_cap() -> None:
    clock = Clock()
    work = file_work(LIMIT_S, clock)
    expected = FIRST_BACKOFF_S
    for _ in range(10):
        assert await runs_on_the_loop(work, clock, seconds=0.05)
        stalled_at = clock.now
        clock.now = stalled_at + expected - 0.001
        assert not work.on_loop_now()
        clock.now = stalled_at + expected
        assert work.on_loop_now()
        expected = min(expected * 2, MAX_BACKOFF_S)
    assert expected == MAX_BACKOFF_S


async def test_stalls_now_and_then_each_send_work_to_threads_for_a_second() -> None:
    """A stall well after the work came back to the loop is not a disk still slow."""
    clock = Clock()
    work = file_work(LIMIT_S, clock)
    for _ in range(5):
        assert await runs_on_the_loop(work, clock, seconds=0.05)
        clock.now += FIRST_BACKOFF_S
        assert work.on_loop_now()
        clock.now += AGAIN_WITHIN_S + 1
    for backoff in (1, 2, 4):  # stalls on each return: longer each time
        await runs_on_the_loop(work, clock, seconds=0.05)
        stalled_at = clock.now
        clock.now = stalled_at + backoff - 0.001
        assert not work.on_loop_now()
        clock.now = stalled_at + backoff
        assert work.on_loop_now()
    clock.now += AGAIN_WITHIN_S + 1
    await runs_on_the_loop(work, clock, seconds=0.05)
    clock.now += FIRST_BACKOFF_S
    assert work.on_loop_now()


async def test_an_error_of_the_work_is_raised_and_its_time_still_counts() -> None:
    clock = Clock()
    work = file_work(LIMIT_S, clock)

    def failing() -> None:
        clock.now += 0.05
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        await work.run(failing, may_block_loop=True)
    assert not work.on_loop_now()
    with pytest.raises(OSError, match="No space left"):
        await work.run(failing, may_block_loop=True)  # now in a worker thread, the same error


async def test_leaving_the_loop_is_logged_with_the_time_it_took(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    work = file_work(LIMIT_S, clock)
    with caplog.at_level(logging.INFO, logger="app.storage.file_work"):
        await runs_on_the_loop(work, clock, seconds=0.05)
    [record] = caplog.records
    assert "on average (limit 1.00)" in record.getMessage()
    assert record.getMessage().startswith("appends on the event loop waited")
    assert "in worker threads for 1 s" in record.getMessage()


def _quick_or_not(
    stop_quickly: bool,
) -> tuple[list[tuple[bool, threading.Thread]], Callable[[bool], str]]:
    """Work that records how it was asked to run and where; its quick run raises NotQuick
    if ``stop_quickly``."""
    calls: list[tuple[bool, threading.Thread]] = []

    def work(quick: bool) -> str:
        calls.append((quick, threading.current_thread()))
        if quick and stop_quickly:
            raise NotQuick("would block")
        return "done"

    return calls, work


async def test_work_that_may_be_quick_runs_on_the_loop_as_quick() -> None:
    runs = list[RanOn]()
    work = FileWork(LIMIT_S, "reads", on_run=runs.append, clock=Clock())
    calls, quick_or_not = _quick_or_not(stop_quickly=False)
    assert await work.run_quickly(quick_or_not) == "done"
    assert calls == [(True, threading.current_thread())]
    assert runs == ["event_loop"]


async def test_work_that_finds_it_would_block_is_done_again_in_a_worker_thread() -> None:
    runs = list[RanOn]()
    work = FileWork(LIMIT_S, "reads", on_run=runs.append, clock=Clock())
    calls, quick_or_not = _quick_or_not(stop_quickly=True)
    assert await work.run_quickly(quick_or_not) == "done"
    assert [quick for quick, _ in calls] == [True, False]
    assert calls[0][1] is threading.current_thread()
    assert calls[1][1] is not threading.current_thread()
    assert runs == ["event_loop", "worker_thread"]


@pytest.mark.parametrize(("limit_s", "may_be_quick"), [(0, True), (LIMIT_S, False)])
async def test_work_known_not_to_be_quick_goes_straight_to_a_worker_thread(
    limit_s: float, may_be_quick: bool
) -> None:
    """The loop closed (a limit of 0 here), or the caller knows the work is large."""
    runs = list[RanOn]()
    work = FileWork(limit_s, "reads", on_run=runs.append, clock=Clock())
    calls, quick_or_not = _quick_or_not(stop_quickly=False)
    assert await work.run_quickly(quick_or_not, may_be_quick=may_be_quick) == "done"
    assert [quick for quick, _ in calls] == [False]
    assert runs == ["worker_thread"]


needs_schedstat = pytest.mark.skipif(
    not os.path.exists(SCHEDSTAT) or not hasattr(os, "sched_setaffinity"),
    reason="the kernel tells no thread's time in the run queue",
)


@contextmanager
def sharing_a_cpu_with_a_spinning_process() -> Iterator[None]:
    """This thread and a process that never sleeps, both on one CPU: each gets about half."""
    cpu = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    spinner = subprocess.Popen(
        [sys.executable, "-c", "print('spinning', flush=True)\nwhile True: pass"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        os.sched_setaffinity(spinner.pid, {cpu})
        os.sched_setaffinity(0, {cpu})  # 0: the calling thread
        assert spinner.stdout is not None
        assert spinner.stdout.readline() == "spinning\n"
        yield
    finally:
        os.sched_setaffinity(0, before)
        spinner.kill()
        spinner.wait()


def spin(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pass


@needs_schedstat
def test_the_busy_clock_counts_the_wait_for_a_cpu_but_not_a_sleep() -> None:
    clock = BusyClock()
    with sharing_a_cpu_with_a_spinning_process():
        started, busy, cpu = time.monotonic(), clock(), time.thread_time()
        spin(0.2)
        wall = time.monotonic() - started
        busy, cpu = clock() - busy, time.thread_time() - cpu
        assert cpu < 0.8 * wall  # the spinner had the CPU part of the time
        assert busy > 0.9 * wall  # ... and this thread was ready to run meanwhile

        busy = clock()
        time.sleep(0.1)
        assert clock() - busy < 0.05  # asleep: neither running nor ready to


def open_schedstat_files() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with suppress(OSError):  # closed meanwhile
            count += os.readlink(f"/proc/self/fd/{fd}").endswith("/schedstat")
    return count


@needs_schedstat
def test_each_thread_reads_its_own_busy_time_and_its_file_closes_with_it() -> None:
    clock = BusyClock()
    spin(0.05)
    mine = clock()
    gc.collect()  # the clocks of earlier tests' apps, and their files, gone first
    files = open_schedstat_files()
    theirs: list[float] = []
    thread = threading.Thread(target=lambda: theirs.append(clock()))
    thread.start()
    thread.join()
    assert mine >= 0.05
    assert theirs[0] < 0.04  # a new thread has hardly run
    gc.collect()
    assert open_schedstat_files() == files


def test_where_the_kernel_does_not_tell_the_busy_clock_is_the_threads_cpu_time() -> None:
    clock = BusyClock(path="/nonexistent/schedstat")
    spin(0.02)
    assert abs(clock() - time.thread_time()) < 0.005


def test_the_busy_clock_reads_the_file_it_is_given(tmp_path: Path) -> None:
    stat = tmp_path / "schedstat"
    stat.write_text("1000000000 500000000 7\n")  # 1 s on a CPU, 0.5 s in the run queue
    assert BusyClock(path=str(stat))() == 1.5
