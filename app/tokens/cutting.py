"""Cutting text to a number of tokens. Pure."""

from collections.abc import Callable

CHARS_PER_TOKEN = 32


def cut(count: Callable[[str], int], text: str, limit: int, *, keep_end: bool = False) -> str:
    """The longest start (or end) of ``text`` that ``count`` puts at most ``limit`` tokens,
    taking no token to be longer than ``CHARS_PER_TOKEN`` characters (a bound on the work)."""
    if limit <= 0:
        return ""
    if len(text) > limit * CHARS_PER_TOKEN:
        keep = limit * CHARS_PER_TOKEN
        text = text[-keep:] if keep_end else text[:keep]
    if count(text) <= limit:
        return text
    low, high = 0, len(text)
    while low < high:  # bisection on the number of characters kept
        middle = (low + high + 1) // 2
        piece = text[-middle:] if keep_end else text[:middle]
        if count(piece) <= limit:
            low = middle
        else:
            high = middle - 1
    if low == 0:
        return ""
    return text[-low:] if keep_end else text[:low]
