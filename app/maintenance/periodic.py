"""Background rounds of work in a service process: the periodic cleanup and the database's
log checkpoint."""

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from contextlib import suppress

from app.config import Settings
from app.db.engine import Database
from app.maintenance.service import MaintenanceService

log = logging.getLogger(__name__)

# How long shutdown waits for a round to reach a stopping point before cancelling it.
STOP_GRACE_S = 10.0

# The service's first round comes at a random moment within this long after startup (or
# within the interval, if shorter): not in the way of the start itself, and not at the same
# moment in every worker started together. Not a whole interval later: a service restarted
# more often than that would never get to a round.
FIRST_ROUND_WITHIN_S = 60.0

# A round's work; it should return soon after the event it is given is set.
Action = Callable[[asyncio.Event], Awaitable[object]]


class Periodic:
    """Runs ``action`` after ``first_after_s`` and then every ``interval_s`` until stopped; a
    round that fails is logged and the next one still comes."""

    def __init__(
        self, name: str, interval_s: float, action: Action, *, first_after_s: float = 0.0
    ) -> None:
        self.name = name
        self.interval_s = interval_s
        self.action = action
        self.first_after_s = first_after_s
        self._stopping = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._loop = asyncio.create_task(self._run_forever(), name=self.name)

    async def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Let the current round end at its next stopping point (cancelled after ``grace_s``)."""
        self._stopping.set()
        if self._loop is None:
            return
        with suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._loop), grace_s)
        self._loop.cancel()
        with suppress(asyncio.CancelledError):
            await self._loop

    async def _run_forever(self) -> None:
        await self._wait(self.first_after_s)
        while not self._stopping.is_set():
            try:
                await self.action(self._stopping)
            except Exception:
                log.exception("%s failed; next round in %ss", self.name, self.interval_s)
            await self._wait(self.interval_s)

    async def _wait(self, seconds: float) -> None:
        """Until the next round is due, or stop() is called."""
        with suppress(TimeoutError):  # not wait_for: see JobRunner._run_forever
            async with asyncio.timeout(seconds):
                await self._stopping.wait()


def first_round_delay(interval_s: float) -> float:
    """When the service's first round of work done every ``interval_s`` comes after startup."""
    return random.uniform(0, min(interval_s, FIRST_ROUND_WITHIN_S))


def _started(name: str, interval_s: float, action: Action) -> Periodic:
    """One of the service's periodic rounds, started; its first at :func:`first_round_delay`."""
    periodic = Periodic(name, interval_s, action, first_after_s=first_round_delay(interval_s))
    periodic.start()
    return periodic


def start_periodic_cleanup(maintenance: MaintenanceService, settings: Settings) -> Periodic | None:
    """Start the cleanup every CLEANUP_INTERVAL_S; None when CLEANUP_DAYS is 0 (off)."""
    if settings.cleanup.days == 0:
        return None

    async def cleanup(stop: asyncio.Event) -> None:
        await maintenance.cleanup(stop=stop)

    return _started("periodic cleanup", settings.cleanup.interval_s, cleanup)


def start_periodic_checkpoint(db: Database, settings: Settings) -> Periodic | None:
    """Checkpoint SQLite's write-ahead log every WAL_CHECKPOINT_INTERVAL_S, so that it never
    outgrows what the last round left (None on another database: nothing to checkpoint)."""
    if db.engine.dialect.name != "sqlite":
        return None

    async def checkpoint(_: asyncio.Event) -> None:
        await db.checkpoint()

    return _started("WAL checkpoint", settings.storage.wal_checkpoint_interval_s, checkpoint)
