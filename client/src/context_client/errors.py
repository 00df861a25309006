"""Exceptions: an answer the service refused, or no answer at all.

The service answers every error as ``{"error": {"code", "message", "details"}}``; an
:class:`APIError` carries those with the HTTP status. Answers from something in front of the
service (a proxy's HTML page, uvicorn's plain-text 503) get the code ``http_error``.
"""

from typing import Any

import httpx

__all__ = [
    "APIError",
    "AuthenticationError",
    "ConflictError",
    "ContextServiceError",
    "NotFoundError",
    "PermissionDeniedError",
    "RateLimitError",
    "ServerError",
    "ServiceUnreachableError",
    "TooLargeError",
    "ValidationError",
    "error_from_response",
]

HTTP_ERROR = "http_error"
_MAX_TEXT = 500  # of a body that is not the service's JSON, kept in the message


class ContextServiceError(Exception):
    """Anything this client raises about the service."""


class ServiceUnreachableError(ContextServiceError):
    """No answer: the connection failed or broke, or timed out, on every attempt allowed."""


class APIError(ContextServiceError):
    """The service (or a proxy before it) answered with an error status."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: httpx.Headers | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}
        self.headers = headers or httpx.Headers()


class AuthenticationError(APIError):
    """401: no API key, or one the service does not know."""


class PermissionDeniedError(APIError):
    """403: the key's role or tenants do not allow this."""


class NotFoundError(APIError):
    """404: an unknown task, thread or job (or one of another tenant)."""


class ConflictError(APIError):
    """409: the task's state does not allow this (e.g. tool results pending)."""


class TooLargeError(APIError):
    """413: a body, message or batch too large, or a context that cannot fit its budget."""


class ValidationError(APIError):
    """422: the input is invalid; nothing was written."""


class RateLimitError(APIError):
    """429, from a proxy or gateway in front of the service."""


class ServerError(APIError):
    """5xx: the service failed, or its store is full (507) or cannot be written (503)."""


_BY_STATUS: dict[int, type[APIError]] = {
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: TooLargeError,
    422: ValidationError,
    429: RateLimitError,
}


def error_from_response(response: httpx.Response) -> APIError:
    """The exception for an error answer, with the service's code, message and details."""
    status = response.status_code
    kind = ServerError if status >= 500 else _BY_STATUS.get(status, APIError)
    try:
        body = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        details = error.get("details")
        return kind(
            status,
            error["code"],
            str(error.get("message", "")),
            details if isinstance(details, dict) else {},
            response.headers,
        )
    message = response.text[:_MAX_TEXT] or response.reason_phrase
    return kind(status, HTTP_ERROR, message, headers=response.headers)
