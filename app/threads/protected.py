"""A parent's protected region: its most recent messages within a share of the window.
Blocking: run in a worker thread, under the task lock.

The original thread design's protected context, over current.jsonl read from its end: whole
units only (an assistant's tool calls with all their results, or one other message), newest first
until the next would not fit, never a unit whose calls still wait for results (the thread's own
messages follow the region; nothing may come between calls and their results).

With ``keep_head`` the context's head comes first, as compaction keeps it: its leading system
messages and its first user message (the instructions and the request that started it all:
why the agent was asked), as far as they fit.
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from app.storage.jsonl import iter_lines, iter_lines_backward

# A current.jsonl line -> (the line to send, its cost in the payload's format).
Costed = Callable[[bytes], tuple[bytes, int]]


@dataclass
class Region:
    # (line as sent, its cost), in context order; each line ends in a newline
    entries: list[tuple[bytes, int]] = field(default_factory=list)
    tokens: int = 0


def protected_region(
    current: BinaryIO,
    end: int,
    share: int,
    cost: Costed,
    *,
    calls_open: bool,
    keep_head: bool = False,
) -> Region:
    """The head (if kept) and the newest whole units of current.jsonl[0:end] that cost at
    most ``share`` together."""
    head = Region()
    start = 0
    if keep_head:
        for offset, line in _head(current, end):
            line, tokens = cost(line)
            if head.tokens + tokens > share:
                break
            head.entries.append((line, tokens))
            head.tokens += tokens
            start = offset
    region = Region()
    for unit in _units(iter_lines_backward(current, end, start), calls_open):
        costed = [cost(line) for line in unit]
        tokens = sum(t for _, t in costed)
        if head.tokens + region.tokens + tokens > share:
            break
        region.tokens += tokens
        region.entries[:0] = costed
    return Region(head.entries + region.entries, head.tokens + region.tokens)


def _head(current: BinaryIO, end: int) -> Iterator[tuple[int, bytes]]:
    """(offset after it, line with its newline) of the leading system lines and the first
    user line after them."""
    for offset, line in iter_lines(current, 0, end):
        after = offset + len(line) + 1
        if line.startswith(b'{"role":"system"'):
            yield after, line + b"\n"
            continue
        if line.startswith(b'{"role":"user"'):
            yield after, line + b"\n"
        return


def _units(lines: Iterator[bytes], calls_open: bool) -> Iterator[list[bytes]]:
    """Units, newest first, each in context order. With ``calls_open`` the newest assistant
    message with calls, and whatever results of them came, are left out."""
    results: list[bytes] = []
    skipping = calls_open
    for line in lines:
        if _is_tool_result(line):
            results.insert(0, line)
            continue
        if skipping:  # the message whose calls are still open, and its results so far
            skipping = False
            results = []
            continue
        if results and not _has_calls(line):
            results = []  # results whose call is gone (never written so): not sendable alone
        yield [line + b"\n", *(r + b"\n" for r in results)]
        results = []


def _is_tool_result(line: bytes) -> bool:
    # current.jsonl lines are records.openai_message dicts: the role comes first.
    return line.startswith(b'{"role":"tool"')


def _has_calls(line: bytes) -> bool:
    return line.startswith(b'{"role":"assistant"') and b'"tool_calls":' in line
