"""A Python client of the context service: ``ContextClient`` (blocking) and
``AsyncContextClient`` (asyncio), the same calls on both.

    from context_client import ContextClient

    with ContextClient() as service:  # $CONTEXT_SERVICE_URL, else http://127.0.0.1:8080
        task = service.create_task(task_key, "gpt-4o", system_prompt="You are a coding agent.")
        service.append(task["uuid"], {"role": "user", "content": "Fix the failing test"})
        kwargs = service.request_kwargs(task["uuid"], sdk="openai")
"""

from context_client._endpoints import RecordedReply
from context_client.client import DEFAULT_URL, AsyncContextClient, ContextClient
from context_client.errors import (
    APIError,
    AuthenticationError,
    ConflictError,
    ContextServiceError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    ServerError,
    ServiceUnreachableError,
    TooLargeError,
    ValidationError,
)
from context_client.expand import EXPAND_TOOL_NAME
from context_client.replies import anthropic_reply, ollama_reply, openai_reply
from context_client.retry import RetryPolicy
from context_client.sdk import sdk_kwargs

__all__ = [
    "DEFAULT_URL",
    "EXPAND_TOOL_NAME",
    "APIError",
    "AsyncContextClient",
    "AuthenticationError",
    "ConflictError",
    "ContextClient",
    "ContextServiceError",
    "NotFoundError",
    "PermissionDeniedError",
    "RateLimitError",
    "RecordedReply",
    "RetryPolicy",
    "ServerError",
    "ServiceUnreachableError",
    "TooLargeError",
    "ValidationError",
    "anthropic_reply",
    "ollama_reply",
    "openai_reply",
    "sdk_kwargs",
]
