"""/ui: the ops page's HTML (left out of the OpenAPI schema: it is no API), its login form and
the live status counts its script polls."""

import time
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Depends, Query, Request, status
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from app.api.deps import TaskUUID, service
from app.auth import sessions
from app.auth.dependencies import require_admin, require_unscoped
from app.config import Settings
from app.ui.pages import OpsPages, TaskListQuery
from app.ui.schemas import ContextChoice, HistoryChoice, StatsChoice, TaskFilters

HERE = Path(__file__).parent
STATIC_DIR = HERE / "static"
templates = Jinja2Templates(directory=HERE / "templates")
templates.env.filters["number"] = lambda value: f"{value:,}" if value is not None else "—"
templates.env.filters["when"] = lambda value: (
    value.strftime("%Y-%m-%d %H:%M:%S") if isinstance(value, datetime) else "—"
)

PagesDep = Annotated[OpsPages, service("ui")]
SettingsDep = Annotated[Settings, service("settings")]

# The pages need an admin key for every tenant: they show every task and the figures across.
router = APIRouter(
    prefix="/ui",
    include_in_schema=False,
    dependencies=[Depends(require_admin), Depends(require_unscoped)],
)
login_router = APIRouter(prefix="/ui", include_in_schema=False)


def _page(request: Request, template: str, **context: Any) -> HTMLResponse:
    keys = request.app.state.settings.auth.keys
    return templates.TemplateResponse(request, template, {"logged_in": bool(keys), **context})


@router.get("", response_class=HTMLResponse)
async def tasks_page(
    request: Request, form: Annotated[TaskFilters, Query()], pages: PagesDep
) -> HTMLResponse:
    """Tasks, newest first, filtered, a page at a time; the count of each status."""
    found = await pages.task_list(
        TaskListQuery(
            filters=form.columns(),
            created_after=form.created_after,
            created_before=form.created_before,
            cursor=form.cursor,
        )
    )
    next_url = None
    if found.next_cursor is not None:
        next_url = "/ui?" + urlencode(form.query(cursor=found.next_cursor))
    first_url = "/ui?" + urlencode(form.query(cursor=None)) if form.cursor else None
    return _page(
        request, "tasks.html", form=form, page=found, next_url=next_url, first_url=first_url
    )


@router.get("/counts")
async def status_counts(pages: PagesDep) -> JSONResponse:
    """The count of each status, for the list's live counts."""
    return JSONResponse(await pages.counts())


@router.get("/tasks/{uuid}", response_class=HTMLResponse)
async def task_page(
    request: Request, uuid: TaskUUID, form: Annotated[ContextChoice, Query()], pages: PagesDep
) -> HTMLResponse:
    """One task: its record, its context drawn, its compactions, threads, jobs, final summary
    and inheritance."""
    detail = await pages.task_detail(uuid, form.thread_id)
    return _page(request, "task.html", detail=detail, task=detail.task)


@router.get("/tasks/{uuid}/history", response_class=HTMLResponse)
async def history_page(
    request: Request, uuid: TaskUUID, form: Annotated[HistoryChoice, Query()], pages: PagesDep
) -> HTMLResponse:
    """A page of a context's history, from the message after ``after_seq``."""
    found = await pages.history(uuid, form.after_seq, form.thread_id)
    return _page(request, "history.html", uuid=uuid, form=form, page=found)


@router.get("/stats", response_class=HTMLResponse)
async def stats_page(
    request: Request, form: Annotated[StatsChoice, Query()], pages: PagesDep
) -> HTMLResponse:
    """The /stats figures, with tasks, tokens, compactions and failures over time."""
    return _page(request, "stats.html", page=await pages.stats_page(form.bucket))


@login_router.get("/login", response_class=HTMLResponse)
async def login_form(request: Request, settings: SettingsDep) -> Response:
    """The form asking for an admin key (without keys configured, the pages are open)."""
    if not settings.auth.keys:
        return RedirectResponse("/ui", status_code=status.HTTP_303_SEE_OTHER)
    return templates.TemplateResponse(request, "login.html", {"refused": False})


@login_router.post("/login", response_class=HTMLResponse)
async def login(request: Request, settings: SettingsDep) -> Response:
    """Check the key the form posted; a session cookie for an admin key, the form again
    (401) for anything else. The key goes in the body, never in a URL."""
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    presented = (form.get("key") or [""])[0].strip()
    keys = settings.auth.keys
    principal = sessions.login(keys, presented) if keys else None
    if principal is None or principal.name is None:
        return templates.TemplateResponse(
            request, "login.html", {"refused": True}, status_code=status.HTTP_401_UNAUTHORIZED
        )
    answer = RedirectResponse("/ui", status_code=status.HTTP_303_SEE_OTHER)
    answer.set_cookie(
        sessions.COOKIE,
        sessions.issue(keys, principal.name, time.time()),
        max_age=sessions.SESSION_S,
        path=sessions.COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return answer


@login_router.post("/logout")
async def logout() -> Response:
    """Forget the session cookie."""
    answer = RedirectResponse("/ui/login", status_code=status.HTTP_303_SEE_OTHER)
    answer.delete_cookie(sessions.COOKIE, path=sessions.COOKIE_PATH, httponly=True)
    return answer
