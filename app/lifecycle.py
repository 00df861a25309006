"""A task's statuses and the transitions between them. Pure."""

from typing import Literal

from app.errors import Conflict, ErrorCode

TaskStatus = Literal["running", "paused", "completed", "failed"]

# action -> (statuses it may start from, status it leads to)
TRANSITIONS: dict[str, tuple[frozenset[str], str]] = {
    "stop": (frozenset({"running"}), "paused"),
    "resume": (frozenset({"paused"}), "running"),
    "complete": (frozenset({"running", "paused"}), "completed"),
    "fail": (frozenset({"running", "paused"}), "failed"),
}
FINISHED = frozenset({"completed", "failed"})


def next_status(action: str, current: str) -> str:
    sources, target = TRANSITIONS[action]
    if current not in sources:
        raise Conflict(
            f"cannot {action} a {current} task",
            code=ErrorCode.INVALID_TRANSITION,
            details={"action": action, "status": current, "allowed_from": sorted(sources)},
        )
    return target
