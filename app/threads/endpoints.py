"""/tasks/{uuid}/threads: nested contexts (SPEC §8)."""

from fastapi import APIRouter, status

from app.api.deps import ServicesDep, TaskUUID
from app.api.errors import ERROR_RESPONSES
from app.threads.schemas import ThreadCreate, ThreadOut

router = APIRouter(prefix="/tasks/{uuid}/threads", tags=["threads"], responses=ERROR_RESPONSES)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ThreadOut)
async def start_thread(uuid: TaskUUID, body: ThreadCreate, services: ServicesDep) -> ThreadOut:
    """Start a thread under the root context (0) or another active thread; 409 past the depth
    limit. Its window is its parent's times ``window_ratio``."""
    return await services.threads.start(uuid, body)


@router.get("", response_model=ThreadOut)
async def thread_tree(uuid: TaskUUID, services: ServicesDep) -> ThreadOut:
    """The task's contexts as a tree: the root (thread 0) and its threads, with windows."""
    return await services.threads.tree(uuid)
