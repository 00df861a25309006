"""GET /stats: aggregate figures for operators."""

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from app.api.deps import service
from app.api.errors import ERROR_RESPONSES
from app.api.routing import OrjsonRoute
from app.auth.dependencies import require_unscoped
from app.stats.schemas import StatsOut, StatsQuery
from app.stats.service import StatsService

StatsDep = Annotated[StatsService, service("stats")]

router = APIRouter(
    route_class=OrjsonRoute,
    tags=["ops"],
    responses=ERROR_RESPONSES,
    dependencies=[Depends(require_unscoped)],
)


@router.get("/stats", response_model=StatsOut)
async def get_stats(query: Annotated[StatsQuery, Query()], stats: StatsDep) -> StatsOut:
    """Tasks by status and by user and status, running tasks, the latest failures, the mean
    duration of completed tasks, token usage and call counts.

    Filters combine with AND: `since` <= created_at < `until` (a bound without a zone is UTC),
    and exact `user`, `owner`, `repo`, `task_source`. Unknown parameters are refused (422).
    """
    return await stats.stats(query.filters(), running_limit=query.running_limit)
