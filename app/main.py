"""The ASGI application: ``uvicorn app.main:app``."""

from fastapi import FastAPI
from starlette.routing import Route
from starlette.staticfiles import StaticFiles

from app import routes
from app.api.errors import install_error_handlers, install_error_schema
from app.api.limits import BodyLimitMiddleware, NulQueryMiddleware
from app.auth.middleware import AuthMiddleware
from app.config import Settings
from app.lifespan import lifespan
from app.mcp_server.mount import PATH as MCP_PATH
from app.mcp_server.mount import LazyMCP
from app.observability.logs import configure_logging
from app.observability.middleware import RequestMetricsMiddleware, TaskLogContextMiddleware
from app.ops.docs import install_docs
from app.ops.endpoints import OPENAPI_URL, SUMMARY, VERSION
from app.ui.endpoints import STATIC_DIR


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
        routes=routes.service.routes,  # prepared once per process (app.routes says why)
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
    app.add_middleware(RequestMetricsMiddleware, templates=routes.documented_paths())
    app.add_middleware(TaskLogContextMiddleware)
    if docs_public:
        install_docs(app)
    app.mount("/ui/static", StaticFiles(directory=STATIC_DIR), name="ui-static")
    # The MCP server: a plain route (not in the OpenAPI document), behind the same middlewares;
    # made on its first request, while the lifespan runs.
    mcp = LazyMCP(settings.limits.max_body_bytes)
    app.router.routes.append(Route(MCP_PATH, mcp))
    app.state.mcp = mcp
    return app


app = create_app()
