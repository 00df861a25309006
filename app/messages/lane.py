"""POST /messages in its common form, answered without FastAPI's parameter solving.

An append is most of what an agent sends, and FastAPI spent more of its CPU solving the
route's parameters and dependencies (the uuid, the query, the header, the services, the bearer
scheme) and validating the answer than the store spent committing it. The lane
(app/api/routing.py) takes an append whose parameters are plainly valid: the uuid in its
canonical form, no query but ``input`` and ``thread_id`` (once each, in canonical form), and
at most one printable Idempotency-Key within its length. It does with them what the
endpoint's dependencies (the task visible to the caller, the service; the routers' bearer
scheme only documents the key the middleware checks) and the endpoint do. Any other request it
leaves to FastAPI, so a refusal, or an unusual spelling FastAPI accepts (an upper-case uuid,
``thread_id=007``), gets FastAPI's answer.
"""

import re
from typing import get_args

from fastapi import Response, status

from app.api import plain
from app.api.deps import visible
from app.api.routing import OrjsonRequest
from app.messages.native import InputFormat, read_body
from app.messages.schemas import MessageIn
from app.messages.service import MessageService

IDEMPOTENCY_KEY_MAX_LENGTH = 200  # the service may put a thread's id in front (255 in the table)
# Printable ASCII: the service's own keys start with a control character.
IDEMPOTENCY_KEY_PATTERN = r"^[\x20-\x7e]+$"
REPLAYED_HEADER = "Idempotent-Replayed"

_IDEMPOTENCY_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN.encode())
_INPUT_FORMATS: dict[str, InputFormat] = {name: name for name in get_args(InputFormat)}
_HEADER_NAME = b"idempotency-key"


async def append_and_answer(
    messages: MessageService,
    uuid: str,
    posted: list[MessageIn],
    idempotency_key: str | None,
    thread_id: int,
) -> Response:
    """Append, and the answer (the endpoint's and the lane's)."""
    result, replayed = await messages.append(uuid, posted, idempotency_key, thread_id)
    response = Response(  # serialised as FastAPI serialises a response model
        result.model_dump_json(by_alias=True),
        status_code=status.HTTP_201_CREATED,
        media_type="application/json",
    )
    if replayed:
        response.headers[REPLAYED_HEADER] = "true"
    return response


async def append_lane(request: OrjsonRequest) -> Response | None:
    """The answer to a plainly valid append, or None to leave the request to FastAPI."""
    uuid = plain.task_uuid(request)
    parameters = plain.query(request, {"input", "thread_id"})
    if uuid is None or parameters is None or not await request.body():
        return None
    if "input" in parameters and parameters["input"] not in _INPUT_FORMATS:
        return None
    thread_id = plain.thread_id(parameters)
    keys = [value for name, value in request.scope["headers"] if name == _HEADER_NAME]
    if thread_id is None or len(keys) > 1 or (keys and not _plain_key(keys[0])):
        return None
    return await append_and_answer(
        request.state.services.messages,
        await visible(request, uuid),
        read_body(await request.json(), _INPUT_FORMATS.get(parameters.get("input", ""))),
        keys[0].decode("ascii") if keys else None,
        thread_id,
    )


def _plain_key(value: bytes) -> bool:
    return len(value) <= IDEMPOTENCY_KEY_MAX_LENGTH and bool(_IDEMPOTENCY_KEY.fullmatch(value))
