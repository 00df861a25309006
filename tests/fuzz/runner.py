"""Running conversations: one by seed (in its own temp directory), or many in worker processes,
bounded by a count and a time, with a report of what broke.

Conversation i of a run with seed S has seed S + i: a failure names the one seed that replays it.
"""

import asyncio
import functools
import logging
import multiprocessing
import signal
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from tests.fuzz.driver import DATABASE, FuzzFailure, fuzz_settings, play
from tests.fuzz.model import Options, conversation
from tests.support.app import running_app


@dataclass
class Result:
    """One conversation's outcome; plain data, so it crosses process boundaries."""

    seed: int
    steps: int = 0
    seconds: float = 0.0
    statuses: Counter[str] = field(default_factory=Counter)
    skipped: bool = False  # the run's time was up before it started
    failure: str = ""  # the report, with the steps and requests to reproduce it
    signature: str = ""  # what kind of failure, for grouping
    failed_at: int = 0  # the step it broke at


def run_one(seed: int, options: Options) -> Result:
    played = conversation(seed, options)
    began = time.monotonic()
    result = Result(seed)
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        try:
            (Path(tmp) / DATABASE).write_bytes(_migrated_database())
            outcome = asyncio.run(play(played, Path(tmp)))
            result.steps, result.statuses = outcome.steps, outcome.statuses
        except FuzzFailure as failure:
            result.failure, result.signature = str(failure), failure.signature
            result.steps = result.failed_at = failure.step
        except Exception as exc:  # the driver's own failure is a failure too, with its stack
            result.failure = f"conversation seed {seed}: {traceback.format_exc()}"
            result.signature = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    result.seconds = time.monotonic() - began
    return result


@functools.cache
def _migrated_database() -> bytes:
    """An empty database at the schema's head, made once per process by the app's own
    startup: each conversation starts from a copy rather than running every migration."""
    with tempfile.TemporaryDirectory(prefix="fuzz-template-") as tmp:

        async def start_and_stop() -> None:
            async with running_app(fuzz_settings(Path(tmp))):
                pass

        asyncio.run(start_and_stop())
        return (Path(tmp) / DATABASE).read_bytes()


@dataclass
class Run:
    seed: int
    conversations: int
    workers: int
    options: Options
    minutes: float | None = None


@dataclass
class Report:
    results: list[Result]
    seconds: float
    interrupted: bool = False

    @property
    def played(self) -> list[Result]:
        return [r for r in self.results if not r.skipped]

    @property
    def failures(self) -> list[Result]:
        return [r for r in self.results if r.failure]

    def distinct_failures(self) -> dict[str, list[Result]]:
        """Failures by kind, each kind's shortest reproduction first."""
        groups: dict[str, list[Result]] = {}
        for result in self.failures:
            groups.setdefault(result.signature, []).append(result)
        return {k: sorted(v, key=lambda r: (r.failed_at, r.seed)) for k, v in groups.items()}


def _worker_init(quiet: bool) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    if quiet:  # the app logs every refusal and error; the report says what matters
        logging.disable(logging.CRITICAL)


def _run_job(job: tuple[int, Options, float | None]) -> Result:
    seed, options, deadline = job
    if deadline is not None and time.time() > deadline:
        return Result(seed, skipped=True)
    return run_one(seed, options)


def run_many(run: Run, progress: Callable[[int, int, float], None] | None = None) -> Report:
    """Every conversation of the run across ``run.workers`` processes, until the count or
    the time is reached."""
    began = time.monotonic()
    deadline = time.time() + run.minutes * 60 if run.minutes else None
    jobs = [(run.seed + i, run.options, deadline) for i in range(run.conversations)]
    results: list[Result] = []
    interrupted = False
    # Not multiprocessing.Pool: its workers are daemons, and a daemon may not start the
    # service's own processes (the condense's digest runs in one).
    with ProcessPoolExecutor(
        run.workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_worker_init,
        initargs=(True,),
    ) as pool:
        futures = [pool.submit(_run_job, job) for job in jobs]
        try:
            for future in as_completed(futures):
                results.append(future.result())
                if progress is not None:
                    failed = sum(1 for r in results if r.failure)
                    progress(len(results), failed, time.monotonic() - began)
        except KeyboardInterrupt:  # Ctrl-C: report what was played so far
            interrupted = True
            pool.shutdown(cancel_futures=True)
    return Report(results, time.monotonic() - began, interrupted)
