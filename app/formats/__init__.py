"""Provider payload formats: one request body per provider, streamed from current.jsonl. Pure.

Every format turns the effective context (one OpenAI chat message a line) into its provider's
request without ever holding the whole context, and says what a message costs as it renders
it, so the budget check can use the tokens of the payload actually served.

A payload is ``prefix + renderer(chunk, last)... + suffix``: the envelope gives the bytes around
the rendered messages; a fresh renderer is fed whole lines, in order, ``last`` on the final
chunk.
"""

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from app.formats.anthropic import AnthropicFormat
from app.formats.lmstudio import LMStudioFormat
from app.formats.ollama import OllamaFormat
from app.formats.openai import OpenAIFormat
from app.tokens.counters import TextCounter


class PayloadFormat(Protocol):
    name: str  # "openai" | "lmstudio" | "anthropic" | "ollama"
    counted_as: str  # whose accounting its payloads follow: "openai" | "anthropic" | "ollama"

    def envelope(
        self, metadata: dict[str, Any], *, max_output_tokens: int, context_length: int
    ) -> tuple[bytes, bytes]:
        """The bytes before and after the renderer's output, from the task's metadata.json."""
        ...

    def renderer(self, metadata: dict[str, Any]) -> Callable[[bytes, bool], bytes]:
        """A fresh stateful callable: (whole JSONL lines, is the last chunk) -> bytes to emit,
        for the task of that metadata.json."""
        ...

    def message_tokens(self, counter: TextCounter, message: dict[str, Any]) -> int:
        """What one OpenAI message costs as this format renders it on its own."""
        ...

    def tools_tokens(self, counter: TextCounter, tools: list[dict[str, Any]] | None) -> int:
        """What the task's OpenAI tool definitions cost as this format renders them."""
        ...

    def payload_tokens(self, counter: TextCounter, payload: dict[str, Any]) -> int:
        """The count of a whole served payload in this format's own terms."""
        ...

    def open_calls_tokens(self, counter: TextCounter, open_calls: Sequence[str]) -> int:
        """What the payload adds for tool calls still waiting for their results (their ids;
        beyond the sum of its messages' costs)."""
        ...


FORMATS: dict[str, PayloadFormat] = {
    f.name: f for f in (OpenAIFormat(), LMStudioFormat(), AnthropicFormat(), OllamaFormat())
}


_PROVIDER_ALIASES = {"lm-studio": "lmstudio", "lm_studio": "lmstudio", "claude": "anthropic"}


def counting_format(name: str) -> str:
    """The format whose token counts a payload in ``name`` uses (lmstudio counts as openai)."""
    return FORMATS[name].counted_as


def provider_format(llm_provider: str | None) -> str:
    """The payload format of a task's ``llm_provider``; any other provider speaks OpenAI's
    chat completions (vLLM, llama.cpp, Azure... all serve that API)."""
    name = (llm_provider or "").strip().lower()
    name = _PROVIDER_ALIASES.get(name, name)
    return name if name in FORMATS else "openai"


def native_format(llm_provider: str | None) -> str:
    """The counted format of a task's own provider (what its stored totals are checked in)."""
    return counting_format(provider_format(llm_provider))


__all__ = ["FORMATS", "PayloadFormat", "counting_format", "native_format", "provider_format"]
