"""What a real server does with a body it refuses before reading it whole (over
MAX_BODY_BYTES; from a caller without a key; to no route), on both of uvicorn's HTTP protocols
(httptools, what ``context-service serve`` picks when it is installed, and h11): the client
gets its answer even while still sending, nothing is written, and a body past the drain's
bounds is cut off in bounded time.

httpx's async client (and so the openai SDK's AsyncOpenAI) is the one that needs the drain:
when its write meets the reset of a server that closed on unread bytes, it reports the reset,
not the 413 that had arrived before it (the sync client happens to read that 413 on Linux).
"""

import socket
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.support.files import snapshot_dir
from tests.support.server import Server, ServerPool, read_until_closed, status_and_headers
from tests.support.tasks import all_messages, task_body

pytestmark = [pytest.mark.e2e, pytest.mark.database_agnostic]

MiB = 1024 * 1024
CHUNK = 64 * 1024
MAX_BODY = MiB  # MAX_BODY_BYTES of these servers
JSON = {"content-type": "application/json"}
FIRST = {"role": "user", "content": "Fix the bug."}


@pytest.fixture(params=["httptools", "h11"])
def protocol(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


def start(servers: ServerPool, protocol: str, **env: str) -> Server:
    base = {"FSYNC": "never", "MAX_BODY_BYTES": str(MAX_BODY), "UVICORN_HTTP": protocol}
    return servers.start(env=base | env)


def messages_body(size: int) -> bytes:
    """A valid POST /messages body with one user message of ``size`` bytes."""
    return orjson.dumps({"messages": [{"role": "user", "content": "x" * size}]})


async def chunks(data: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(data), CHUNK):
        yield data[start : start + CHUNK]


def assert_body_too_large(response: httpx.Response) -> None:
    assert response.status_code == 413, response.text[:500]
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == "body_too_large", error
    assert error["details"] == {"limit": MAX_BODY}


async def test_an_oversized_body_gets_its_413_and_nothing_is_written(
    servers: ServerPool, protocol: str
) -> None:
    """8 and 64 MiB over a 1 MiB limit, with a Content-Length or chunked: the client gets the
    413, on a connection that stays usable (the body was read to its end), and the task's
    history and files are as they were."""
    target = start(servers, protocol, MAX_DISCARD_BYTES=str(80 * MiB))
    async with httpx.AsyncClient(base_url=target.base_url, timeout=30) as http:
        uuid = (await http.post("/tasks", json=task_body())).raise_for_status().json()["uuid"]
        path = f"/tasks/{uuid}/messages"
        (await http.post(path, json={"messages": [FIRST]})).raise_for_status()
        before = snapshot_dir(servers.context_dir)
        for size in (8 * MiB, 64 * MiB):
            data = messages_body(size)
            for content in (data, chunks(data)):
                response = await http.post(path, content=content, headers=JSON)
                assert_body_too_large(response)
                assert "connection" not in response.headers  # kept alive
        records = await all_messages(http, uuid)
    assert [r["content"] for r in records] == [FIRST["content"]]
    assert snapshot_dir(servers.context_dir) == before


async def test_a_refusal_before_the_body_is_read_reaches_a_client_still_sending(
    servers: ServerPool, protocol: str
) -> None:
    """8 MiB under the body limit, refused before any of it is read: no key or an unknown one
    (401), a path with no route (404). The client gets that answer, on a connection that stays
    usable, and nothing is written."""
    key = "agent-key-0123456789"
    target = start(servers, protocol, MAX_BODY_BYTES=str(16 * MiB), API_KEYS=key)
    authorized = {"authorization": f"Bearer {key}"}
    data = messages_body(8 * MiB)
    async with httpx.AsyncClient(base_url=target.base_url, timeout=30) as http:
        created = await http.post("/tasks", json=task_body(), headers=authorized)
        uuid = created.raise_for_status().json()["uuid"]
        path = f"/tasks/{uuid}/messages"
        before = snapshot_dir(servers.context_dir)
        for headers in ({}, {"authorization": "Bearer not-a-key"}):
            for content in (data, chunks(data)):
                response = await http.post(path, content=content, headers=JSON | headers)
                assert response.status_code == 401, response.text[:500]
                assert response.json()["error"]["code"] == "unauthorized"
                assert "connection" not in response.headers  # kept alive
        response = await http.post("/no/such/route", content=data, headers=JSON | authorized)
        assert response.status_code == 404, response.text[:500]
        http.headers.update(authorized)
        records = await all_messages(http, uuid)
    assert records == []
    assert snapshot_dir(servers.context_dir) == before


class Endless:
    """A body that goes on past any bound (stopping at 1 GiB, should the server never cut it
    off), a burst of ``burst`` bytes and then a chunk every ``pause`` seconds."""

    def __init__(self, burst: int = 0, pause: float = 0.0) -> None:
        self.burst = burst
        self.pause = pause
        self.sent = 0

    def __iter__(self) -> Iterator[bytes]:
        yield b'{"messages": [{"role": "user", "content": "'
        while self.sent < 1024 * MiB:
            if self.sent >= self.burst:
                time.sleep(self.pause)
            self.sent += CHUNK
            yield b"x" * CHUNK


def post_endless(target: Server, path: str, body: Endless) -> tuple[int | None, float]:
    """The status the client got (None: a reset, acceptable past the bounds) and the time."""
    started = time.monotonic()
    try:
        with httpx.Client(base_url=target.base_url, timeout=30) as http:
            status: int | None = http.post(path, content=body, headers=JSON).status_code
    except httpx.TransportError:
        status = None
    return status, time.monotonic() - started


def raw_post(target: Server, path: str, *headers: str) -> bytes:
    """Only the headers of a POST; then everything the server sends until it closes."""
    head = "\r\n".join([f"POST {path} HTTP/1.1", "Host: test", *headers, "", ""])
    with socket.create_connection(("127.0.0.1", target.port), timeout=10) as sock:
        sock.sendall(head.encode())
        return read_until_closed(sock)


def test_a_body_past_the_drain_bounds_is_cut_off(servers: ServerPool, protocol: str) -> None:
    """Past MAX_DISCARD_BYTES or BODY_DISCARD_TIMEOUT_S the server answers and closes, so the
    request ends (with the 413 or a reset); a body declared past the bound, or announced with
    Expect: 100-continue, is refused at once. Nothing is written and the server serves on."""
    max_discard, timeout_s = 8 * MiB, 2.0
    env = {"MAX_DISCARD_BYTES": str(max_discard), "BODY_DISCARD_TIMEOUT_S": str(timeout_s)}
    target = start(servers, protocol, **env)
    with httpx.Client(base_url=target.base_url, timeout=30) as http:
        uuid = http.post("/tasks", json=task_body()).raise_for_status().json()["uuid"]
    path = f"/tasks/{uuid}/messages"
    before = snapshot_dir(servers.context_dir)

    fast = Endless()  # cut off by the byte bound, long before the time bound
    status, waited = post_endless(target, path, fast)
    assert status in (413, None)
    assert waited < timeout_s
    assert fast.sent < max_discard + 64 * MiB  # what the socket buffers hold, at most

    slow = Endless(burst=2 * MAX_BODY, pause=0.05)  # refused at once, then under the bytes
    status, waited = post_endless(target, path, slow)
    assert status in (413, None)
    assert timeout_s * 0.9 <= waited < timeout_s + 5

    for extra in (
        [f"Content-Length: {max_discard + 1}"],
        ["Content-Length: 2000000", "Expect: 100-continue"],
    ):
        started = time.monotonic()
        response = raw_post(target, path, "Content-Type: application/json", *extra)
        assert time.monotonic() - started < 5
        status, headers = status_and_headers(response)
        assert status == 413, response
        assert headers["connection"] == "close"
        assert b"100 Continue" not in response
        assert b'"code":"body_too_large"' in response

    assert snapshot_dir(servers.context_dir) == before
    with httpx.Client(base_url=target.base_url, timeout=30) as http:
        assert http.get(path).raise_for_status().json()["messages"] == []
