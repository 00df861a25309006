"""Liveness and readiness."""

import httpx


async def test_healthz_is_ok(client: httpx.AsyncClient) -> None:
    """/healthz answers 200 {"status": "ok"} while the process is up."""
    response = await client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_readyz_reports_every_check_ok(client: httpx.AsyncClient) -> None:
    """/readyz answers 200 when the database answers and CONTEXT_DIR is writable."""
    response = await client.get("/readyz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ready"
    assert body["checks"] == {"database": "ok", "context_dir": "ok"}
