"""The end of a task's life on real servers: final summary, inheritance, webhooks, restarts.

Acceptance of issue 5: a corpus trajectory runs and fails; a new task with the same key starts
from its final summary and planning history (within MAX_SUMMARY_TOKENS) and gets the
notification comment; webhook receivers on 127.0.0.1 hear the stop, failure and completion
(one that is down holds nothing up); a final-summary job cut short by kill -9 completes after
the restart.
"""

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from app.formats.costs import TokenCounting
from tests.fakes import webhook_receiver
from tests.fakes.llm_server import running_fake_llm
from tests.fakes.webhook_receiver import Receiver
from tests.support.corpus import corpus_messages
from tests.support.server import ServerPool, free_port
from tests.support.tasks import task_body
from tests.support.waits import final_summary

pytestmark = pytest.mark.e2e

TRAJECTORY = "openhands__multiswe_ponyc-4595.jsonl"
MAX_SUMMARY_TOKENS = 800
PLANS = (
    "1. Reproduce the compiler crash\n2. Find the faulty pass",
    "1. Crash reproduced\n2. Patch the pass and add a regression test",
)
WAIT_S = 30.0


receiver = webhook_receiver.receiver  # the fixture: a real HTTP server on 127.0.0.1


async def timed_post(http: httpx.AsyncClient, path: str, **kwargs: Any) -> dict[str, Any]:
    started = time.monotonic()
    response = await http.post(path, **kwargs)
    assert response.status_code == 200, response.text
    assert time.monotonic() - started < 2.0  # a dead receiver holds nothing up
    body: dict[str, Any] = response.json()
    return body


async def test_a_failed_run_is_inherited_by_the_next(
    servers: ServerPool, receiver: Receiver
) -> None:
    hooks = {
        "ops": {"url": f"{receiver.base_url}/ops", "all_tasks": True},
        "down": {"url": f"http://127.0.0.1:{free_port()}/hook", "all_tasks": True},
    }
    srv = servers.start(
        env={
            "WEBHOOKS": json.dumps(hooks),
            "MAX_SUMMARY_TOKENS": str(MAX_SUMMARY_TOKENS),
            "JOB_POLL_S": "0.1",
            "JOB_BACKOFF_S": "0.1",
        }
    )
    messages = corpus_messages(TRAJECTORY)
    system, rest = messages[0], messages[1:]
    assert system["role"] == "system"
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
        body = task_body(system_prompt=system["content"], inherit=True)
        response = await http.post("/tasks", json=body)
        assert response.status_code == 201, response.text
        first = response.json()
        assert first["inheritance"] is None  # nothing to inherit yet
        uuid = first["uuid"]
        for start in range(0, len(rest), 50):
            batch = {"messages": rest[start : start + 50]}
            response = await http.post(f"/tasks/{uuid}/messages", json=batch)
            assert response.status_code == 201, response.text
        for number, plan in enumerate(PLANS):
            kind = "initial" if number == 0 else "revision"
            entry = {"plan_type": kind, "plan_content": plan}
            assert (await http.post(f"/tasks/{uuid}/planning", json=entry)).status_code == 201
        await timed_post(http, f"/tasks/{uuid}/stop")
        await timed_post(http, f"/tasks/{uuid}/resume")
        failed = await timed_post(
            http, f"/tasks/{uuid}/fail", json={"error_message": "build failed: ponyc crashed"}
        )
        assert failed["status"] == "failed"
        summary = (await final_summary(http, uuid))["summary"]
        assert "The run failed with this error: build failed: ponyc crashed" in summary

        response = await http.post("/tasks", json=task_body(system_prompt=system["content"]))
        assert response.status_code == 201, response.text
        second = response.json()
        assert second["inherited_from"] == uuid
        comment = second["notification_comment"]
        assert uuid in comment
        assert "failed" in comment
        assert second["inheritance"]["summary_source"] == "final_summary"
        payload = (await http.get(f"/tasks/{second['uuid']}/request")).json()
        inherited = payload["messages"][1]
        assert inherited["role"] == "system"
        content = inherited["content"]
        counter = TokenCounting("auto").counter(second["context"]["token_counter"])
        assert counter.count_text(content) <= MAX_SUMMARY_TOKENS
        assert summary[:300] in content  # the summary's beginning...
        assert PLANS[1] in content  # ...and the latest plan
        assert "Continue the task from where the previous run left off" in content
        assert (await http.get(f"/tasks/{second['uuid']}/inheritance")).json()["inherited_from"]
        await timed_post(http, f"/tasks/{second['uuid']}/complete")

        deadline = time.monotonic() + WAIT_S
        while len(receiver.received()) < 3:
            assert time.monotonic() < deadline, receiver.received()
            await asyncio.sleep(0.1)
        jobs = (await http.get("/jobs", params={"task_uuid": uuid})).json()["jobs"]
    events = sorted((d.body["task"]["uuid"], d.body["event"]) for d in receiver.received())
    assert events == sorted([(uuid, "stopped"), (uuid, "failed"), (second["uuid"], "completed")])
    down_jobs = [j for j in jobs if j["kind"] == "webhook" and j["status"] != "succeeded"]
    assert len(down_jobs) == 2  # stop and failure to the dead receiver: retried, recorded


async def test_a_final_summary_job_cut_short_completes_after_a_restart(
    servers: ServerPool,
) -> None:
    """The summariser hangs; the server is killed with the job running and another queued;
    after the restart (extractive backend) both summaries are written."""
    with running_fake_llm() as fake:
        fake.set("hang")
        env = {
            "LLM_BACKEND": "openai",
            "LLM_BASE_URL": fake.base_url,
            "LLM_MODEL": "fake-model",
            "LLM_TIMEOUT_S": "120",
            "JOB_LEASE_S": "1",
            "JOB_POLL_S": "0.1",
            "JOB_CONCURRENCY": "1",
        }
        srv = servers.start(env=env)
        uuids = []
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
            for _ in range(2):
                response = await http.post("/tasks", json=task_body(inherit=False))
                uuid = response.json()["uuid"]
                turn = {"role": "user", "content": "Make the parser accept empty input."}
                await http.post(f"/tasks/{uuid}/messages", json=turn)
                await timed_post(http, f"/tasks/{uuid}/complete")
                uuids.append(uuid)
            deadline = time.monotonic() + WAIT_S
            while not fake.requests:  # the first job is with the summariser
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            statuses = [
                (await http.get(f"/tasks/{u}/final-summary")).json()["job"]["status"] for u in uuids
            ]
            assert statuses == ["running", "queued"]
        srv.kill()
    await asyncio.sleep(1.2)  # the running job's lease runs out
    restarted = servers.start(env={"JOB_POLL_S": "0.1"})
    async with httpx.AsyncClient(base_url=restarted.base_url, timeout=30) as http:
        for uuid in uuids:
            found = await final_summary(http, uuid)
            assert found["status"] == "ready"
            assert found["summarizer"] == "extractive"
            assert "Make the parser accept empty input." in found["summary"]
