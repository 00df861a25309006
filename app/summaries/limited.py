"""A summary's limit, and the extractive digest held to it: what a summariser process runs.

A process of the summariser's pool (app/summaries/processes.py) imports this module to run
:func:`span_digest`: it imports only what the digest needs (no LLM clients, no web framework),
so that a process starts quickly and stays small. (A spawned process also runs the service's
main module again: the console script, whose ``app.cli`` imports its commands only when run.)
"""

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.context.files import span_records
from app.planning.items import ChecklistItem
from app.summaries.digest import digest_within
from app.tokens.counters import TextCounter, counter_for

CUT_NOTE = "[... cut to fit ...]"


@dataclass(frozen=True)
class SummaryLimit:
    """The most a summary may cost: ``tokens`` as ``counter`` (the task's) counts them."""

    tokens: int
    counter: TextCounter


@dataclass(frozen=True)
class SpanDigest:
    """A limited digest of a span of messages.jsonl, as another process computes it: the file
    by its path (the process reads it itself), the limit's counter by its name."""

    path: Path
    end: int
    low: int
    high: int
    max_tokens: int
    counter: str
    kept: dict[str, Any] | None
    plan: tuple[ChecklistItem, ...] | None


def limited_digest(
    records: Iterable[dict[str, Any]],
    limit: SummaryLimit,
    *,
    kept: dict[str, Any] | None,
    plan: Sequence[ChecklistItem] | None,
) -> str:
    """The extractive digest of the records within ``limit`` (blocking: CPU work)."""
    digest = digest_within(
        records, max_tokens=limit.tokens, count=limit.counter.count_text, kept=kept, plan=plan
    )
    return cut_to_fit(digest, limit)


def span_digest(job: SpanDigest) -> str:
    """:func:`limited_digest` of a span, in a summariser process (it reads the file itself)."""
    limit = SummaryLimit(job.max_tokens, counter_for("", job.counter))
    with open(job.path, "rb") as f:
        records = span_records(f, job.end, job.low, job.high)
        return limited_digest(records, limit, kept=job.kept, plan=job.plan)


def cut_to_fit(text: str, limit: SummaryLimit) -> str:
    """The text if it fits the limit, else its first lines and ``CUT_NOTE`` (the start of
    its first line when not even that fits with the note)."""
    count = limit.counter.count_text
    if count(text) <= limit.tokens:
        return text
    lines = text.split("\n")
    kept = _most(len(lines), lambda n: count("\n".join([*lines[:n], CUT_NOTE])) <= limit.tokens)
    if kept:
        return "\n".join([*lines[:kept], CUT_NOTE])
    first = lines[0]
    chars = _most(len(first), lambda n: count(f"{first[:n]} {CUT_NOTE}") <= limit.tokens)
    return f"{first[:chars]} {CUT_NOTE}" if chars else CUT_NOTE


def _most(count: int, fits: Callable[[int], bool]) -> int:
    """The largest n below ``count`` that ``fits`` (0 if none does; fits is monotone)."""
    low, high = 0, count
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return low
