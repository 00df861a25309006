"""/tasks/{uuid}/final-summary."""

from typing import Annotated

from fastapi import APIRouter, Response, status

from app.api.deps import TaskUUID, service
from app.api.errors import ERROR_RESPONSES
from app.api.routing import OrjsonRoute
from app.final_summaries.presenters import final_summary_out
from app.final_summaries.schemas import FinalSummaryOut
from app.final_summaries.service import FinalSummaryService

FinalSummariesDep = Annotated[FinalSummaryService, service("final_summaries")]

router = APIRouter(
    route_class=OrjsonRoute, prefix="/tasks/{uuid}", tags=["lifecycle"], responses=ERROR_RESPONSES
)


@router.get(
    "/final-summary",
    response_model=FinalSummaryOut,
    responses={202: {"model": FinalSummaryOut, "description": "Pending: its job is under way"}},
)
async def get_final_summary(
    uuid: TaskUUID, final_summaries: FinalSummariesDep, response: Response
) -> FinalSummaryOut:
    """The summary a completed or failed task left behind (409 while it is not finished)."""
    found = await final_summaries.get(uuid)
    if found.status == "pending":
        response.status_code = status.HTTP_202_ACCEPTED
    return final_summary_out(uuid, found)
