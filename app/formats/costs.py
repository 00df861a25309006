"""What a message or a task's tool definitions cost in each counted payload format, and which
counter counts a task.

A record stores its cost as OpenAI renders it (``tokens``) and as the other counted formats
render it (``format_tokens``), so the check that a payload in any format fits its budget is a
sum the head already holds: nothing is re-counted when a payload is served.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.formats import FORMATS
from app.tokens.counters import TextCounter, counter_for

OTHER_FORMATS = ("anthropic", "ollama")  # counted besides "openai"

FormatTokens = dict[str, int]


def in_format(openai: int, others: Mapping[str, int], fmt: str) -> int:
    """A cost in ``fmt``, from the OpenAI count and the others (absent: as OpenAI's)."""
    return openai if fmt == "openai" else others.get(fmt, openai)


class _Memo:
    """A counter that remembers the texts of one message: its formats share most of them."""

    def __init__(self, counter: TextCounter) -> None:
        self.name = counter.name
        self._counter = counter
        self._seen: dict[str, int] = {}

    def count_text(self, text: str) -> int:
        tokens = self._seen.get(text)
        if tokens is None:
            tokens = self._seen[text] = self._counter.count_text(text)
        return tokens


@dataclass(frozen=True)
class TokenCosts:
    counter: TextCounter

    def message(self, message: dict[str, Any]) -> tuple[int, FormatTokens]:
        """(OpenAI's cost, the other formats' costs) of one OpenAI-shaped message."""
        memo = _Memo(self.counter)
        openai = FORMATS["openai"].message_tokens(memo, message)
        return openai, {f: FORMATS[f].message_tokens(memo, message) for f in OTHER_FORMATS}

    def tools(self, tools: list[dict[str, Any]]) -> tuple[int, FormatTokens]:
        openai = FORMATS["openai"].tools_tokens(self.counter, tools)
        return openai, {f: FORMATS[f].tools_tokens(self.counter, tools) for f in OTHER_FORMATS}


class TokenCounting:
    def __init__(self, choice: str) -> None:
        self.choice = choice  # the TOKEN_COUNTER setting
        self._costs: dict[str, TokenCosts] = {}

    def counter_name(self, model: str) -> str:
        """The counter a new task on ``model`` gets; stored with the task for good."""
        return counter_for(model, self.choice).name

    def costs(self, counter_name: str) -> TokenCosts:
        """Costs by a stored counter name (an encoding that cannot load: the heuristic)."""
        costs = self._costs.get(counter_name)
        if costs is None:
            costs = self._costs[counter_name] = TokenCosts(counter_for("", counter_name))
        return costs

    def loaded(self, counter_name: str) -> bool:
        """Whether :meth:`costs` has this counter at hand (otherwise it loads it: blocking)."""
        return counter_name in self._costs

    def counter(self, counter_name: str) -> TextCounter:
        return self.costs(counter_name).counter
