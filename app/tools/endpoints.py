"""/tasks/{uuid}/tools: tool execution records."""

from typing import Annotated

from fastapi import APIRouter, Query, status

from app.api.deps import TaskUUID, service
from app.api.errors import ERROR_RESPONSES
from app.api.routing import OrjsonRoute
from app.journals.service import JournalService
from app.tools.schemas import ToolRecord, ToolRecordIn, ToolRecordPage

ToolsDep = Annotated[JournalService, service("tools")]

router = APIRouter(
    route_class=OrjsonRoute, prefix="/tasks/{uuid}/tools", tags=["tools"], responses=ERROR_RESPONSES
)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ToolRecord)
async def add_tool_record(uuid: TaskUUID, body: ToolRecordIn, tools: ToolsDep) -> ToolRecord:
    """Record one tool execution."""
    record = await tools.append(uuid, body.model_dump(mode="json", exclude_none=True))
    return ToolRecord.model_validate(record)


@router.get("", response_model=ToolRecordPage)
async def list_tool_records(
    uuid: TaskUUID,
    tools: ToolsDep,
    after_seq: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> ToolRecordPage:
    """Tool execution records, paginated by seq."""
    records, more = await tools.page(uuid, after_seq, limit)
    return ToolRecordPage(
        tools=[ToolRecord.model_validate(r) for r in records],
        next_after_seq=records[-1]["seq"] if more else None,
    )
