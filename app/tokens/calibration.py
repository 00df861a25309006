"""Calibration: what the LLM reports against what the service counted. Pure.

When an assistant message carries its call's usage, the reported prompt tokens are compared with
the counted tokens of the payload the service served last. The ratio corrects budgets for
tokenizers the service cannot run (Llama or Qwen behind Ollama, Claude): it is followed at once
when it rises (under-counting overflows the real window) and smoothed when it falls, and it stays
within bounds, so one odd report cannot starve or overfill a context.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# A report this far from the count is not about the payload we served (the agent added to it,
# or sent something else): ignored.
MIN_PLAUSIBLE_RATIO = 0.25
MAX_PLAUSIBLE_RATIO = 4.0


def reported_prompt_tokens(usage: Mapping[str, Any]) -> int | None:
    """Prompt tokens in OpenAI's, Anthropic's (input + cache) or Ollama's terms."""
    if usage.get("prompt_tokens") is not None:
        return int(usage["prompt_tokens"])
    if usage.get("input_tokens") is not None:
        cached = ("cache_creation_input_tokens", "cache_read_input_tokens")
        return int(usage["input_tokens"]) + sum(int(usage.get(k) or 0) for k in cached)
    if usage.get("prompt_eval_count") is not None:
        return int(usage["prompt_eval_count"])
    return None


def reported_output_tokens(usage: Mapping[str, Any]) -> int:
    for key in ("completion_tokens", "output_tokens", "eval_count"):
        if usage.get(key) is not None:
            return int(usage[key])
    return 0


@dataclass(frozen=True)
class CalibrationPolicy:
    low: float
    high: float
    smoothing: float  # weight of a new, lower sample

    def update(self, factor: float, served: int, reported: int) -> float | None:
        """The new factor after a report, or None if the report is no evidence."""
        if served <= 0 or reported <= 0:
            return None
        ratio = reported / served
        if not MIN_PLAUSIBLE_RATIO <= ratio <= MAX_PLAUSIBLE_RATIO:
            return None
        # A higher ratio is taken; a lower one, even the first, moves the factor part of the way.
        new = ratio if ratio >= factor else factor + self.smoothing * (ratio - factor)
        return round(min(self.high, max(self.low, new)), 4)
