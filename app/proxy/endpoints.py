"""The OpenAI and Anthropic wire endpoints: an agent changes its base URL to the service's and
gets durable history, compaction and statistics (docs/proxy.md)."""

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from fastapi.responses import Response, StreamingResponse

from app.api.deps import TaskUUID, service
from app.api.errors import ERROR_RESPONSES
from app.api.routing import OrjsonRoute
from app.auth.dependencies import PrincipalDep
from app.proxy.service import ProxyAnswer, ProxyService

ProxyDep = Annotated[ProxyService, service("proxy")]

_RESPONSES = ERROR_RESPONSES | {
    400: {"description": "The request names no task (X-Context-Task or the task key headers)"},
    502: {"description": "The upstream LLM could not be reached"},
    503: {"description": "No backend is configured for this wire, or the store is read-only"},
    504: {"description": "The upstream LLM did not answer in time"},
}
# What a proxied request answers: the upstream's answer as it came, whole or streamed; an
# upstream's own error keeps its status and body.
_ANSWERS: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The upstream LLM's answer, unchanged",
        "content": {
            "application/json": {"schema": {"type": "object"}},
            "text/event-stream": {"schema": {"type": "string"}},
        },
    },
    "4XX": {"description": "The upstream's refusal, status and body as it gave them"},
    "5XX": {"description": "The upstream's failure, status and body as it gave them"},
}
router = APIRouter(route_class=OrjsonRoute, prefix="/v1", tags=["proxy"], responses=_RESPONSES)
# The same wires under a task's own base URL, for an agent that sets nothing but a base URL.
task_router = APIRouter(
    route_class=OrjsonRoute, prefix="/tasks/{uuid}/v1", tags=["proxy"], responses=_RESPONSES
)

_TASK_HEADERS = (
    "Which task: the base URL /tasks/<uuid>/v1, or X-Context-Task: <uuid>, or "
    "X-Context-Task-Source, -Owner, -Repo, -Type, -Id "
    "(and X-Context-User) for the newest running task of that key, created if there is none. "
    "X-Context-Window sets the window of a task the request creates."
)


@router.post("/chat/completions", responses=_ANSWERS)
async def chat_completions(
    request: Request,
    proxy: ProxyDep,
    principal: PrincipalDep,
    body: Annotated[dict[str, Any], Body(description="An OpenAI chat completion request.")],
) -> Response:
    """OpenAI's chat completions, through the task's context: the conversation the agent sent
    is recorded, the task's payload (compacted, within its budget) goes to the configured
    backend (PROXY__OPENAI_BACKEND), and its answer comes back unchanged (streamed too), and
    is recorded."""
    return _response(await proxy.forward("openai", body, _headers(request), principal))


@router.post("/messages", responses=_ANSWERS)
async def messages(
    request: Request,
    proxy: ProxyDep,
    principal: PrincipalDep,
    body: Annotated[dict[str, Any], Body(description="An Anthropic Messages request.")],
) -> Response:
    """Anthropic's Messages API, through the task's context, as /v1/chat/completions does it
    for OpenAI's (backend: PROXY__ANTHROPIC_BACKEND)."""
    return _response(await proxy.forward("anthropic", body, _headers(request), principal))


@router.post("/messages/count_tokens")
async def count_tokens(
    proxy: ProxyDep,
    body: Annotated[dict[str, Any], Body(description="An Anthropic Messages request.")],
) -> dict[str, int]:
    """Anthropic's token count: the request's tokens as the service counts them, as sent (what
    the proxy would send may be fewer: the task's payload, compacted). Names no task, writes
    nothing."""
    return {"input_tokens": await proxy.count_tokens(body)}


@task_router.post("/chat/completions", responses=_ANSWERS)
async def task_chat_completions(
    uuid: TaskUUID,
    request: Request,
    proxy: ProxyDep,
    principal: PrincipalDep,
    body: Annotated[dict[str, Any], Body(description="An OpenAI chat completion request.")],
) -> Response:
    """/v1/chat/completions for the task of the URL (created from the request if there is none):
    an agent's OpenAI base URL set to ``.../tasks/{uuid}/v1``."""
    return _response(await proxy.forward("openai", body, _headers(request), principal, uuid))


@task_router.post("/messages", responses=_ANSWERS)
async def task_messages(
    uuid: TaskUUID,
    request: Request,
    proxy: ProxyDep,
    principal: PrincipalDep,
    body: Annotated[dict[str, Any], Body(description="An Anthropic Messages request.")],
) -> Response:
    """/v1/messages for the task of the URL (created from the request if there is none): an
    agent's Anthropic base URL set to ``.../tasks/{uuid}``."""
    return _response(await proxy.forward("anthropic", body, _headers(request), principal, uuid))


@router.get("/models")
async def models(proxy: ProxyDep) -> dict[str, Any]:
    """The models of the configured proxy backends, in OpenAI's list shape (each entry also
    carries the fields Anthropic's list has)."""
    entries = [
        {
            "id": model,
            "object": "model",
            "created": 0,
            "owned_by": backend,
            "type": "model",
            "display_name": model,
            "created_at": "1970-01-01T00:00:00Z",
        }
        for model, backend in proxy.models()
    ]
    return {
        "object": "list",
        "data": entries,
        "has_more": False,
        "first_id": entries[0]["id"] if entries else None,
        "last_id": entries[-1]["id"] if entries else None,
    }


chat_completions.__doc__ = f"{chat_completions.__doc__} {_TASK_HEADERS}"
messages.__doc__ = f"{messages.__doc__} {_TASK_HEADERS}"


def _headers(request: Request) -> dict[str, str]:
    return {name.lower(): value for name, value in request.headers.items()}


def _response(answer: ProxyAnswer) -> Response:
    if answer.stream is not None:
        return StreamingResponse(
            answer.stream, answer.status, headers=answer.headers, media_type=answer.media_type
        )
    return Response(
        answer.body, answer.status, headers=answer.headers, media_type=answer.media_type
    )


@task_router.post("/messages/count_tokens")
async def task_count_tokens(
    uuid: TaskUUID,
    proxy: ProxyDep,
    body: Annotated[dict[str, Any], Body(description="An Anthropic Messages request.")],
) -> dict[str, int]:
    """/v1/messages/count_tokens under a task's base URL (the task must be one the key sees)."""
    return await count_tokens(proxy, body)


@task_router.get("/models")
async def task_models(uuid: TaskUUID, proxy: ProxyDep) -> dict[str, Any]:
    """/v1/models under a task's base URL (the task must be one the key sees)."""
    return await models(proxy)
