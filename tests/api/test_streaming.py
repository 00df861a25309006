"""EagerStreamingResponse: its first part leaves before it watches for the client leaving, it
stops streaming when the client has left, and otherwise it answers as StreamingResponse does."""

import asyncio
from collections.abc import AsyncIterator

import pytest
from starlette.background import BackgroundTask
from starlette.requests import ClientDisconnect
from starlette.types import Message, Scope

from app.api.streaming import EagerStreamingResponse

HTTP: Scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}}


def _bodies(sent: list[Message]) -> list[tuple[bytes, bool]]:
    return [(m["body"], m["more_body"]) for m in sent if m["type"] == "http.response.body"]


async def _staying() -> Message:
    await asyncio.Event().wait()  # a client that stays until the response ends
    raise AssertionError("unreachable")


async def test_the_start_and_first_part_leave_before_the_watch_begins() -> None:
    sent: list[Message] = []
    when_watched: list[list[Message]] = []

    async def receive() -> Message:
        when_watched.append(list(sent))
        return await _staying()

    async def parts() -> AsyncIterator[str | bytes]:
        yield b"["
        yield "1,2"  # text is encoded, as StreamingResponse does
        yield b"]"

    async def send(message: Message) -> None:
        sent.append(message)

    response = EagerStreamingResponse(parts(), media_type="application/json", headers={"X-A": "1"})
    await response(HTTP, receive, send)

    assert sent[0]["type"] == "http.response.start"
    assert sent[0]["status"] == 200
    assert (b"x-a", b"1") in sent[0]["headers"]
    assert _bodies(when_watched[0]) == [(b"[", True)]  # StreamingResponse: before any send
    assert _bodies(sent) == [(b"[", True), (b"1,2", True), (b"]", True), (b"", False)]


async def test_an_empty_stream_ends_the_response_and_runs_its_background_task() -> None:
    sent: list[Message] = []
    ran: list[str] = []

    async def parts() -> AsyncIterator[bytes]:
        return
        yield b""  # an async generator that yields nothing

    async def send(message: Message) -> None:
        sent.append(message)

    response = EagerStreamingResponse(parts(), background=BackgroundTask(ran.append, "after"))
    await response(HTTP, _staying, send)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert _bodies(sent) == [(b"", False)]
    assert ran == ["after"]


async def test_streaming_stops_when_the_client_leaves() -> None:
    sent: list[Message] = []
    produced = 0
    left = asyncio.Event()

    async def parts() -> AsyncIterator[bytes]:
        nonlocal produced
        while True:  # endless: only the client's leaving ends it
            produced += 1
            if produced == 3:
                left.set()
            yield b"x"
            await asyncio.sleep(0)

    async def receive() -> Message:
        await left.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    await asyncio.wait_for(EagerStreamingResponse(parts())(HTTP, receive, send), 5)
    assert produced < 10
    assert not any(m.get("more_body") is False for m in sent)  # never claimed to be complete


@pytest.mark.parametrize(
    ("spec_version", "raised"), [("2.4", ClientDisconnect), ("2.3", ConnectionResetError)]
)
async def test_a_client_gone_before_the_first_part_is_reported_as_streaming_response_does(
    spec_version: str, raised: type[Exception]
) -> None:
    """A server of ASGI 2.4 raises OSError from send when the client has left; the response
    makes it ClientDisconnect there, and leaves it be below 2.4."""

    async def parts() -> AsyncIterator[bytes]:
        yield b"["

    async def send(message: Message) -> None:
        raise ConnectionResetError("gone")

    scope: Scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": spec_version}}
    with pytest.raises(raised):
        await EagerStreamingResponse(parts())(scope, _staying, send)


async def test_an_error_of_the_stream_after_its_first_part_is_raised() -> None:
    sent: list[Message] = []

    async def parts() -> AsyncIterator[bytes]:
        yield b"["
        raise RuntimeError("the stream broke")

    async def send(message: Message) -> None:
        sent.append(message)

    with pytest.raises(RuntimeError, match="the stream broke"):
        await EagerStreamingResponse(parts())(HTTP, _staying, send)
    assert _bodies(sent) == [(b"[", True)]  # started, never claimed complete
