"""Where small blocking file work runs: on the event loop while such work has waited little
there, in a worker thread otherwise.

A worker thread costs more than the work when the work is a few syscalls and a little Python:
the hand-off to the thread and back, and above all the interpreter's lock, which the thread
and the event loop pass to each other at every syscall while other requests keep the loop
busy. (Measured in-process with 8 agents appending to their own tasks, fsync on: 0.8 ms of CPU
per append through a thread, 0.4 ms on the loop.) On a disk whose fsync takes a fraction of a
millisecond the loop can afford to wait for it; on a slow or shared one it cannot, and the
work goes back to threads, where fsyncs also overlap.

What is followed is the work's wait on the loop: its wall time less the time the loop's thread
ran in it or was ready to run (:class:`BusyClock`), not its whole duration. The Python part of
the work holds the interpreter's lock in a worker thread as much as on the loop, and a slower
CPU would otherwise send small appends to threads where they only cost more; and a process
preempted (the machine busy) waits as long for a CPU in a worker thread as on the loop.
"""

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from functools import partial
from typing import Literal, TypeVar

from app.storage.threads import finish_in_thread

T = TypeVar("T")
RanOn = Literal["event_loop", "worker_thread"]

log = logging.getLogger(__name__)

# The work's wait on the loop is followed as a moving average, which starts at half the
# limit: a rare slow run (one write the disk was slow to take) moves it little; one stall of
# ~6-8 limits, or a few runs of a disk gone slow, move it over. The stall itself has blocked
# the loop by then.
SMOOTHING = 0.1
# Once the average is over the limit: threads for this long, then the loop again with the
# average at its start. Over it again within AGAIN_WITHIN_S of that return (the disk is still
# slow): twice as long, up to the cap. Later (a stall now and then): the first time again.
FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 60.0
AGAIN_WITHIN_S = 10.0


# Linux: the calling thread's time on a CPU and in the run queue, in ns, and its time slices.
SCHEDSTAT = "/proc/thread-self/schedstat"


class _Schedstat:
    """One thread's schedstat file, kept open while the thread lives."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        weakref.finalize(self, os.close, self.fd)  # at the thread's end, or the process's

    def busy_s(self) -> float:
        ran_ns, queued_ns, _ = os.pread(self.fd, 64, 0).split()
        return (int(ran_ns) + int(queued_ns)) / 1e9


class BusyClock:
    """Seconds the calling thread has run or been ready to run: its CPU time plus its time in
    the kernel's run queue, waiting for a CPU while other threads or processes had them. What
    is left of a span's wall time is what the thread waited for (a disk, a lock). Where the
    kernel does not say (not Linux), the thread's CPU time alone. ``path``: the file each
    thread reads; the kernel's own unless a test stands in for it."""

    def __init__(self, path: str = SCHEDSTAT) -> None:
        self._path = path
        self._threads = threading.local()
        try:
            os.close(os.open(path, os.O_RDONLY))
            self._told = True
        except OSError:
            self._told = False

    def __call__(self) -> float:
        if not self._told:
            return time.thread_time()
        stat: _Schedstat | None = getattr(self._threads, "stat", None)
        if stat is None:
            stat = self._threads.stat = _Schedstat(self._path)
        return stat.busy_s()


class NotQuick(Exception):
    """Work begun on the event loop found it would wait, or take longer than the loop allows
    (a lock held, much to parse, a directory to move): to be done in a worker thread."""


class FileWork:
    """Runs blocking file work on the event loop (when the caller says it may and recent work
    there waited little) or in a worker thread. ``limit_s`` 0: always a worker thread. ``name``
    says what work it is in the log; ``on_run`` learns where each run went (the service counts
    them in its metrics). ``clock`` tells wall time, ``busy_clock`` the time the calling
    thread ran or was ready to run (:class:`BusyClock`)."""

    def __init__(
        self,
        limit_s: float,
        name: str,
        *,
        on_run: Callable[[RanOn], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        busy_clock: Callable[[], float] | None = None,
    ) -> None:
        self.limit_s = limit_s
        self.name = name
        self._clock = clock
        self._busy_clock = busy_clock or BusyClock()
        self._on_run = on_run
        self._threads_until = 0.0
        self._backoff_s = FIRST_BACKOFF_S
        self._average_s = limit_s / 2

    def on_loop_now(self) -> bool:
        """Whether work the caller may run on the loop would run there now."""
        return self.limit_s > 0 and self._clock() >= self._threads_until

    async def run(self, work: Callable[[], T], *, may_block_loop: bool) -> T:
        """``work()``: on the loop if ``may_block_loop`` (the caller knows it is a few
        syscalls on small data, nothing that waits for a lock or a network) and
        :meth:`on_loop_now`; in a worker thread otherwise."""
        if not (may_block_loop and self.on_loop_now()):
            self._ran("worker_thread")
            return await finish_in_thread(work)
        self._ran("event_loop")
        started, busy_started = self._clock(), self._busy_clock()
        try:
            return work()
        finally:
            self._waited((self._clock() - started) - (self._busy_clock() - busy_started))

    async def run_quickly(self, work: Callable[[bool], T], *, may_be_quick: bool = True) -> T:
        """``work(True)`` on the loop while work there has waited little (and the caller does
        not know it is not: ``may_be_quick``); ``work(False)`` in a worker thread otherwise,
        and when the quick one raised :class:`NotQuick` (which it does as soon as it finds it
        would block, having changed nothing)."""
        if may_be_quick and self.on_loop_now():
            try:
                return await self.run(partial(work, True), may_block_loop=True)
            except NotQuick:
                pass
        return await self.run(partial(work, False), may_block_loop=False)

    def _ran(self, where: RanOn) -> None:
        if self._on_run is not None:
            self._on_run(where)

    def _waited(self, seconds: float) -> None:
        self._average_s += SMOOTHING * (seconds - self._average_s)
        if self._average_s <= self.limit_s:
            return
        now = self._clock()
        if now - self._threads_until > AGAIN_WITHIN_S:
            self._backoff_s = FIRST_BACKOFF_S
        log.info(
            "%s on the event loop waited %.2f ms on average (limit %.2f): "
            "in worker threads for %.0f s",
            self.name,
            self._average_s * 1000,
            self.limit_s * 1000,
            self._backoff_s,
        )
        self._threads_until = now + self._backoff_s
        self._backoff_s = min(self._backoff_s * 2, MAX_BACKOFF_S)
        self._average_s = self.limit_s / 2
