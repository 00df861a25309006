"""Thread windows and depths (docs/decisions.md, Threads). Pure."""

from collections.abc import Mapping, Sequence
from typing import Protocol

ROOT = 0  # the task's own context
# The smallest window a context may have, a task's or a thread's: below it the parts a payload
# keeps (the system prompt, the first instruction, the newest tool group, each cut to its bone)
# may not fit at all.
MIN_WINDOW = 1024


class Ratioed(Protocol):
    parent_thread_id: int
    window_ratio: float


def window_of(thread_id: int, threads: Mapping[int, Ratioed], root_window: int) -> int:
    """The model's window times each ratio on the way from the thread up to the root,
    truncated at every step (as the original thread design computes a window)."""
    window = root_window
    current = thread_id
    while current != ROOT:
        thread = threads[current]
        window = int(window * thread.window_ratio)
        current = thread.parent_thread_id
    return window


def chain_of(thread_id: int, threads: Mapping[int, Ratioed]) -> list[int]:
    """The threads from the root's child down to ``thread_id`` (empty for the root)."""
    chain = []
    current = thread_id
    while current != ROOT:
        chain.append(current)
        current = threads[current].parent_thread_id
    return chain[::-1]


def descendants_of(thread_id: int, threads: Mapping[int, Ratioed]) -> list[int]:
    """Every thread below ``thread_id``, depth first."""
    below = [t for t, row in threads.items() if row.parent_thread_id == thread_id]
    return [d for child in below for d in (child, *descendants_of(child, threads))]


def chain_ratios(thread_id: int, threads: Mapping[int, Ratioed]) -> list[float]:
    """The window ratios from the root down to ``thread_id``."""
    return [threads[i].window_ratio for i in chain_of(thread_id, threads)]


def protected_shares(allowed: int, ratios: Sequence[float]) -> list[int]:
    """What each ancestor keeps of a thread's payload: parent window x (1 - ratio), root first.

    With the thread's own share (``allowed`` times the ratios, truncated each step) they add
    up to at most ``allowed``: the whole payload fits the task's budget.
    """
    shares = []
    window = allowed
    for ratio in ratios:
        child = int(window * ratio)
        shares.append(window - child)
        window = child
    return shares


def may_start_under(parent_depth: int, max_depth: int) -> bool:
    """Whether a thread may start under a context at ``parent_depth``: the root is at depth 0
    and a thread one below its parent, so with ``max_depth`` 3 a thread may be at depth 1, 2 or
    3, and none starts under one at depth 3."""
    return parent_depth < max_depth
