"""A real HTTP webhook receiver on 127.0.0.1: records every POST, answers ``status``.

Tests use the fixture with ``receiver = webhook_receiver.receiver``."""

import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.fakes.threaded import serve_in_thread


@dataclass(frozen=True)
class Delivery:
    path: str
    headers: dict[str, str]
    raw: bytes
    body: Any


@dataclass
class Receiver:
    status: int = 204
    base_url: str = ""
    deliveries: list[Delivery] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    async def handle(self, request: Request) -> Response:
        raw = await request.body()
        with self._lock:
            self.deliveries.append(
                Delivery(request.url.path, dict(request.headers), raw, json.loads(raw))
            )
            status = self.status
        return Response(status_code=status)

    def received(self) -> list[Delivery]:
        with self._lock:
            return list(self.deliveries)


@contextlib.contextmanager
def running_receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    app = Starlette(routes=[Route("/{path:path}", receiver.handle, methods=["POST"])])
    with serve_in_thread(app, "webhook-receiver") as base_url:
        receiver.base_url = base_url
        yield receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A receiver of the test's own, stopped when the test ends."""
    with running_receiver() as running:
        yield running
