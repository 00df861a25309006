"""A context's token budget (SPEC §6). Pure."""

import math
from dataclasses import dataclass

MAX_DEFAULT_RESERVED = 8192


@dataclass(frozen=True)
class Budget:
    window: int
    reserved_output: int
    allowed: int  # the most tokens a served payload may have
    threshold: int  # at or above this, compaction is due

    def next_action(self, tokens: int) -> str:
        if tokens > self.allowed:
            return "over_budget"
        if tokens >= self.threshold:
            return "condense"
        return "none"


def default_reserved_output(window: int) -> int:
    return min(MAX_DEFAULT_RESERVED, window // 5)


def budget_for(
    window: int, reserved_output: int, *, buffer: float, condense_threshold: float
) -> Budget:
    return Budget(
        window=window,
        reserved_output=reserved_output,
        allowed=math.floor(window * (1 - buffer)) - reserved_output,
        threshold=math.floor(window * condense_threshold),
    )
