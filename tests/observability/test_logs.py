"""Structured logs: JSON lines with the task uuid, in requests and in jobs; no secrets."""

import io
import json
import logging
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from app.config import Settings
from app.observability.logs import ServiceHandler, configure_logging, task_context
from tests.fakes import llm_server
from tests.fakes.llm_server import FakeLLM
from tests.support.app import logged_service
from tests.support.conversations import file_turns
from tests.support.tasks import new_task
from tests.support.waits import settled_jobs

fake_llm = llm_server.fake_llm  # the fixture: a real HTTP server on 127.0.0.1

UUID = "550e8400-e29b-41d4-a716-446655440000"


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """These tests point the service's handler at a buffer; put back the default after."""
    yield
    configure_logging(Settings())


def _without_aiosqlite(counts: Counter[tuple[str, str]]) -> Counter[tuple[str, str]]:
    return Counter({key: n for key, n in counts.items() if key[0] != "aiosqlite"})


def json_lines(output: io.StringIO) -> list[dict[str, Any]]:
    lines = [line for line in output.getvalue().splitlines() if line.strip()]
    assert lines
    return [json.loads(line) for line in lines]  # every line is one JSON object


async def test_json_lines_carry_the_task_uuid_in_requests_and_jobs(context_dir: Path) -> None:
    settings = Settings(
        context_dir=context_dir,
        token_counter="heuristic",
        log={"format": "json"},
        storage={"fsync": "never"},
        job={"poll_s": 0.05},
    )
    async with logged_service(settings) as (client, output):
        # A small window: the appends cross the threshold and a condense job runs.
        uuid = await new_task(client, context_length=4000, max_output_tokens=200)
        other = await new_task(client)
        for message in file_turns(12, size=1200):
            response = await client.post(f"/tasks/{uuid}/messages", json=message)
            assert response.status_code == 201, response.text
        jobs = await settled_jobs(client, uuid)
        assert {j["kind"] for j in jobs} == {"condense"}
        # The condense kept only the newest turn: a few more to truncate.
        response = await client.post(f"/tasks/{uuid}/messages", json={"messages": file_turns(4)})
        assert response.status_code == 201, response.text
        truncated = await client.post(f"/tasks/{uuid}/compress", json={"strategy": "truncate"})
        assert truncated.json()["kind"] == "truncation"
        assert (
            await client.post(f"/tasks/{other}/messages", json=file_turns(1)[0])
        ).status_code == 201
    records = json_lines(output)

    for record in records:
        assert {"timestamp", "level", "logger", "message", "task_uuid"} <= set(record), record
    job_lines = [r for r in records if r["logger"] == "app.jobs.runner"]
    assert job_lines
    assert all(r["task_uuid"] == uuid for r in job_lines), job_lines
    compactions = [r for r in records if r["logger"] == "app.compaction.service"]
    kinds = {
        word for r in compactions for word in ("condense", "truncation") if word in r["message"]
    }
    assert kinds == {"condense", "truncation"}  # one from the job, one from the request
    assert all(r["task_uuid"] == uuid for r in compactions), compactions
    # No line about one task carries the other's uuid (the job ran beside other requests).
    for record in records:
        for task in (uuid, other):
            if task in record["message"] and record["task_uuid"] is not None:
                assert record["task_uuid"] == task, record
    assert any(r["task_uuid"] is None for r in records)  # startup lines are about no task


def test_text_lines_end_with_the_task_uuid_before_any_traceback() -> None:
    output = io.StringIO()
    configure_logging(Settings(log={"format": "text"}), stream=output)
    log = logging.getLogger("app.test")
    log.info("outside")
    with task_context(UUID):
        log.info("inside")
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("failed")
    lines = output.getvalue().splitlines()
    assert lines[0].endswith("INFO app.test outside")
    assert lines[1].endswith(f"INFO app.test inside task={UUID}")
    assert lines[2].endswith(f"ERROR app.test failed task={UUID}")
    assert lines[3] == "Traceback (most recent call last):"


def test_uvicorn_lines_go_through_the_same_handler() -> None:
    output = io.StringIO()
    configure_logging(Settings(log={"format": "json"}), stream=output)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        assert logging.getLogger(name).handlers == []
        assert logging.getLogger(name).propagate
    access = logging.getLogger("uvicorn.access")
    with task_context(UUID):  # uvicorn logs the access line while the app sends its answer
        access.info(
            '%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "GET", f"/tasks/{UUID}", "1.1", 200
        )
    logging.getLogger("uvicorn.error").info("Started", extra={"color_message": "\x1b[1mStarted"})
    first, second = json_lines(output)
    assert first["logger"] == "uvicorn.access"
    assert first["message"] == f'127.0.0.1:5000 - "GET /tasks/{UUID} HTTP/1.1" 200'
    assert first["task_uuid"] == UUID
    assert second["message"] == "Started"
    assert "color_message" not in second


def test_a_second_configuration_replaces_the_first_handler() -> None:
    before = [h for h in logging.getLogger().handlers if not isinstance(h, ServiceHandler)]
    configure_logging(Settings())
    handler = configure_logging(Settings(log={"level": "WARNING"}))
    root = logging.getLogger()
    assert [h for h in root.handlers if isinstance(h, ServiceHandler)] == [handler]
    assert [h for h in root.handlers if not isinstance(h, ServiceHandler)] == before
    assert root.level == logging.WARNING


async def test_no_api_key_or_authorization_header_is_logged(
    context_dir: Path, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    """At DEBUG: a request's bearer token and the LLM API key
    (even when the LLM echoes it in an error) appear in no record and no line."""
    api_key = "sk-live-5ecret-0123456789abcdef"
    token = "agent-token-fedcba9876543210"
    settings = Settings(
        context_dir=context_dir,
        log={"format": "json", "level": "DEBUG"},
        storage={"fsync": "never"},
        llm={
            "backend": "openai",
            "base_url": fake_llm.base_url,
            "model": "fake-model",
            "api_key": SecretStr(api_key),
            "max_retries": 1,
            "retry_backoff_s": 0.01,
        },
    )
    caplog.set_level(logging.DEBUG)
    headers = {"Authorization": f"Bearer {token}", "X-Api-Key": token}
    async with logged_service(settings) as (client, output):
        uuid = await new_task(client)
        path = f"/tasks/{uuid}"
        batch = {"messages": file_turns(16)}
        assert (
            await client.post(f"{path}/messages", json=batch, headers=headers)
        ).status_code == 201
        fake_llm.behaviour = "reject"
        fake_llm.error_message = f"invalid api key {api_key}"
        failed = await client.post(f"{path}/compress", json={}, headers=headers)
        assert failed.status_code == 502
        assert api_key not in failed.text
        fake_llm.error_message = None
        fake_llm.behaviour, fake_llm.failures = "flaky", 1  # one 500, retried, then a summary
        done = await client.post(f"{path}/compress", json={}, headers=headers)
        assert done.json()["kind"] == "condense", done.text
        assert (await client.get(f"{path}/request", headers=headers)).status_code == 200

    # The key was in use, and the run logged plenty (requests, LLM calls, retries, errors).
    assert all(r.headers["authorization"] == f"Bearer {api_key}" for r in fake_llm.requests)
    loggers = {r.name for r in caplog.records}
    assert {"app.llm", "app.api.errors"} <= loggers, loggers
    # httpx and httpcore stay at WARNING even at DEBUG: they would log every URL (a webhook's
    # may carry a token) and, at DEBUG, request headers.
    assert not {name for name in loggers if name.startswith(("httpx", "httpcore"))}
    for record in caplog.records:
        text = f"{record.getMessage()} {record.__dict__!r}"
        assert api_key not in text, record
        assert token not in text, record
    written = output.getvalue()
    # The same records, formatted (aiosqlite's connection threads may still log their last
    # "operation completed" while the two are read: the rest are compared).
    lines = Counter((x["logger"], x["message"]) for x in json_lines(output))
    records = Counter((r.name, r.getMessage()) for r in caplog.records)
    assert _without_aiosqlite(lines) == _without_aiosqlite(records)
    assert api_key not in written
    assert token not in written
