"""The ops page with keys configured: a login form for admin keys, a session cookie that
scripts cannot read and that holds no key, accepted on /ui only; without keys it is open."""

from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.auth import sessions
from app.config import ApiKeyConfig
from tests.support.app import running_app
from tests.support.errors import assert_error
from tests.support.settings import fast_settings

pytestmark = pytest.mark.database_agnostic

ADMIN = "admin-3Nf6bT1yH8cJ5zD0"
AGENT = "agent-7Qm2vX9pL4sK8wR1"
SCOPED_ADMIN = "algl-1Zp7gV4kM9wS2aX5"
KEYS: dict[str, dict[str, Any]] = {
    "agent": {"key": AGENT, "role": "agent"},
    "scoped-admin": {"key": SCOPED_ADMIN, "role": "admin", "users": ["alice"]},
}
PAGES = ("/ui", "/ui/stats", "/ui/counts")


@pytest.fixture
async def keyed(tmp_path: Path) -> Any:
    settings = fast_settings(
        tmp_path / "contexts", auth={"api_keys": KEYS, "admin_api_keys": [ADMIN]}
    )
    async with running_app(settings) as client:
        yield client


async def log_in(client: httpx.AsyncClient, key: str) -> httpx.Response:
    return await client.post(
        "/ui/login",
        content=f"key={key}",
        headers={"content-type": "application/x-www-form-urlencoded"},
    )


def session_cookie(response: httpx.Response) -> SimpleCookie:
    jar: SimpleCookie = SimpleCookie()
    jar.load(response.headers["set-cookie"])
    return jar


async def test_without_a_session_pages_send_to_the_form(keyed: httpx.AsyncClient) -> None:
    for path in PAGES:
        response = await keyed.get(path)
        assert response.status_code == 303, path
        assert response.headers["location"] == "/ui/login"
    form = await keyed.get("/ui/login")
    assert form.status_code == 200
    assert '<form method="post" action="/ui/login"' in form.text
    assert (await keyed.get("/ui/static/ops.css")).status_code == 200
    assert_error(await keyed.post("/ui/logout"), 401, "unauthorized")


async def test_an_admin_key_logs_in_with_a_cookie_scripts_cannot_read(
    keyed: httpx.AsyncClient,
) -> None:
    response = await log_in(keyed, ADMIN)
    assert response.status_code == 303
    assert response.headers["location"] == "/ui"
    morsel = session_cookie(response)[sessions.COOKIE]
    assert morsel["httponly"] is True
    assert morsel["samesite"].lower() == "strict"
    assert morsel["path"] == "/ui"
    assert ADMIN not in response.headers["set-cookie"]
    for path in PAGES:
        assert (await keyed.get(path)).status_code == 200, path
    # The cookie stands for the key on the ops page only.
    assert_error(await keyed.get("/tasks"), 401, "unauthorized")
    assert_error(
        await keyed.get("/tasks", headers={"cookie": f"{sessions.COOKIE}={morsel.value}"}),
        401,
        "unauthorized",
    )
    out = await keyed.post("/ui/logout")
    assert out.status_code == 303
    assert (await keyed.get("/ui")).status_code == 303


@pytest.mark.parametrize("key", [AGENT, SCOPED_ADMIN, "guess-8Yt2bN6vC1xZ4mQ9", ""])
async def test_other_keys_get_the_form_again(keyed: httpx.AsyncClient, key: str) -> None:
    response = await log_in(keyed, key)
    assert response.status_code == 401
    assert 'id="login-refused"' in response.text
    assert "set-cookie" not in response.headers
    assert (await keyed.get("/ui")).status_code == 303


async def test_a_forged_or_stale_session_is_no_session(keyed: httpx.AsyncClient) -> None:
    value = session_cookie(await log_in(keyed, ADMIN))[sessions.COOKIE].value
    keyed.cookies.clear()
    name, expiry, signature = value.split(".")
    for forged in (
        f"{name}.{int(expiry) + 3600}.{signature}",  # lengthened
        f"agent.{expiry}.{signature}",  # another key's name
        f"{name}.{expiry}.{signature[:-2]}AA",
        "admin-1",
        "",
    ):
        response = await keyed.get("/ui", headers={"cookie": f"{sessions.COOKIE}={forged}"})
        assert response.status_code == 303, forged
    admin = ApiKeyConfig.model_validate({"key": ADMIN, "role": "admin"})
    stale = sessions.issue({"admin-1": admin}, "admin-1", now=0)  # expired decades ago
    response = await keyed.get("/ui", headers={"cookie": f"{sessions.COOKIE}={stale}"})
    assert response.status_code == 303


async def test_key_headers_work_on_the_pages_too(keyed: httpx.AsyncClient) -> None:
    assert (await keyed.get("/ui", headers={"authorization": f"Bearer {ADMIN}"})).status_code == 200
    assert_error(
        await keyed.get("/ui", headers={"authorization": f"Bearer {AGENT}"}),
        403,
        "admin_key_required",
    )
    assert_error(
        await keyed.get("/ui", headers={"x-api-key": SCOPED_ADMIN}), 403, "key_scope_too_narrow"
    )
    assert_error(await keyed.get("/ui", headers={"authorization": "Bearer nope"}), 401)


async def test_without_keys_the_pages_are_open(client: httpx.AsyncClient) -> None:
    assert (await client.get("/ui")).status_code == 200
    assert "Log out" not in (await client.get("/ui")).text
    form = await client.get("/ui/login")
    assert form.status_code == 303
    assert form.headers["location"] == "/ui"
    assert (await log_in(client, ADMIN)).status_code == 401
