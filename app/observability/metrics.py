"""Prometheus metrics, served as text by ``GET /metrics``.

One :class:`Metrics` per app, with its own registry: nothing is registered globally, so several
apps in one process (the tests) never mix their samples. Counters and histograms are moved by
the code they measure; the gauges that describe the database (tasks by status, the job queue)
are filled by :meth:`Metrics.set_counts` when ``GET /metrics`` is scraped. With several uvicorn
workers, each process counts its own requests: a scrape sees the worker that answered it.
"""

import functools
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["CONTENT_TYPE", "JobCounts", "Metrics", "TaskCounts", "timed_compaction"]

# The classic text format: every Prometheus version reads it (prometheus-client's own
# CONTENT_TYPE_LATEST moved to 1.0.0, which older servers do not negotiate).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class TaskCounts:
    """Tasks by status, and every status there is (each shown, 0 when none)."""

    counts: Mapping[str, int]
    statuses: Iterable[str]


@dataclass(frozen=True)
class JobCounts:
    """Queued and running jobs by (kind, status), with every kind and status to show."""

    counts: Mapping[tuple[str, str], int]
    kinds: Iterable[str]
    statuses: Iterable[str]


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_SLOW_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)


class Metrics:
    """The service's metrics and their registry; see the module docstring."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.http_seconds = Histogram(
            "context_http_request_duration_seconds",
            "HTTP request latency, until the last byte of the response is sent.",
            ["method", "route", "status"],
            registry=r,
        )
        self.tasks = Gauge("context_tasks", "Tasks by status.", ["status"], registry=r)
        self.jobs = Gauge(
            "context_jobs",
            "Background jobs queued or running, by kind.",
            ["kind", "status"],
            registry=r,
        )
        self.messages = Counter(
            "context_messages_appended", "Messages committed by appends.", registry=r
        )
        self.file_work = Counter(
            "context_file_work",
            "Runs of blocking work that may run on the event loop, by work and where it ran. "
            "append: a group of appends' write and fsync; read: a context's row read under its "
            "lock on SQLite (its directory checked on PostgreSQL) and its current.jsonl opened "
            "and checked for a payload. event_loop while such work is quick "
            "(INLINE_FILE_WORK_MS); worker_thread for the rest (appends: a task's first after a "
            "while, usage reports, threads, large messages, keys on SQLite; reads: much to "
            "parse, a large file, the database busy) and while the disk is slow. A read begun on "
            "the loop that finds it would wait or work longer counts there and again in a "
            "worker thread.",
            ["work", "where"],
            registry=r,
        )
        self._file_work_runs = {
            (work, where): self.file_work.labels(work, where)
            for work in ("append", "read")
            for where in ("event_loop", "worker_thread")
        }
        self.damaged_files = Counter(
            "context_damaged_files",
            "Accesses refused because a context's messages.jsonl has lost committed bytes "
            "(task_files_damaged: an operator restores the file or runs context-service repair).",
            registry=r,
        )
        self.compactions = Counter(
            "context_compactions",
            "Compaction operations by outcome: condense, truncation, elision, skipped, failed.",
            ["kind"],
            registry=r,
        )
        self.compaction_seconds = Histogram(
            "context_compaction_duration_seconds",
            "Duration of a compaction operation (a condense includes the summariser's call).",
            ["kind"],
            buckets=_SLOW_BUCKETS,
            registry=r,
        )
        self.llm_seconds = Histogram(
            "context_llm_call_duration_seconds",
            "Duration of a chat backend call, retries included, whether it succeeded or not.",
            ["backend_kind"],
            buckets=_SLOW_BUCKETS,
            registry=r,
        )
        self.llm_errors = Counter(
            "context_llm_errors",
            "Chat backend calls that failed (after their retries), by error class.",
            ["backend_kind", "error"],
            registry=r,
        )

    # -- moved by the code it measures ----------------------------------------------------

    def request(self, method: str, route: str, status: int, seconds: float) -> None:
        # Arbitrary methods would make arbitrary series.
        method = method if method in _METHODS else "OTHER"
        self.http_seconds.labels(method, route, str(status)).observe(seconds)

    def appended(self, messages: int) -> None:
        self.messages.inc(messages)

    def file_work_ran(self, work: str, where: str) -> None:
        self._file_work_runs[work, where].inc()

    def compaction(self, kind: str, seconds: float) -> None:
        self.compactions.labels(kind).inc()
        self.compaction_seconds.labels(kind).observe(seconds)

    def llm_call(self, backend_kind: str, seconds: float, error: Exception | None) -> None:
        self.llm_seconds.labels(backend_kind).observe(seconds)
        if error is not None:
            self.llm_errors.labels(backend_kind, type(error).__name__).inc()

    # -- read at scrape time --------------------------------------------------------------

    def set_counts(self, tasks: TaskCounts, jobs: JobCounts) -> None:
        """Fill the gauges that describe the database (read at scrape time); known statuses
        and kinds show 0, not nothing. Synchronous: a concurrent scrape never sees the
        gauges half filled."""
        self.tasks.clear()
        for status in (*tasks.statuses, *tasks.counts):
            self.tasks.labels(status).set(tasks.counts.get(status, 0))
        self.jobs.clear()
        for kind in {*jobs.kinds, *(kind for kind, _ in jobs.counts)}:
            for status in jobs.statuses:
                self.jobs.labels(kind, status).set(jobs.counts.get((kind, status), 0))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _Outcome(Protocol):
    @property
    def kind(self) -> str: ...


class _Measured(Protocol):
    metrics: Metrics | None


S = TypeVar("S", bound=_Measured)
P = ParamSpec("P")
OutcomeT = TypeVar("OutcomeT", bound=_Outcome)


# When the innermost compaction running in this task started (time.perf_counter()): its
# summaries.jsonl record says how long it took (compaction_ms).
COMPACTION_STARTED: ContextVar[float | None] = ContextVar("compaction_started", default=None)


def compaction_ms() -> float | None:
    """Milliseconds since the running compaction started; None outside one."""
    started = COMPACTION_STARTED.get()
    return None if started is None else round((time.perf_counter() - started) * 1000, 1)


def timed_compaction(
    method: Callable[Concatenate[S, P], Awaitable[OutcomeT]],
) -> Callable[Concatenate[S, P], Awaitable[OutcomeT]]:
    """Count and time a compaction method by its outcome's kind ("failed" when it raises or
    is cancelled, e.g. a condense past the /request deadline), and mark its start for
    :func:`compaction_ms`."""

    @functools.wraps(method)
    async def timed(self: S, /, *args: P.args, **kwargs: P.kwargs) -> OutcomeT:
        started = time.perf_counter()
        token = COMPACTION_STARTED.set(started)
        kind = "failed"
        try:
            outcome = await method(self, *args, **kwargs)
            kind = outcome.kind
            return outcome
        finally:
            COMPACTION_STARTED.reset(token)
            if self.metrics is not None:
                self.metrics.compaction(kind, time.perf_counter() - started)

    return timed
