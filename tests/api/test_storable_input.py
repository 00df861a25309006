"""Input no file or database could store is refused at the door (422, nothing written), on
SQLite and PostgreSQL alike: lone UTF-16 surrogates anywhere in a body, NUL characters in what
goes to a database column (PostgreSQL's text and jsonb refuse them) or in a query string.
Found by schemathesis (tests/e2e/test_schemathesis.py) as 500s."""

from pathlib import Path

import httpx
import pytest

from tests.support.errors import assert_error
from tests.support.files import snapshot_dir
from tests.support.tasks import create_task, task_body


async def test_a_lone_surrogate_is_invalid_json(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    task = await create_task(client)
    before = snapshot_dir(context_dir)
    for url, raw in [
        ("/tasks", '{"system_prompt": "\\ud854"}'),
        (f"/tasks/{task['uuid']}/messages", '{"role": "user", "content": "\\ud800"}'),
    ]:
        response = await client.post(url, content=raw, headers={"content-type": "application/json"})
        assert_error(response, 422, "invalid_json")
    assert snapshot_dir(context_dir) == before
    # A proper pair is a character like any other.
    response = await client.post(
        f"/tasks/{task['uuid']}/messages",
        content='{"role": "user", "content": "\\ud83d\\ude00"}',
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 201, response.text


@pytest.mark.parametrize(
    "overrides",
    [
        {"model": "gpt\u00004o"},
        {"user": "al\u0000ice"},
        {"metadata": {"k\u0000": 1}},
        {"metadata": {"nested": ["ok", {"v": "a\u0000"}]}},
        {
            "task_key": {
                "task_source": "github",
                "owner": "o\u0000",
                "repo": "r",
                "task_type": "issue",
                "task_id": "1",
            }
        },
    ],
)
async def test_nul_in_a_stored_field_is_refused(
    client: httpx.AsyncClient, context_dir: Path, overrides: dict[str, object]
) -> None:
    response = await client.post("/tasks", json=task_body(**overrides))
    assert_error(response, 422, "validation_error")
    assert not (context_dir / "running").exists() or not any((context_dir / "running").iterdir())


async def test_nul_in_a_failure_message_and_a_query_is_refused(client: httpx.AsyncClient) -> None:
    task = await create_task(client)
    response = await client.post(f"/tasks/{task['uuid']}/fail", json={"error_message": "x\u0000y"})
    assert_error(response, 422, "validation_error")
    assert (await client.get(f"/tasks/{task['uuid']}")).json()["status"] == "running"
    for url in ["/tasks?task_id=a%00b", "/stats?user=a%00", "/jobs?status=queued%00"]:
        assert_error(await client.get(url), 422, "invalid_character")
    # NUL in a message is content like any other: it goes to the task's files, not a column.
    response = await client.post(
        f"/tasks/{task['uuid']}/messages", json={"role": "user", "content": "bytes \u0000 here"}
    )
    assert response.status_code == 201, response.text


async def test_candidates_need_a_whole_key(client: httpx.AsyncClient) -> None:
    params = {
        "task_source": "github",
        "owner": "",
        "repo": "r",
        "task_type": "issue",
        "task_id": "1",
    }
    assert_error(
        await client.get("/inheritance/candidates", params=params), 422, "validation_error"
    )
    params["owner"] = "o" * 256
    assert_error(
        await client.get("/inheritance/candidates", params=params), 422, "validation_error"
    )
    params["owner"] = "o"
    response = await client.get("/inheritance/candidates", params=params)
    assert response.status_code == 200, response.text


async def test_a_job_id_beyond_the_column_is_invalid(client: httpx.AsyncClient) -> None:
    assert_error(await client.get(f"/jobs/{2**31}"), 422, "validation_error")
    assert_error(await client.get(f"/jobs/{2**31 - 1}"), 404, "job_not_found")
