"""/tasks/{uuid}/compress, /rewind and /summaries."""

from typing import Annotated

from fastapi import APIRouter, Query

from app.api.deps import TaskUUID, ThreadID, service
from app.api.errors import ERROR_RESPONSES
from app.api.routing import OrjsonRoute
from app.compaction.schemas import (
    CompactionResult,
    CompressBody,
    RewindBody,
    RewindResult,
    SummaryPage,
    SummaryRecord,
)
from app.compaction.service import CompactionService
from app.journals.service import JournalService

CompactionDep = Annotated[CompactionService, service("compaction")]
SummariesDep = Annotated[JournalService, service("summaries")]

router = APIRouter(
    route_class=OrjsonRoute, prefix="/tasks/{uuid}", tags=["compaction"], responses=ERROR_RESPONSES
)


@router.post("/compress", response_model=CompactionResult)
async def compress(
    uuid: TaskUUID, body: CompressBody, compaction: CompactionDep, thread_id: ThreadID = 0
) -> CompactionResult:
    """Compact a context now: condense (auto, condense) or truncate."""
    outcome = await compaction.compact(uuid, body.strategy, body.backend, thread_id)
    return CompactionResult.model_validate(outcome.as_dict())


@router.post("/rewind", response_model=RewindResult)
async def rewind(
    uuid: TaskUUID, body: RewindBody, compaction: CompactionDep, thread_id: ThreadID = 0
) -> RewindResult:
    """Rewind, as Roo Code does it: history after the cut, and compactions that depended on
    it, leave the effective context (nothing is deleted from messages.jsonl)."""
    head = await compaction.rewind(uuid, body.to_seq, body.include_target, thread_id=thread_id)
    return RewindResult(
        last_seq=head.last_seq, messages=head.current_messages, context_tokens=head.context_tokens
    )


@router.get("/summaries", response_model=SummaryPage)
async def list_summaries(
    uuid: TaskUUID,
    summaries: SummariesDep,
    after_id: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    thread_id: ThreadID = 0,
) -> SummaryPage:
    """A context's compaction records (summaries.jsonl): condense summaries, truncations,
    elisions."""
    records, more = await summaries.page(uuid, after_id, limit, thread_id)
    return SummaryPage(
        summaries=[SummaryRecord.model_validate(r) for r in records],
        next_after_id=records[-1]["id"] if more else None,
    )
