"""GET /request in its common form, answered without FastAPI's parameter solving.

Every agent step reads its payload once; FastAPI's solving of the route's parameters and
dependencies was about a quarter of a small payload's CPU. The lane (app/api/routing.py) takes
a request whose parameters are plainly valid (app/api/plain.py: the uuid in canonical form, no
query but ``format`` and ``thread_id``, once each) and does what the endpoint's dependencies
(the task visible to the caller) and the endpoint do. Any other request goes to FastAPI.
"""

from typing import get_args

from fastapi import Response

from app.api import plain
from app.api.deps import visible
from app.api.routing import OrjsonRequest
from app.api.streaming import EagerStreamingResponse
from app.payloads.schemas import FormatName
from app.payloads.service import PayloadService

_FORMATS: dict[str, FormatName] = {name: name for name in get_args(FormatName)}


async def payload_response(
    payloads: PayloadService, uuid: str, format_name: FormatName | None, thread_id: int
) -> Response:
    """The request payload, whole when it was assembled in memory, else streamed (the
    endpoint's answer and the lane's)."""
    payload = await payloads.request(uuid, format_name, thread_id)
    if isinstance(payload.body, bytes):
        return Response(payload.body, media_type="application/json", headers=payload.headers)
    return EagerStreamingResponse(
        payload.body, media_type="application/json", headers=payload.headers
    )


async def request_lane(request: OrjsonRequest) -> Response | None:
    """The payload for a plainly valid request, or None to leave the request to FastAPI."""
    uuid = plain.task_uuid(request)
    parameters = plain.query(request, {"format", "thread_id"})
    if uuid is None or parameters is None:
        return None
    if "format" in parameters and parameters["format"] not in _FORMATS:
        return None
    thread_id = plain.thread_id(parameters)
    if thread_id is None:
        return None
    return await payload_response(
        request.state.services.payloads,
        await visible(request, uuid),
        _FORMATS.get(parameters.get("format", "")),
        thread_id,
    )
