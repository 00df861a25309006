"""Streaming a snapshot's committed bytes without holding them."""

import asyncio
from collections.abc import AsyncIterator, Callable

from app.context.store import Snapshot
from app.errors import ErrorCode, StorageError
from app.storage.jsonl import CHUNK

# The largest context answered as one body. A larger one streams, so that its first bytes
# leave while the rest is rendered (an Anthropic payload of 100k tokens, each message parsed
# and re-encoded, takes milliseconds to render).
WHOLE_BODY_BYTES = 64 << 10


async def committed_chunks(snapshot: Snapshot, size: int) -> AsyncIterator[tuple[bytes, bool]]:
    """Yield (chunk, is_last) covering exactly ``size`` bytes; chunks end on line boundaries."""
    remaining = size
    carry = b""
    while remaining > 0:
        wanted = min(CHUNK, remaining)
        data = snapshot.take_prefetched(wanted) or await asyncio.to_thread(
            snapshot.handle.read, wanted
        )
        if not data:
            raise StorageError(
                f"task {snapshot.task.uuid}: a context file is shorter than its committed head",
                code=ErrorCode.STORAGE_CORRUPT,
            )
        remaining -= len(data)
        data = carry + data
        if remaining > 0:
            cut = data.rfind(b"\n") + 1
            data, carry = data[:cut], data[cut:]
        if data:
            yield data, remaining == 0


def whole_body(
    snapshot: Snapshot,
    size: int,
    prefix: bytes,
    suffix: bytes,
    render: Callable[[bytes, bool], bytes],
    *,
    lead: bytes = b"",
) -> bytes | None:
    """What :func:`stream_lines` would send, at once, for a context of at most
    ``WHOLE_BODY_BYTES`` (its ancestors' ``lead`` included) that the snapshot's prefetched
    bytes hold (None otherwise: stream it).
    Its bytes are in memory already, so it is answered as one body: no stream to drive."""
    if size + len(lead) > WHOLE_BODY_BYTES or len(snapshot.prefetched) != size:
        return None
    parts = [prefix]
    if lead:
        parts.append(render(lead, size == 0))
    if size:
        parts.append(render(snapshot.take_prefetched(size), True))
    parts.append(suffix)
    return b"".join(parts)


async def stream_lines(
    snapshot: Snapshot,
    size: int,
    prefix: bytes,
    suffix: bytes,
    render: Callable[[bytes, bool], bytes],
    *,
    offload: bool = False,
    lead: bytes = b"",
) -> AsyncIterator[bytes]:
    """prefix + render(lead) + render(chunk) for each chunk + suffix; closes the snapshot
    when done. ``lead``: whole lines that go before the snapshot's (a thread's ancestors')."""
    try:
        yield prefix
        if lead:
            yield render(lead, size == 0)
        async for chunk, last in committed_chunks(snapshot, size):
            if offload:
                yield await asyncio.to_thread(render, chunk, last)
            else:
                yield render(chunk, last)
        yield suffix
    finally:
        snapshot.close()
