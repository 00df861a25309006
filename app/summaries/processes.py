"""Processes of the service's own that run a condense's CPU work: the extractive digest, and
the indexing and rendering of :mod:`app.context.processes`.

The digest is pure Python: in a worker thread it holds the interpreter's lock for most of a
condense, and every append of the process waits for it at each hand-off. In another process it
costs an append only a share of the CPU, and less at a lower priority (on two cores a process
as busy as the service, at the same priority, alone makes its p99 three or four times longer).
The processes are started by ``spawn`` (a fork of a threaded asyncio process may copy a lock
some thread held), when the first digest is asked for, and are shut down with the service; other
work goes to them only once they are up.
"""

import asyncio
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

from app.context.processes import ProcessLost

log = logging.getLogger(__name__)

Argument = TypeVar("Argument")
Result = TypeVar("Result")

START_METHOD = "spawn"
WATCH_S = 1.0  # how often a process checks that the service that started it is still there


class SummaryProcessLost(ProcessLost):
    """The process computing a summary died before it answered (killed, out of memory)."""


class SummaryProcesses:
    """A pool of ``count`` processes, started at its first call, ``niceness`` below the
    service's priority; one that breaks (a process died) fails the calls it held and is
    replaced at the next call."""

    def __init__(self, count: int, *, niceness: int = 0) -> None:
        self.count = count
        self.niceness = niceness
        self._executor: ProcessPoolExecutor | None = None
        self._calls = 0  # submitted, not yet answered

    @property
    def available(self) -> bool:
        """Whether a process is up and free: a call would neither start one nor queue."""
        return self._executor is not None and self._calls < self.count

    async def run(self, function: Callable[[Argument], Result], argument: Argument) -> Result:
        """``function(argument)`` in one of the processes (both pickled by reference/value)."""
        self._calls += 1
        try:
            return await self._run(function, argument)
        finally:
            self._calls -= 1

    async def _run(self, function: Callable[[Argument], Result], argument: Argument) -> Result:
        executor = self._executor
        if executor is None:
            context = multiprocessing.get_context(START_METHOD)
            executor = self._executor = ProcessPoolExecutor(
                self.count,
                mp_context=context,
                initializer=_started,
                initargs=(self.niceness, os.getpid()),
            )
        try:
            return await asyncio.wrap_future(executor.submit(function, argument))
        except BrokenProcessPool as exc:
            if self._executor is executor:
                self._executor = None
                executor.shutdown(wait=False)  # its processes are dead or exiting already
            log.warning("a summariser process died: %s", exc)
            raise SummaryProcessLost("the summariser's process died before it answered") from exc

    async def close(self) -> None:
        """Shut the processes down (waiting for a digest they are computing)."""
        executor, self._executor = self._executor, None
        if executor is not None:
            await asyncio.to_thread(executor.shutdown, wait=True, cancel_futures=True)


def _started(niceness: int, service: int) -> None:
    """In each process as it starts: its priority, and a watch that ends it once ``service``
    is gone (a service killed with -9 would leave it waiting for work for ever)."""
    os.nice(niceness)
    threading.Thread(target=_end_without, args=(service,), daemon=True).start()


def _end_without(service: int) -> None:
    while os.getppid() == service:
        time.sleep(WATCH_S)
    os._exit(1)
