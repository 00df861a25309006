"""A call of the API described as data: what to send, whether it may be repeated, and how to
read the answer. The sync and the async client send the same descriptions."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from context_client.errors import APIError, ServiceUnreachableError, error_from_response

T = TypeVar("T")

QueryValue = str | int | float | bool | datetime | None


def decoded(response: httpx.Response) -> Any:
    """The answer's JSON, as the service's schema shapes it (the types in types.py)."""
    return response.json()


def nothing(_: httpx.Response) -> None:
    """For 204 answers."""


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how to read its answer. ``idempotent``: sending it again changes
    nothing (see retry.py); such calls are retried whenever their outcome is unknown."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: Mapping[str, QueryValue] = field(default_factory=dict)
    json: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    idempotent: bool = True
    # An error answer read as an answer after all (None: it stays an error).
    recover: Callable[[APIError], T | None] | None = None

    def request_options(self) -> dict[str, Any]:
        """Keyword arguments of httpx's ``request()``."""
        options: dict[str, Any] = {
            "method": self.method,
            "url": self.path,
            "params": {
                name: value.isoformat() if isinstance(value, datetime) else value
                for name, value in self.params.items()
                if value is not None
            },
            "headers": dict(self.headers),
        }
        if self.json is not None:
            options["json"] = self.json
        return options

    def settle(self, outcome: httpx.Response | httpx.TransportError) -> T:
        """The parsed answer, or the exception the outcome stands for."""
        if isinstance(outcome, httpx.TransportError):
            raise ServiceUnreachableError(
                f"{self.method} {self.path}: {type(outcome).__name__}: {outcome}"
            ) from outcome
        if outcome.is_success:
            return self.parse(outcome)
        error = error_from_response(outcome)
        recovered = None if self.recover is None else self.recover(error)
        if recovered is None:
            raise error
        return recovered


def path(*segments: str | int) -> str:
    """An absolute path, each segment escaped (a uuid is never read as a path)."""
    return "/" + "/".join(quote(str(segment), safe="") for segment in segments)


def present(**fields: Any) -> dict[str, Any]:
    """The fields given (not None): the service applies its own defaults to the others."""
    return {name: value for name, value in fields.items() if value is not None}


def query(**values: QueryValue) -> dict[str, QueryValue]:
    """Query parameters (those None are left out when sent)."""
    return values
