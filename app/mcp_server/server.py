"""The MCP server: tools over a task's plan, history and budget, and resources for its final
summary and inheritance, each answered by the service the REST endpoint of the same thing uses.

The tools are written once; where the services and the caller come from is the transport's:
an HTTP request's state (the app's services, the key the auth middleware found) or, over
stdio, the services the CLI opened on this machine. A refusal of the service is the tool's
error (``isError``), its text the service's one error body: ``{"error": {"code", "message",
"details"}}``.
"""

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any, Protocol
from uuid import UUID

import orjson
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from app.auth.keys import Principal
from app.auth.visibility import require_visible
from app.db.engine import Database
from app.errors import AppError, InvalidInput, NotFound, RequestInvalid, error_payload
from app.final_summaries.presenters import final_summary_out
from app.final_summaries.service import FinalSummaryService
from app.inheritance.presenters import inheritance_out
from app.inheritance.service import InheritanceService
from app.mcp_server.schemas import PlanView, plan_view
from app.messages.schemas import HistorySearch, MessageText
from app.messages.service import DEFAULT_TEXT_BYTES, MAX_TEXT_BYTES, MessageService
from app.ops.endpoints import VERSION
from app.payloads.schemas import BudgetView, FormatName
from app.payloads.service import PayloadService
from app.planning.schemas import PlanEntryIn, PlanItemIn
from app.planning.service import PlanningService

ToolContext = Context[Any, Any]

INSTRUCTIONS = (
    "The context service keeps your task's conversation history, plan and token budget. "
    "Every tool takes the task's uuid; history tools also take a thread_id (0: the task's "
    "root context). A placeholder such as '[output of read_file(...) hidden: 412 lines, "
    "18.3 KB, seq 57]' is expanded with recall_message(seq=57), an elided "
    "middle noted '(seq 57, chars 2,000-14,345)' with recall_message(seq=57, start=2000, "
    "end=14345)."
)

TaskArg = Annotated[UUID, Field(description="The task's uuid.")]
ThreadArg = Annotated[
    int, Field(ge=0, le=2**31 - 1, description="0: the task's root context; else a thread's id.")
]


class ToolServices(Protocol):
    """The services the tools use (the app's ``Services`` has them all)."""

    @property
    def db(self) -> Database: ...
    @property
    def planning(self) -> PlanningService: ...
    @property
    def messages(self) -> MessageService: ...
    @property
    def payloads(self) -> PayloadService: ...
    @property
    def final_summaries(self) -> FinalSummaryService: ...
    @property
    def inheritance(self) -> InheritanceService: ...


@dataclass(frozen=True)
class Caller:
    """Who calls a tool, and the services that answer."""

    services: ToolServices
    principal: Principal


# The caller of a tool or resource read, from its context (the transport decides how).
CallerOf = Callable[[ToolContext], Caller]


def service_error(exc: AppError) -> str:
    """The service's error body, as the text of a tool or resource error."""
    return orjson.dumps(error_payload(exc.code, exc.message, exc.details)).decode()


async def answered(work: Awaitable[BaseModel]) -> CallToolResult:
    """The tool's answer as JSON (text and structured), or the service's refusal as the tool's
    error, its text nothing but the error body."""
    try:
        result = await work
    except AppError as exc:
        return CallToolResult(
            content=[TextContent(type="text", text=service_error(exc))], is_error=True
        )
    return CallToolResult(
        content=[TextContent(type="text", text=result.model_dump_json())],
        structured_content=result.model_dump(mode="json"),
    )


@contextmanager
def as_resource_error() -> Iterator[None]:
    try:
        yield
    except NotFound as exc:
        raise ResourceNotFoundError(service_error(exc)) from exc
    except AppError as exc:
        raise ResourceError(service_error(exc)) from exc


def build_server(caller_of: CallerOf) -> MCPServer[Any]:
    """The MCP server, its callers found by ``caller_of``."""
    server: MCPServer[Any] = MCPServer(
        "context-service", instructions=INSTRUCTIONS, version=VERSION
    )

    async def visible(ctx: ToolContext, uuid: UUID | str) -> tuple[ToolServices, str]:
        """The services, and the task's uuid if the caller may see the task (another tenant's
        task is not found, as over REST)."""
        caller = caller_of(ctx)
        try:
            task_uuid = str(UUID(str(uuid)))
        except ValueError:
            raise InvalidInput(
                f"{uuid!r} is not a task uuid", details={"uuid": str(uuid)}
            ) from None
        await require_visible(caller.services.db, task_uuid, caller.principal)
        return caller.services, task_uuid

    reads = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    @server.tool(annotations=reads)
    async def get_plan(uuid: TaskArg, ctx: ToolContext) -> Annotated[CallToolResult, PlanView]:
        """The task's plan: its latest planning entry and the current checklist items with
        their status (pending, active, done, cancelled)."""

        async def plan() -> PlanView:
            services, task_uuid = await visible(ctx, uuid)
            return plan_view(task_uuid, *await services.planning.current(task_uuid))

        return await answered(plan())

    @server.tool(annotations=ToolAnnotations(destructive_hint=False, open_world_hint=False))
    async def update_plan(
        uuid: TaskArg,
        ctx: ToolContext,
        plan_type: Annotated[
            str, Field(min_length=1, max_length=64, description="e.g. revision, initial")
        ] = "revision",
        plan_content: Annotated[
            str | None, Field(description="Free text; may be left out when items are given.")
        ] = None,
        items: Annotated[
            list[PlanItemIn] | None,
            Field(
                description="The whole checklist, replacing the current items ([] clears "
                "them); left out, the items stay as they are."
            ),
        ] = None,
    ) -> Annotated[CallToolResult, PlanView]:
        """Record a planning entry: free text, the whole checklist with each item's status,
        or both. Returns the plan as it is now."""

        async def update() -> PlanView:
            services, task_uuid = await visible(ctx, uuid)
            try:
                entry = PlanEntryIn(plan_type=plan_type, plan_content=plan_content, items=items)
            except ValidationError as exc:
                raise RequestInvalid(exc.errors(include_url=False)) from None
            await services.planning.append(task_uuid, entry.record())
            return plan_view(task_uuid, *await services.planning.current(task_uuid))

        return await answered(update())

    @server.tool(annotations=reads)
    async def recall_message(
        uuid: TaskArg,
        seq: Annotated[int, Field(ge=1, description="The message's seq in the history.")],
        ctx: ToolContext,
        start: Annotated[int, Field(ge=0, description="The first character to return.")] = 0,
        end: Annotated[
            int | None,
            Field(
                ge=0,
                description="One past the last character to return (a handle's 'chars A-B' is "
                "start=A, end=B); the end of the text if absent.",
            ),
        ] = None,
        max_bytes: Annotated[
            int,
            Field(ge=1, le=MAX_TEXT_BYTES, description="At most this many bytes of text."),
        ] = DEFAULT_TEXT_BYTES,
        thread_id: ThreadArg = 0,
    ) -> Annotated[CallToolResult, MessageText]:
        """A message of the task's history by seq, as text, one range of characters at a
        time (what GET /tasks/{uuid}/messages/{seq} answers): a tool output hidden from the
        context (its placeholder names its seq) or an elided middle (its note says "seq 57,
        chars 2,000-14,345") comes back without flooding the window. Ask again with
        start=next_start for the rest."""

        async def recall() -> MessageText:
            services, task_uuid = await visible(ctx, uuid)
            return await services.messages.text(task_uuid, seq, start, end, max_bytes, thread_id)

        return await answered(recall())

    @server.tool(annotations=reads)
    async def search_history(
        uuid: TaskArg,
        query: Annotated[str, Field(min_length=1, max_length=200)],
        ctx: ToolContext,
        after_seq: Annotated[int, Field(ge=0, description="Search after this seq.")] = 0,
        limit: Annotated[int, Field(ge=1, le=50)] = 10,
        thread_id: ThreadArg = 0,
    ) -> Annotated[CallToolResult, HistorySearch]:
        """The task's messages whose text holds `query` (plain text, case ignored), oldest
        first, each with its seq, role and a snippet; recall_message reads one whole."""

        async def search() -> HistorySearch:
            services, task_uuid = await visible(ctx, uuid)
            return await services.messages.search(
                task_uuid, query, after_seq=after_seq, limit=limit, thread_id=thread_id
            )

        return await answered(search())

    @server.tool(annotations=reads)
    async def context_budget(
        uuid: TaskArg,
        ctx: ToolContext,
        format: Annotated[
            FormatName | None,
            Field(description="The payload format to count in; default: the task's provider's."),
        ] = None,
        thread_id: ThreadArg = 0,
    ) -> Annotated[CallToolResult, BudgetView]:
        """The context's window, budget, compaction threshold and current tokens, and a dry
        run of what compaction would do next."""

        async def budget() -> BudgetView:
            services, task_uuid = await visible(ctx, uuid)
            view = await services.payloads.budget_view(task_uuid, format, thread_id)
            return BudgetView.model_validate(view)

        return await answered(budget())

    @server.resource(
        "context://tasks/{uuid}/final-summary",
        name="final-summary",
        description="The summary a completed or failed task left behind: status ready (with "
        "the summary), pending (its job is under way) or failed.",
        mime_type="application/json",
    )
    async def final_summary(uuid: str, ctx: ToolContext) -> str:
        with as_resource_error():
            services, task_uuid = await visible(ctx, uuid)
            found = await services.final_summaries.get(task_uuid)
            return final_summary_out(task_uuid, found).model_dump_json()

    @server.resource(
        "context://tasks/{uuid}/inheritance",
        name="inheritance",
        description="What the task inherited from the previous run on its task key, with the "
        "notification comment to post (nulls when it inherited nothing).",
        mime_type="application/json",
    )
    async def inheritance(uuid: str, ctx: ToolContext) -> str:
        with as_resource_error():
            services, task_uuid = await visible(ctx, uuid)
            return inheritance_out(await services.inheritance.task(task_uuid)).model_dump_json()

    return server
