"""The MCP server over streamable HTTP, as a route of the service's app.

Stateless, with JSON answers: each POST stands alone, so any worker of any process can answer
it (no session lives in one process's memory). The service's middlewares run before it, as
for any route: the API key is checked (its principal is in the request's state), the body
bounded. Its Host and Origin headers are not restricted: a key guards it as it guards every
other route.
"""

from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.routing import BaseRoute

from app.auth.keys import OPEN
from app.auth.middleware import PRINCIPAL
from app.mcp_server.mount import PATH
from app.mcp_server.server import Caller, build_server


def request_caller(ctx: Context[Any, Any]) -> Caller:
    """The app's services (put in every request's state by the lifespan) and the key's
    principal (put there by the auth middleware; none: auth is off)."""
    request = ctx.request_context.request
    if not isinstance(request, Request):
        raise TypeError("an MCP request over HTTP carries its HTTP request")
    state = request.state
    return Caller(services=state.services, principal=getattr(state, PRINCIPAL, OPEN))


def http_route(server: MCPServer[Any], max_body_bytes: int) -> BaseRoute:
    """The route serving ``server`` at PATH; its session manager must run while the app does
    (``server.session_manager.run()`` in the lifespan)."""
    sub_app = server.streamable_http_app(
        streamable_http_path=PATH,
        stateless_http=True,
        json_response=True,
        max_request_body_size=max_body_bytes,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    return next(r for r in sub_app.routes if getattr(r, "path", None) == PATH)


def app_server(max_body_bytes: int) -> tuple[MCPServer[Any], BaseRoute]:
    """The app's MCP server, its callers found in each request, and its route."""
    server = build_server(request_caller)
    return server, http_route(server, max_body_bytes)
