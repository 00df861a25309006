"""Thread windows and depths (seed 003). Pure."""

from collections.abc import Mapping
from typing import Protocol

ROOT = 0  # the task's own context


class Ratioed(Protocol):
    parent_thread_id: int
    window_ratio: float


def window_of(thread_id: int, threads: Mapping[int, Ratioed], root_window: int) -> int:
    """Seed 003's calculate_stelis_window_size: the model's window times each ratio on the way
    from the thread up to the root, truncated at every step."""
    window = root_window
    current = thread_id
    while current != ROOT:
        thread = threads[current]
        window = int(window * thread.window_ratio)
        current = thread.parent_thread_id
    return window


def may_start_under(parent_depth: int, max_depth: int) -> bool:
    """A new thread sits one level below its parent; ``max_depth`` counts the levels, the root's
    included: with 3, the root, a child and a grandchild, and no fourth level."""
    return parent_depth + 1 < max_depth
