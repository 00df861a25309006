"""Swagger UI and ReDoc, from the assets packaged with fastapi-offline: the pages load nothing
from a CDN.

These are module-level routes rather than fastapi-offline's app factory, whose pages are
closures made for each app. FastAPI keeps every endpoint it has classified in module-level
caches (4,096 entries each), so each app made in a process (the test suite makes thousands) was
kept alive, with its routes and services, by its three closures.
"""

from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from starlette.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

from app.ops.endpoints import DOCS_URL, OPENAPI_URL, REDOC_URL

ASSETS_URL = "/static-offline-docs"
ASSETS_DIR = Path(str(files("fastapi_offline") / "static"))
OAUTH2_REDIRECT_URL = f"{DOCS_URL}/oauth2-redirect"

router = APIRouter(include_in_schema=False)


def install_docs(app: FastAPI) -> None:
    """Serve the documentation pages and their assets on ``app``."""
    app.include_router(router)
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS_DIR), name="docs-static")


def _url(request: Request, path: str) -> str:
    """``path`` under the prefix the service is mounted at (a proxy's root path)."""
    return f"{request.scope.get('root_path', '')}{path}"


@router.get(DOCS_URL)
async def swagger_ui(request: Request) -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url=_url(request, OPENAPI_URL),
        title=f"{request.app.title} - Swagger UI",
        oauth2_redirect_url=OAUTH2_REDIRECT_URL,
        swagger_js_url=_url(request, f"{ASSETS_URL}/swagger-ui-bundle.js"),
        swagger_css_url=_url(request, f"{ASSETS_URL}/swagger-ui.css"),
        swagger_favicon_url=_url(request, f"{ASSETS_URL}/favicon.png"),
    )


@router.get(OAUTH2_REDIRECT_URL)
async def swagger_ui_oauth2_redirect() -> HTMLResponse:
    return get_swagger_ui_oauth2_redirect_html()


@router.get(REDOC_URL)
async def redoc(request: Request) -> HTMLResponse:
    return get_redoc_html(
        openapi_url=_url(request, OPENAPI_URL),
        title=f"{request.app.title} - ReDoc",
        redoc_js_url=_url(request, f"{ASSETS_URL}/redoc.standalone.js"),
        with_google_fonts=False,
        redoc_favicon_url=_url(request, f"{ASSETS_URL}/favicon.png"),
    )
