"""Webhooks (seed 000 §3.13-3.16): configured on the server, called after transitions, retried,
recorded on their jobs, never in the way of the transition."""

import hashlib
import hmac
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import webhook_receiver
from tests.fakes.webhook_receiver import Receiver
from tests.support.app import running_app
from tests.support.errors import assert_error
from tests.support.files import snapshot_dir
from tests.support.server import free_port
from tests.support.settings import fast_settings
from tests.support.tasks import create_task, task_body
from tests.support.waits import settled_jobs, until

receiver = webhook_receiver.receiver  # the fixture: a real HTTP server on 127.0.0.1


def hooks(receiver_url: str, **extra: Any) -> dict[str, Any]:
    return {
        "ops": {"url": f"{receiver_url}/ops", "all_tasks": True, "secret": "s3cret-value"},
        "team": {"url": f"{receiver_url}/team", "events": ["completed"]},
        **extra,
    }


async def test_completion_and_stop_reach_the_receiver(
    context_dir: Path, receiver: Receiver
) -> None:
    settings = fast_settings(context_dir, webhook={"hooks": hooks(receiver.base_url)})
    async with running_app(settings) as client:
        task = await create_task(client, hooks=["team", "team"])  # named twice: called once
        uuid = task["uuid"]
        assert task["hooks"] == ["team"]
        assert (await client.post(f"/tasks/{uuid}/stop")).status_code == 200
        assert (await client.post(f"/tasks/{uuid}/resume")).status_code == 200
        assert (await client.post(f"/tasks/{uuid}/complete")).status_code == 200
        jobs = await settled_jobs(client, uuid, "webhook")
    assert sorted(job["status"] for job in jobs) == ["succeeded"] * 3
    got = sorted((d.path, d.body["event"]) for d in receiver.received())
    # ops hears everything (all_tasks); team only completions, and only for tasks that chose it.
    assert got == [("/ops", "completed"), ("/ops", "stopped"), ("/team", "completed")]
    for delivery in receiver.received():
        record = delivery.body["task"]
        assert record["uuid"] == uuid
        assert (
            record["status"]
            == {"completed": "completed", "stopped": "paused"}[delivery.body["event"]]
        )
        assert delivery.headers["x-context-event"] == delivery.body["event"]
        assert delivery.headers["x-context-delivery"] == str(delivery.body["delivery"])
    signed = [d for d in receiver.received() if d.path == "/ops"]
    for delivery in signed:
        expected = hmac.new(b"s3cret-value", delivery.raw, hashlib.sha256).hexdigest()
        assert delivery.headers["x-context-signature"] == f"sha256={expected}"
    assert all(
        "x-context-signature" not in d.headers for d in receiver.received() if d.path == "/team"
    )


async def test_failure_is_an_event_too(context_dir: Path, receiver: Receiver) -> None:
    settings = fast_settings(context_dir, webhook={"hooks": hooks(receiver.base_url)})
    async with running_app(settings) as client:
        task = await create_task(client)  # chose no hooks: only all-tasks hooks fire
        await client.post(f"/tasks/{task['uuid']}/fail", json={"error_message": "boom"})
        await settled_jobs(client, task["uuid"], "webhook")
    [delivery] = receiver.received()
    assert delivery.body["event"] == "failed"
    assert delivery.body["task"]["error_message"] == "boom"


async def test_a_receiver_that_is_down_neither_blocks_nor_fails_the_transition(
    context_dir: Path,
) -> None:
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    settings = fast_settings(
        context_dir,
        webhook={
            "hooks": {"down": {"url": f"{down}/hook", "all_tasks": True}},
            "max_attempts": 3,
            "timeout_s": 1.0,
        },
    )
    async with running_app(settings) as client:
        task = await create_task(client)
        started = time.monotonic()
        response = await client.post(f"/tasks/{task['uuid']}/complete")
        assert response.status_code == 200, response.text
        assert time.monotonic() - started < 1.0  # answered before any delivery attempt ended
        assert response.json()["status"] == "completed"
        [job] = await settled_jobs(client, task["uuid"], "webhook")
        assert job["status"] == "failed"
        assert job["attempts"] == 3
        # Refused; or, on a machine too busy to see the refusal within the timeout, timed out.
        assert "ConnectError" in job["error"] or "ConnectTimeout" in job["error"]
        assert down not in job["error"]
        assert (await client.get(f"/tasks/{task['uuid']}")).json()["status"] == "completed"


async def test_a_receiver_error_is_retried_until_it_answers(
    context_dir: Path, receiver: Receiver
) -> None:
    receiver.status = 503
    settings = fast_settings(
        context_dir, webhook={"hooks": hooks(receiver.base_url)}, job={"backoff_s": 0.2}
    )
    async with running_app(settings) as client:
        task = await create_task(client)
        await client.post(f"/tasks/{task['uuid']}/complete")
        await until(lambda: len(receiver.received()) >= 2)  # two failed attempts
        receiver.status = 200
        [job] = await settled_jobs(client, task["uuid"], "webhook")
    assert job["status"] == "succeeded"
    assert job["attempts"] >= 3
    assert job["result"] == {"hook": "ops", "event": "completed", "status_code": 200}


async def test_a_task_may_only_name_configured_hooks(context_dir: Path, receiver: Receiver) -> None:
    settings = fast_settings(context_dir, webhook={"hooks": hooks(receiver.base_url)})
    async with running_app(settings) as client:
        before = snapshot_dir(context_dir)
        response = await client.post("/tasks", json=task_body(hooks=["nope"]))
        details = assert_error(response, 422, "unknown_webhook")
        assert details == {"unknown": ["nope"], "configured": ["ops", "team"]}
        response = await client.post("/tasks", json=task_body(hooks=["http://evil.example/x"]))
        assert_error(response, 422, "unknown_webhook")
        assert snapshot_dir(context_dir) == before
        assert (await client.get("/tasks")).json()["tasks"] == []


async def test_a_hook_s_url_is_never_logged(
    context_dir: Path, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """A receiver URL may hold a token (Slack-style): neither httpx nor we log it."""
    secret_path = "services/T000/B000/xoxb-s3cr3t-t0ken"
    settings = fast_settings(
        context_dir, webhook={"hooks": {"slack": {"url": f"{receiver.base_url}/{secret_path}"}}}
    )
    caplog.set_level(logging.DEBUG)
    async with running_app(settings) as client:
        task = await create_task(client, hooks=["slack"])
        await client.post(f"/tasks/{task['uuid']}/complete")
        [job] = await settled_jobs(client, task["uuid"], "webhook")
    assert job["status"] == "succeeded"
    assert receiver.received()[0].path == f"/{secret_path}"
    # The receiver's own access lines (uvicorn, in this process) are not the service's.
    ours = [r for r in caplog.records if not r.name.startswith("uvicorn")]
    assert ours
    assert not [r for r in ours if "s3cr3t" in r.getMessage()]
