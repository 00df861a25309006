"""How deep a parsed JSON value nests: bodies and tool arguments are bounded by it."""

from typing import Any


def nests_deeper(value: Any, limit: int) -> bool:
    """Whether ``value`` has arrays and objects nested more than ``limit`` levels (a scalar is
    0 levels, ``[]`` one). Iterative, and stops at the first container past the limit."""
    pending: list[tuple[Any, int]] = [(value, 1)] if isinstance(value, dict | list) else []
    while pending:
        item, depth = pending.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        pending.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False
