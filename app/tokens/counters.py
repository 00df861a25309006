"""Text token counters."""

import math
import re
from typing import Protocol

# Hiragana, katakana (full and half width) and CJK ideographs: what seed 000 calls Japanese.
_JAPANESE_RUNS = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f]+")


class TextCounter(Protocol):
    name: str

    def count_text(self, text: str) -> int:
        """Tokens of a piece of text."""
        ...


class HeuristicCounter:
    """Seed 000's estimate: characters / 4, or / 2 when half or more of them are Japanese."""

    name = "heuristic"

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        japanese = sum(map(len, _JAPANESE_RUNS.findall(text)))
        divisor = 2 if japanese * 2 >= len(text) else 4
        return math.ceil(len(text) / divisor)
