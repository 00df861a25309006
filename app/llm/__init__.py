"""Chat backends for summaries: OpenAI-compatible, Ollama and Anthropic over httpx.

    from app.llm import build_backends, ChatBackend, LLMError

    backends = build_backends(settings, http_client)      # {"default": ..., "cheap": ...}
    text = await backends["default"].complete(messages, max_tokens=1024)

Errors are in :mod:`app.llm.errors`; retries, timeouts and key redaction in :mod:`app.llm.http`.
"""

from app.llm.anthropic import AnthropicBackend
from app.llm.base import BackendConfig, ChatBackend, chat_messages
from app.llm.errors import LLMBadResponse, LLMError, LLMRejected, LLMTimeout, LLMUnavailable
from app.llm.http import HTTPBackend
from app.llm.ollama import OllamaBackend
from app.llm.openai import OpenAIBackend
from app.llm.registry import BACKEND_KINDS, build_backends, make_backend

__all__ = [
    "BACKEND_KINDS",
    "AnthropicBackend",
    "BackendConfig",
    "ChatBackend",
    "HTTPBackend",
    "LLMBadResponse",
    "LLMError",
    "LLMRejected",
    "LLMTimeout",
    "LLMUnavailable",
    "OllamaBackend",
    "OpenAIBackend",
    "build_backends",
    "chat_messages",
    "make_backend",
]
