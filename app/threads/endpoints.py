"""/tasks/{uuid}/threads: nested contexts (docs/decisions.md, Threads)."""

from typing import Annotated

from fastapi import APIRouter, Path, status

from app.api.deps import TaskUUID, service
from app.api.errors import ERROR_RESPONSES
from app.api.routing import OrjsonRoute
from app.threads.schemas import ThreadCreate, ThreadEnd, ThreadOut
from app.threads.service import ThreadService

ThreadPath = Annotated[int, Path(ge=1, le=2**31 - 1, description="The thread's id.")]

ThreadsDep = Annotated[ThreadService, service("threads")]

router = APIRouter(
    route_class=OrjsonRoute,
    prefix="/tasks/{uuid}/threads",
    tags=["threads"],
    responses=ERROR_RESPONSES,
)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ThreadOut)
async def start_thread(uuid: TaskUUID, body: ThreadCreate, threads: ThreadsDep) -> ThreadOut:
    """Start a thread under the root context (0) or another active thread; 409 past the depth
    limit. Its window is its parent's times ``window_ratio``."""
    return await threads.start(uuid, body)


@router.get("", response_model=ThreadOut)
async def thread_tree(uuid: TaskUUID, threads: ThreadsDep) -> ThreadOut:
    """The task's contexts as a tree: the root (thread 0) and its threads, with windows."""
    return await threads.tree(uuid)


@router.get("/{thread_id}", response_model=ThreadOut)
async def get_thread(uuid: TaskUUID, thread_id: ThreadPath, threads: ThreadsDep) -> ThreadOut:
    """One thread with the threads under it (its chronicle once the job has written it)."""
    return await threads.get(uuid, thread_id)


@router.post("/{thread_id}/end", response_model=ThreadOut)
async def end_thread(
    uuid: TaskUUID, thread_id: ThreadPath, threads: ThreadsDep, body: ThreadEnd | None = None
) -> ThreadOut:
    """End a thread (completed): it takes no more messages; its chronicle is written by a job
    into its record and its parent's context. 409 while threads under it are active, unless
    ``cascade`` (which aborts them)."""
    return await threads.end(uuid, thread_id, body or ThreadEnd(), abort=False)


@router.post("/{thread_id}/abort", response_model=ThreadOut)
async def abort_thread(
    uuid: TaskUUID, thread_id: ThreadPath, threads: ThreadsDep, body: ThreadEnd | None = None
) -> ThreadOut:
    """Abort a thread, with a partial chronicle if it has messages (unless
    ``generate_chronicle`` is false); 409 while threads under it are active, unless
    ``cascade``."""
    return await threads.end(uuid, thread_id, body or ThreadEnd(), abort=True)
