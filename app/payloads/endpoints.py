"""/tasks/{uuid}/request and /tasks/{uuid}/context: streamed from the files."""

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import Response, StreamingResponse

from app.api.deps import TaskUUID, ThreadID, service
from app.api.errors import ERROR_RESPONSES
from app.api.routing import OrjsonRoute, fast_lane
from app.payloads.lane import payload_response, request_lane
from app.payloads.schemas import ContextView, FormatName
from app.payloads.service import PayloadService

FormatQuery = Annotated[
    FormatName | None,
    Query(description="The provider's request format; default: the task's llm_provider's."),
]

PayloadsDep = Annotated[PayloadService, service("payloads")]

router = APIRouter(
    route_class=OrjsonRoute, prefix="/tasks/{uuid}", tags=["context"], responses=ERROR_RESPONSES
)

_REQUEST_EXAMPLE: dict[str, Any] = {
    "model": "gpt-4o",
    "messages": [
        {"role": "system", "content": "You are a coding agent ..."},
        {"role": "user", "content": "Fix the bug in a.py"},
    ],
    "tools": [{"type": "function", "function": {"name": "read_file", "parameters": {}}}],
    "temperature": 0.2,
    "max_completion_tokens": 4096,
}

# The answer's headers: name, JSON type, meaning.
_REQUEST_HEADERS = (
    ("X-Context-Tokens", "integer", "Counted tokens of this payload, in its format's terms"),
    ("X-Context-Budget", "integer", "The most it may have"),
    ("X-Token-Counter", "string", "Which counter counted: o200k_base, cl100k_base, heuristic"),
    (
        "X-Token-Calibration",
        "number",
        "Real tokens per counted token (the budget is divided by it)",
    ),
    ("X-Thread-Tokens", "integer", "A thread's payload: the tokens of its own context"),
    ("X-Thread-Budget", "integer", "A thread's payload: its own share of the budget"),
    (
        "X-Protected-Tokens",
        "integer",
        "A thread's payload: the tokens of its ancestors' protected regions, which precede its "
        "own messages",
    ),
)


@router.get(
    "/request",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "The LLM request, ready to send; within the task's budget.",
            "content": {"application/json": {"example": _REQUEST_EXAMPLE}},
            "headers": {
                name: {"description": description, "schema": {"type": kind}}
                for name, kind, description in _REQUEST_HEADERS
            },
        }
    },
)
@fast_lane(request_lane)  # the common request, without FastAPI's parameter solving
async def get_request(
    uuid: TaskUUID, payloads: PayloadsDep, format: FormatQuery = None, thread_id: ThreadID = 0
) -> Response:
    """The assembled LLM request payload, streamed from current.jsonl: OpenAI's chat
    completions (also LM Studio's), Anthropic's messages or Ollama's chat request. For a
    thread: the protected regions of the contexts above it (their latest messages, root
    first), then its own context."""
    return await payload_response(payloads, uuid, format, thread_id)


@router.get(
    "/context",
    response_class=StreamingResponse,
    responses={200: {"model": ContextView, "description": "The effective context, annotated."}},
)
async def get_context(
    uuid: TaskUUID, payloads: PayloadsDep, format: FormatQuery = None, thread_id: ThreadID = 0
) -> StreamingResponse:
    """The effective context with per-message tokens, budget, threshold and next action."""
    return StreamingResponse(
        await payloads.context_view(uuid, format, thread_id),
        media_type="application/json",
    )
