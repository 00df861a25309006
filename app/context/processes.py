"""Pure-Python work of a compaction done outside the service's interpreter where it can be:
rendering its new current.jsonl, indexing the context to plan it.

In a worker thread of the service, such work holds the interpreter's lock for tens of
milliseconds on a large context, and every append of the process waits for it at each hand-off
to a thread. In one of the service's CPU processes (the summariser's, started by
``app.summaries.processes``) it costs an append only a share of the CPU.
"""

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol, TypeVar

log = logging.getLogger(__name__)

Argument = TypeVar("Argument")
Result = TypeVar("Result")


class ProcessLost(Exception):
    """The process doing the work died before it answered (killed, out of memory)."""


class CpuProcesses(Protocol):
    """Processes of the service's own that run a function of plain data."""

    @property
    def available(self) -> bool:
        """Whether a process is up and free: a call would neither start one (a second or so)
        nor queue behind another's work."""
        ...

    async def run(self, function: Callable[[Argument], Result], argument: Argument) -> Result:
        """``function(argument)`` in one of the processes; ProcessLost if it died."""
        ...


async def in_a_process(
    processes: CpuProcesses | None,
    function: Callable[[Argument], Result],
    argument: Argument,
    here: Callable[[], Result],
) -> Result:
    """``function(argument)`` in one of ``processes``; ``here()`` in a worker thread when none
    is available (not started yet: a start takes a second or so, which a condense the payload
    waits for cannot spare; all busy: another condense's digest takes seconds), or when the
    process could not: a file no longer at its path (a status change moved the task's
    directory), a process that died. Anything else it raises is raised."""
    if processes is not None and processes.available:
        try:
            return await processes.run(function, argument)
        except (OSError, ProcessLost) as exc:
            log.info("%s done here, not in a process: %s", function.__name__, exc)
    return await asyncio.to_thread(here)
