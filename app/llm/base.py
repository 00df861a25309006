"""The chat backend interface and what every backend shares: its config and the message shape.

A backend turns OpenAI-shaped chat messages (role system|user|assistant, content text) into the
assistant's text. The compaction engine only sees :class:`ChatBackend`; the kinds of backend
(``openai``, ``ollama``, ``anthropic``) live in their own modules.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pydantic import SecretStr

from app.formats.parts import content_text

__all__ = ["ROLES", "BackendConfig", "ChatBackend", "chat_messages"]

ROLES = frozenset({"system", "user", "assistant"})


@runtime_checkable
class ChatBackend(Protocol):
    """A chat model that answers a list of messages with one text."""

    @property
    def name(self) -> str:
        """The name a request picks the backend by ("default" for LLM_BACKEND)."""

    @property
    def kind(self) -> str:
        """openai | ollama | anthropic (or a test double's own)."""

    @property
    def model(self) -> str:
        """The model the backend asks for."""

    @property
    def window(self) -> int:
        """The backend model's own context window in tokens (to chunk what it is given)."""

    async def complete(self, messages: list[dict[str, Any]], *, max_tokens: int) -> str:
        """The assistant's text for ``messages``, at most ``max_tokens`` long.

        Raises an :class:`app.llm.errors.LLMError` when no text can be had, ``ValueError`` when
        the messages are not OpenAI-shaped chat messages.
        """


@dataclass(frozen=True, slots=True)
class BackendConfig:
    """Everything an HTTP backend needs, resolved (no "use the global value" left)."""

    base_url: str
    model: str
    api_key: SecretStr | None = field(default=None, repr=False)
    timeout_s: float = 60.0
    max_retries: int = 2
    window: int = 32_768
    backoff_s: float = 0.5
    backoff_max_s: float = 8.0

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("a backend needs a model")
        if self.timeout_s <= 0 or self.max_retries < 0 or self.window < 1:
            raise ValueError("timeout_s must be > 0, max_retries >= 0, window >= 1")
        if self.backoff_s < 0 or self.backoff_max_s < 0:
            raise ValueError("backoff times must be >= 0")


def chat_messages(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Validated copies ``{"role", "content"}`` with text content (parts joined, None -> "")."""
    out: list[dict[str, str]] = []
    for index, message in enumerate(messages):
        role = message.get("role")
        if role not in ROLES:
            raise ValueError(f"message {index}: role must be one of {sorted(ROLES)}, not {role!r}")
        try:
            text = content_text(message.get("content"), strict=True)
        except ValueError as exc:
            raise ValueError(f"message {index}: {exc}") from None
        out.append({"role": str(role), "content": text})
    if not out:
        raise ValueError("no messages to send")
    return out
