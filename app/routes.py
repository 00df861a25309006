"""Every route of the service, included once per process and shared by the apps it makes.

FastAPI prepares an included route (its dependencies, validators and handler) when the first
request reaches the router it was included in, once per inclusion. Included into each new app,
every route would be prepared again for each app a process makes (the test suite makes
thousands, and preparing was a tenth of its time); included once here, the apps all serve the
same prepared routes. None of them refers to an app: a request finds its app in its scope.
"""

from fastapi import APIRouter, Depends
from fastapi.routing import APIRoute

from app.auth.dependencies import BEARER
from app.compaction.endpoints import router as compaction_router
from app.final_summaries.endpoints import router as final_summaries_router
from app.inheritance.endpoints import router as inheritance_router
from app.jobs.endpoints import router as jobs_router
from app.maintenance.endpoints import router as maintenance_router
from app.messages.endpoints import router as messages_router
from app.ops.endpoints import router as ops_router
from app.payloads.endpoints import router as payloads_router
from app.planning.endpoints import router as planning_router
from app.proxy.endpoints import router as proxy_router
from app.proxy.endpoints import task_router as task_proxy_router
from app.stats.endpoints import router as stats_router
from app.tasks.endpoints import router as tasks_router
from app.threads.endpoints import router as threads_router
from app.tools.endpoints import router as tools_router
from app.ui.endpoints import login_router as ui_login_router
from app.ui.endpoints import router as ui_router

# In routing order: FastAPI tries the routers in turn, and every route it passes costs a
# request a match of its path. An agent's step takes the first two, an append and a payload.
API_ROUTERS = (
    messages_router,
    payloads_router,
    tasks_router,
    compaction_router,
    jobs_router,
    tools_router,
    planning_router,
    final_summaries_router,
    inheritance_router,
    threads_router,
    stats_router,
    maintenance_router,
    proxy_router,
    task_proxy_router,
)
# What every API route depends on besides its own parameters: the bearer scheme, which only
# documents the key (AuthMiddleware checks it). The fast lanes (app/api/routing.py) skip these.
API_DEPENDENCIES = (Depends(BEARER),)
# Without the API's bearer scheme: health and the index need no key (PUBLIC_PATHS); the ops
# page's pages need an admin key (or its session cookie), its login form none.
OPS_ROUTERS = (ops_router, ui_router, ui_login_router)


def _service() -> APIRouter:
    router = APIRouter()
    for api_router in API_ROUTERS:
        router.include_router(api_router, dependencies=list(API_DEPENDENCIES))
    for ops in OPS_ROUTERS:
        router.include_router(ops)
    return router


service = _service()


def documented_paths() -> list[str]:
    """The path templates of the OpenAPI document (``/tasks/{uuid}``), in routing order."""
    return [
        route.path
        for router in (*API_ROUTERS, *OPS_ROUTERS)
        if router.include_in_schema
        for route in router.routes
        if isinstance(route, APIRoute) and route.include_in_schema
    ]
