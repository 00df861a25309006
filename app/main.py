"""The ASGI application: ``uvicorn app.main:app``."""

from fastapi import Depends, FastAPI
from starlette.routing import Route
from starlette.staticfiles import StaticFiles

from app.api.errors import install_error_handlers, install_error_schema
from app.api.limits import BodyLimitMiddleware, NulQueryMiddleware
from app.auth.dependencies import BEARER
from app.auth.middleware import AuthMiddleware
from app.compaction.endpoints import router as compaction_router
from app.config import Settings
from app.final_summaries.endpoints import router as final_summaries_router
from app.inheritance.endpoints import router as inheritance_router
from app.jobs.endpoints import router as jobs_router
from app.lifespan import lifespan
from app.maintenance.endpoints import router as maintenance_router
from app.mcp_server.mount import PATH as MCP_PATH
from app.mcp_server.mount import LazyMCP
from app.messages.endpoints import router as messages_router
from app.observability.logs import configure_logging
from app.observability.middleware import RequestMetricsMiddleware, TaskLogContextMiddleware
from app.ops.docs import install_docs
from app.ops.endpoints import OPENAPI_URL, SUMMARY, VERSION
from app.ops.endpoints import router as ops_router
from app.payloads.endpoints import router as payloads_router
from app.planning.endpoints import router as planning_router
from app.proxy.endpoints import router as proxy_router
from app.proxy.endpoints import task_router as task_proxy_router
from app.stats.endpoints import router as stats_router
from app.tasks.endpoints import router as tasks_router
from app.threads.endpoints import router as threads_router
from app.tools.endpoints import router as tools_router
from app.ui.endpoints import STATIC_DIR
from app.ui.endpoints import login_router as ui_login_router
from app.ui.endpoints import router as ui_router


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    configure_logging(settings)
    docs_public = settings.auth.docs_public
    app = FastAPI(
        title="Context service",
        summary=SUMMARY,
        version=VERSION,
        lifespan=lifespan,
        openapi_url=OPENAPI_URL if docs_public else None,
        docs_url=None,  # app.ops.docs serves them, from packaged assets
        redoc_url=None,
    )
    app.state.settings = settings
    install_error_handlers(app)
    install_error_schema(app)
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=settings.limits.max_body_bytes,
        read_timeout_s=settings.limits.body_read_timeout_s,
        discard_bytes=settings.limits.max_discard_bytes,
        discard_timeout_s=settings.limits.body_discard_timeout_s,
    )
    app.add_middleware(NulQueryMiddleware)
    # Outside the body limit: a caller without a key has nothing of its body read.
    app.add_middleware(AuthMiddleware, keys=settings.auth.keys)
    # Added last, so outermost: requests refused by the body limit are timed and logged too.
    app.add_middleware(RequestMetricsMiddleware)
    app.add_middleware(TaskLogContextMiddleware)
    for router in (
        tasks_router,
        messages_router,
        payloads_router,
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
    ):
        app.include_router(router, dependencies=[Depends(BEARER)])
    app.include_router(ops_router)  # health and the index need no key (PUBLIC_PATHS)
    if docs_public:
        install_docs(app)
    # The ops page: its pages need an admin key (or its session cookie), its login form none.
    app.include_router(ui_router)
    app.include_router(ui_login_router)
    app.mount("/ui/static", StaticFiles(directory=STATIC_DIR), name="ui-static")
    # The MCP server: a plain route (not in the OpenAPI document), behind the same middlewares;
    # made on its first request, while the lifespan runs.
    mcp = LazyMCP(settings.limits.max_body_bytes)
    app.router.routes.append(Route(MCP_PATH, mcp))
    app.state.mcp = mcp
    return app


app = create_app()
