"""EagerStreamingResponse: its first part leaves before it watches for the client leaving,
and it stops streaming when the client has left."""

import asyncio
from collections.abc import AsyncIterator

from starlette.types import Message

from app.api.streaming import EagerStreamingResponse


def _bodies(sent: list[Message]) -> list[tuple[bytes, bool]]:
    return [(m["body"], m["more_body"]) for m in sent if m["type"] == "http.response.body"]


async def test_the_start_and_first_part_are_sent_before_the_second_is_asked_for() -> None:
    sent: list[Message] = []
    seen_when_asked: list[list[Message]] = []

    async def parts() -> AsyncIterator[bytes]:
        yield b"["
        seen_when_asked.append(list(sent))
        yield b"1,2"
        yield b"]"

    async def receive() -> Message:
        await asyncio.Event().wait()  # the client stays
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        sent.append(message)

    response = EagerStreamingResponse(parts(), media_type="application/json", headers={"X-A": "1"})
    await response({"type": "http", "asgi": {"version": "3.0"}}, receive, send)

    assert sent[0]["type"] == "http.response.start"
    assert sent[0]["status"] == 200
    assert (b"x-a", b"1") in sent[0]["headers"]
    assert [m["type"] for m in seen_when_asked[0]] == ["http.response.start", "http.response.body"]
    assert _bodies(sent) == [(b"[", True), (b"1,2", True), (b"]", True), (b"", False)]


async def test_an_empty_stream_ends_the_response() -> None:
    sent: list[Message] = []

    async def parts() -> AsyncIterator[bytes]:
        return
        yield b""  # an async generator that yields nothing

    async def receive() -> Message:
        raise AssertionError("an empty stream has nothing to watch")

    async def send(message: Message) -> None:
        sent.append(message)

    await EagerStreamingResponse(parts())({"type": "http"}, receive, send)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert _bodies(sent) == [(b"", False)]


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

    await asyncio.wait_for(EagerStreamingResponse(parts())({"type": "http"}, receive, send), 5)
    assert produced < 10
    assert not any(m.get("more_body") is False for m in sent)  # never claimed to be complete
