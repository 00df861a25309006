"""What a chat backend raises when it cannot give a text.

    LLMError                    any failed chat call; ``.backend`` names the backend
     ├── LLMTimeout             no answer in time (per attempt), also HTTP 408   [retried]
     ├── LLMUnavailable         connection refused or reset, HTTP 5xx, HTTP 429  [retried]
     ├── LLMRejected            HTTP 4xx other than 408/429: the request is wrong [not retried]
     └── LLMBadResponse         2xx, but not JSON, a field missing, or no text   [not retried]

The retried kinds are raised only once the attempts are used up; ``.attempts`` says how many
were made. Messages quote at most a short, key-redacted excerpt of what the server said and never
an API key or a request header.
"""

from typing import ClassVar

__all__ = ["LLMBadResponse", "LLMError", "LLMRejected", "LLMTimeout", "LLMUnavailable"]


class LLMError(Exception):
    """Base class: a chat call on backend ``backend`` failed."""

    retryable: ClassVar[bool] = False

    def __init__(
        self, message: str, *, backend: str, status_code: int | None = None, attempts: int = 1
    ) -> None:
        super().__init__(message)
        self.message = message
        self.backend = backend
        self.status_code = status_code
        self.attempts = attempts

    def __str__(self) -> str:
        tail = f" (after {self.attempts} attempts)" if self.attempts > 1 else ""
        return f"llm backend {self.backend!r}: {self.message}{tail}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(backend={self.backend!r}, status_code={self.status_code!r}, "
            f"attempts={self.attempts}, message={self.message!r})"
        )


class LLMTimeout(LLMError):
    """No answer within the backend's timeout."""

    retryable = True


class LLMUnavailable(LLMError):
    """The backend could not be reached or said it cannot serve now (5xx, 429)."""

    retryable = True

    def __init__(
        self,
        message: str,
        *,
        backend: str,
        status_code: int | None = None,
        attempts: int = 1,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, backend=backend, status_code=status_code, attempts=attempts)
        self.retry_after = retry_after


class LLMRejected(LLMError):
    """The backend refused the request (bad key, unknown model, invalid body...)."""


class LLMBadResponse(LLMError):
    """The backend answered 2xx with something that is not a usable text."""
