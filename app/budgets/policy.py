"""A context's token budget and condense threshold (docs/decisions.md, Budget). Pure."""

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

log = logging.getLogger(__name__)

MAX_DEFAULT_RESERVED = 8192
# Roo Code's bounds on a profile's condense threshold (as a share of the window).
MIN_THRESHOLD = 0.05
MAX_THRESHOLD = 1.0
INHERIT = -1


@dataclass(frozen=True)
class CompactionOptions:
    """The tiers a context's compaction tries, in order, and the tool results masking keeps."""

    tiers: tuple[str, ...]
    keep_tool_results: int

    def merged(self, chosen: dict[str, Any] | None) -> "CompactionOptions":
        """These options with a task's own choices (POST /tasks ``compaction``) over them."""
        chosen = chosen or {}
        return CompactionOptions(
            tiers=tuple(chosen.get("tiers") or self.tiers),
            keep_tool_results=chosen.get("keep_tool_results", self.keep_tool_results),
        )


@dataclass(frozen=True)
class Budget:
    """Limits in counted tokens: the real limits divided by the task's calibration factor."""

    window: int
    reserved_output: int
    allowed: int  # the most counted tokens a served payload may have
    threshold: int  # at or above this, compaction is due

    def share(self, ratios: Sequence[float]) -> "Budget":
        """A thread's budget: the window and limits times each ratio down its chain from the
        root, truncated at every step (as the original thread design computes a window)."""
        budget = self
        for ratio in ratios:
            budget = replace(
                budget,
                window=int(budget.window * ratio),
                allowed=int(budget.allowed * ratio),
                threshold=int(budget.threshold * ratio),
            )
        return budget

    def next_action(self, tokens: int) -> str:
        if tokens > self.allowed:
            return "over_budget"
        if tokens >= self.threshold:
            return "condense"
        return "none"


def default_reserved_output(window: int) -> int:
    return min(MAX_DEFAULT_RESERVED, window // 5)


def effective_threshold(global_share: float, profile: float | None, name: str = "") -> float:
    """Roo Code's rule: a profile's threshold wins if valid; -1 inherits the global one; an
    out-of-range value falls back to the global one, with a warning."""
    if profile is None or profile == INHERIT:
        return global_share
    if MIN_THRESHOLD <= profile <= MAX_THRESHOLD:
        return profile
    log.warning(
        "invalid condense threshold %s for profile %r: using the global %s",
        profile,
        name,
        global_share,
    )
    return global_share


def budget_for(
    window: int,
    reserved_output: int,
    *,
    buffer: float,
    condense_threshold: float,
    token_threshold: int | None = None,
    calibration: float = 1.0,
) -> Budget:
    """The budget; ``token_threshold`` (the original design's absolute form) replaces the share.

    ``calibration`` is how many real tokens one counted token turned out to be, by the usage
    the LLM reported (:mod:`app.tokens.calibration`): the limits, real, are divided by it to
    compare with counts.
    """
    threshold = math.floor(window * condense_threshold)
    if token_threshold is not None:
        threshold = token_threshold
    allowed = math.floor(window * (1 - buffer)) - reserved_output
    return Budget(
        window=window,
        reserved_output=reserved_output,
        allowed=math.floor(allowed / calibration),
        threshold=math.floor(threshold / calibration),
    )
