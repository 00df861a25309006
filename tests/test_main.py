"""The shortest path through the service: create, append, read the payload."""

import gc
import weakref
from pathlib import Path

import httpx

from app import routes
from app.config import Settings
from app.main import create_app
from tests.support.lifespan import lifespan_of
from tests.support.tasks import task_body


async def test_create_append_request(client: httpx.AsyncClient) -> None:
    created = await client.post("/tasks", json=task_body(system_prompt="Be brief."))
    assert created.status_code == 201
    uuid = created.json()["uuid"]
    appended = await client.post(f"/tasks/{uuid}/messages", json={"role": "user", "content": "Hi"})
    assert appended.status_code == 201
    assert appended.json()["seqs"] == [2]
    payload = await client.get(f"/tasks/{uuid}/request")
    assert payload.status_code == 200
    assert payload.json()["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]


async def test_an_app_is_freed_once_it_has_stopped(settings: Settings) -> None:
    """Nothing outside an app keeps it alive once it has stopped, documentation pages and all:
    a process that makes many apps (this test suite) does not keep them all."""
    app = create_app(settings)
    async with lifespan_of(app) as started:
        transport = httpx.ASGITransport(app=started)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            for path in ("/", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"):
                assert (await client.get(path)).status_code == 200, path
            created = await client.post("/tasks", json=task_body(system_prompt="Be brief."))
            assert created.status_code == 201, created.text
    freed = weakref.ref(app)
    del app, started, transport, client
    gc.collect()
    assert freed() is None, [type(holder) for holder in gc.get_referrers(freed())]


def test_apps_share_the_routes_fastapi_has_prepared(tmp_path: Path) -> None:
    """Every app made in a process serves the same route objects, so what FastAPI prepares on
    a route's first request (dependencies, validators, handler) is prepared once, not once per
    app; and its settings still come from its own app."""
    one = create_app(Settings(context_dir=tmp_path / "one"))
    keyed = {"admin_api_keys": ["main-test-admin-key-0001"]}  # with keys, no docs are served
    two = create_app(Settings(context_dir=tmp_path / "two", auth=keyed))
    for app in (one, two):
        assert all(any(r is route for r in app.router.routes) for route in routes.service.routes)
    assert "/openapi.json" in [getattr(r, "path", None) for r in one.router.routes]
    assert "/openapi.json" not in [getattr(r, "path", None) for r in two.router.routes]
