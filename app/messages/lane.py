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
from dataclasses import dataclass
from typing import get_args
from urllib.parse import parse_qsl

from fastapi import Response, status

from app.api.deps import MAX_THREAD_ID
from app.api.routing import OrjsonRequest
from app.auth.dependencies import principal_of
from app.auth.visibility import require_visible
from app.messages.native import InputFormat, read_body
from app.messages.schemas import MessageIn
from app.messages.service import MessageService

IDEMPOTENCY_KEY_MAX_LENGTH = 200  # the service may put a thread's id in front (255 in the table)
# Printable ASCII: the service's own keys start with a control character.
IDEMPOTENCY_KEY_PATTERN = r"^[\x20-\x7e]+$"
REPLAYED_HEADER = "Idempotent-Replayed"

_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_CANONICAL_INT = re.compile(r"0|[1-9][0-9]{0,9}")
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
    parameters = _parameters(request)
    if parameters is None or not await request.body():
        return None
    services = request.state.services
    await require_visible(services.db, parameters.uuid, principal_of(request))
    return await append_and_answer(
        services.messages,
        parameters.uuid,
        read_body(await request.json(), parameters.input_format),
        parameters.idempotency_key,
        parameters.thread_id,
    )


@dataclass(frozen=True, slots=True)
class _Parameters:
    uuid: str
    input_format: InputFormat | None
    thread_id: int
    idempotency_key: str | None


def _parameters(request: OrjsonRequest) -> _Parameters | None:
    """The append's parameters, or None unless they are plainly valid."""
    uuid = request.path_params["uuid"]
    if _CANONICAL_UUID.fullmatch(uuid) is None:
        return None
    query: dict[str, str] = {}
    if raw_query := request.scope["query_string"]:
        pairs = parse_qsl(raw_query.decode("latin-1"), keep_blank_values=True)
        query = dict(pairs)
        if len(query) != len(pairs) or not query.keys() <= {"input", "thread_id"}:
            return None
    if "input" in query and query["input"] not in _INPUT_FORMATS:
        return None
    thread_id = query.get("thread_id", "0")
    if _CANONICAL_INT.fullmatch(thread_id) is None or int(thread_id) > MAX_THREAD_ID:
        return None
    keys = [value for name, value in request.scope["headers"] if name == _HEADER_NAME]
    if len(keys) > 1 or (keys and not _plain_key(keys[0])):
        return None
    key = keys[0].decode("ascii") if keys else None
    return _Parameters(uuid, _INPUT_FORMATS.get(query.get("input", "")), int(thread_id), key)


def _plain_key(value: bytes) -> bool:
    return len(value) <= IDEMPOTENCY_KEY_MAX_LENGTH and bool(_IDEMPOTENCY_KEY.fullmatch(value))
