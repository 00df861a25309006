"""/tasks/{uuid}/messages: append and history."""

from typing import Annotated

from fastapi import APIRouter, Body, Header, Path, Query, Response, status

from app.api.deps import TaskUUID, ThreadID, service
from app.api.errors import ERROR_RESPONSES
from app.api.routing import OrjsonRoute, fast_lane
from app.messages.lane import (
    IDEMPOTENCY_KEY_MAX_LENGTH,
    IDEMPOTENCY_KEY_PATTERN,
    append_and_answer,
    append_lane,
)
from app.messages.native import InputFormat, read_body
from app.messages.schemas import AppendBody, AppendResult, MessagePage, MessageText
from app.messages.service import DEFAULT_TEXT_BYTES, MAX_TEXT_BYTES, MessageService

MessagesDep = Annotated[MessageService, service("messages")]

# A range of a message's text is capped so that an expansion never floods the window.

router = APIRouter(
    route_class=OrjsonRoute,
    prefix="/tasks/{uuid}/messages",
    tags=["messages"],
    responses=ERROR_RESPONSES,
)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=AppendResult)
@fast_lane(append_lane)  # the common append, without FastAPI's parameter solving
async def append_messages(
    uuid: TaskUUID,
    messages: MessagesDep,
    body: Annotated[
        AppendBody,
        Body(
            openapi_examples={
                "tool_call": {
                    "summary": "An assistant tool call, with the LLM's usage",
                    "value": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "call_1",
                                "type": "function",
                                "function": {
                                    "name": "read_file",
                                    "arguments": '{"path": "a.py"}',
                                },
                            }
                        ],
                        "usage": {"prompt_tokens": 1200, "completion_tokens": 40},
                    },
                },
                "tool_result": {
                    "summary": "The tool's result",
                    "value": {"role": "tool", "tool_call_id": "call_1", "content": "def main()"},
                },
                "batch": {
                    "summary": "A batch, appended all or nothing",
                    "value": {
                        "messages": [
                            {"role": "user", "content": "Fix the bug in a.py"},
                            {"role": "assistant", "content": "Reading a.py first."},
                        ]
                    },
                },
                "anthropic_results": {
                    "summary": "Anthropic's shape (?input=anthropic): results and a question",
                    "value": {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": "toolu_01A", "content": "ok"},
                            {"type": "text", "text": "Now run the tests."},
                        ],
                    },
                },
                "ollama_call": {
                    "summary": "Ollama's shape (?input=ollama): a call, with the counts",
                    "value": {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [
                            {"function": {"name": "read_file", "arguments": {"path": "a.py"}}}
                        ],
                        "prompt_eval_count": 1200,
                        "eval_count": 40,
                    },
                },
            }
        ),
    ],
    input_format: Annotated[
        InputFormat | None,
        Query(
            alias="input",
            description="The shape the body is in: openai (the service's own), anthropic or "
            "ollama. Without it the shape is detected (docs/input-formats.md).",
        ),
    ] = None,
    idempotency_key: Annotated[
        str | None,
        Header(
            max_length=IDEMPOTENCY_KEY_MAX_LENGTH,
            pattern=IDEMPOTENCY_KEY_PATTERN,
            description="A retried POST with the same key appends nothing.",
        ),
    ] = None,
    thread_id: ThreadID = 0,
) -> Response:
    """Append one message or a batch to the task's root context or one of its active threads;
    durable before the answer. A message in Anthropic's or Ollama's shape is stored in OpenAI's
    (one Anthropic message may become several, appended together)."""
    return await append_and_answer(
        messages, uuid, read_body(body, input_format), idempotency_key, thread_id
    )


@router.get("", response_model=MessagePage)
async def list_messages(
    uuid: TaskUUID,
    messages: MessagesDep,
    after_seq: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    thread_id: ThreadID = 0,
) -> MessagePage:
    """The full history of a context (its messages.jsonl), paginated by seq."""
    return await messages.history(uuid, after_seq, limit, thread_id)


@router.get("/{seq}", response_model=MessageText)
async def message_text(
    uuid: TaskUUID,
    messages: MessagesDep,
    seq: Annotated[int, Path(ge=1, le=2**63 - 1, description="The message's seq.")],
    start: Annotated[
        int, Query(ge=0, description="The first character of the text to return.")
    ] = 0,
    end: Annotated[
        int | None,
        Query(
            ge=0,
            description="One past the last character to return (a handle's 'chars A-B' is "
            "start=A, end=B); the end of the text if absent or beyond it.",
        ),
    ] = None,
    max_bytes: Annotated[
        int,
        Query(
            ge=1,
            le=MAX_TEXT_BYTES,
            description="At most this many bytes (UTF-8) of text; the answer says where it "
            "stopped (next_start).",
        ),
    ] = DEFAULT_TEXT_BYTES,
    thread_id: ThreadID = 0,
) -> MessageText:
    """A range of one message's text as posted, by seq: what a masked result's placeholder or an
    elision's note ("seq 57, chars 2,000-14,345") points at. Page through a long text with
    next_start."""
    return await messages.text(uuid, seq, start, end, max_bytes, thread_id)
