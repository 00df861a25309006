"""Final summaries: written by a background job after complete and fail (SPEC §9, seed 000 §7.4)."""

import asyncio
from pathlib import Path

import httpx
import pytest
from sqlalchemy import delete

from app.db.engine import open_database
from app.db.models import Job
from app.final_summaries.prompt import FINAL_SUMMARY_PROMPT
from app.tokens.counters import HeuristicCounter
from tests.fakes import llm_server
from tests.fakes.llm_server import FakeLLM
from tests.support.app import running_app
from tests.support.conversations import turns
from tests.support.errors import assert_error
from tests.support.settings import fast_settings, llm_settings
from tests.support.tasks import create_task, run_and_finish
from tests.support.waits import final_summary, until

fake_llm = llm_server.fake_llm


async def test_a_completed_task_gets_an_extractive_final_summary(context_dir: Path) -> None:
    async with running_app(fast_settings(context_dir)) as client:
        task = await run_and_finish(client, "complete")
        uuid = task["uuid"]
        found = await final_summary(client, uuid)
        assert found["status"] == "ready"
        assert found["summarizer"] == "extractive"
        summary = found["summary"]
        assert summary.startswith(f"Final summary of task {uuid} (completed at ")
        assert "Fix the crash in parser.py when the input is empty." in summary
        on_disk = (context_dir / "completed" / uuid / "final_summary.txt").read_text()
        assert on_disk == summary
        assert found["job"]["status"] == "succeeded"
        assert found["job"]["result"]["messages"] == 3  # system prompt, user, assistant


async def test_a_failed_task_s_summary_states_the_error(context_dir: Path) -> None:
    async with running_app(fast_settings(context_dir)) as client:
        task = await run_and_finish(client, "fail")
        summary = (await final_summary(client, task["uuid"]))["summary"]
        assert "(failed at " in summary.splitlines()[0]
        assert "The run failed with this error: tests failed: test_empty_input" in summary


async def test_only_finished_tasks_have_one(context_dir: Path) -> None:
    async with running_app(fast_settings(context_dir)) as client:
        task = await create_task(client)
        response = await client.get(f"/tasks/{task['uuid']}/final-summary")
        assert_error(response, 409, "task_not_finished")
        await client.post(f"/tasks/{task['uuid']}/stop")
        response = await client.get(f"/tasks/{task['uuid']}/final-summary")
        assert_error(response, 409, "task_not_finished")
        response = await client.get("/tasks/6f1c1d0e-0000-4000-8000-000000000000/final-summary")
        assert_error(response, 404, "task_not_found")
        jobs = await client.get("/jobs", params={"task_uuid": task["uuid"]})
        assert [j["kind"] for j in jobs.json()["jobs"]] == []  # a stop queues no summary


async def test_a_chat_backend_gets_the_final_prompt_and_the_whole_history_in_chunks(
    context_dir: Path, fake_llm: FakeLLM
) -> None:
    """A history larger than the summariser's window is summarised in parts, then combined."""
    settings = llm_settings(
        context_dir,
        fake_llm,
        llm={"window": 2048, "max_retries": 0},
        final_summary={"max_tokens": 256},
    )
    fake_llm.set("ok", text="The parser now guards empty input; tests pass.")
    long_turns = turns(8, 750, "step")
    async with running_app(settings) as client:
        task = await run_and_finish(client, "complete", messages=long_turns)
        found = await final_summary(client, task["uuid"])
    assert found["summarizer"] == "openai:fake-model"
    assert found["summary"].endswith("The parser now guards empty input; tests pass.")
    requests = [r.body for r in fake_llm.requests]
    assert len(requests) >= 3  # at least two parts and the combination
    assert all(
        r["messages"][0] == {"role": "system", "content": FINAL_SUMMARY_PROMPT} for r in requests
    )
    sent = "".join(str(m["content"]) for r in requests[:-1] for m in r["messages"])
    for i in range(8):
        assert f"step {i}: " in sent  # every message reached the summariser
    assert "Part 1:" in requests[-1]["messages"][1]["content"]
    assert all(r["max_tokens"] == 256 or r.get("max_completion_tokens") == 256 for r in requests)


async def test_a_backend_that_keeps_failing_gives_way_to_the_digest_on_the_last_attempt(
    context_dir: Path, fake_llm: FakeLLM
) -> None:
    settings = llm_settings(context_dir, fake_llm, llm={"max_retries": 0}, job={"max_attempts": 2})
    fake_llm.set("error")
    async with running_app(settings) as client:
        task = await run_and_finish(client, "fail")
        found = await final_summary(client, task["uuid"])
    assert found["status"] == "ready"
    assert found["summarizer"].startswith("extractive (after ")
    assert found["job"]["attempts"] == 2
    assert "Fix the crash in parser.py" in found["summary"]
    assert len(fake_llm.requests) == 2  # one call per attempt


async def test_a_summary_on_disk_is_pending_until_its_job_has_recorded_its_end(
    context_dir: Path, fake_llm: FakeLLM
) -> None:
    """The job writes the file, then records which summariser wrote it: a file whose job is
    still under way (written by an attempt cut short after it, or by this one a moment before
    its end) is answered as pending, never as ready without its summariser."""
    fake_llm.set("ok", delay=60.0)  # the job's call waits until the test lets it go
    async with running_app(llm_settings(context_dir, fake_llm)) as client:
        task = await run_and_finish(client, "complete")
        uuid = task["uuid"]
        await until(lambda: bool(fake_llm.requests))
        # What an attempt cut short after writing its file leaves beside the running job.
        (context_dir / "completed" / uuid / "final_summary.txt").write_text("An earlier attempt.")
        response = await client.get(f"/tasks/{uuid}/final-summary")
        assert response.status_code == 202, response.text
        assert response.json()["status"] == "pending"
        assert response.json()["summary"] is None
        assert response.json()["job"]["status"] == "running"
        fake_llm.reset()  # the call goes on and answers
        found = await final_summary(client, uuid)
    assert found["status"] == "ready"
    assert found["summarizer"] == "openai:fake-model"
    assert found["summary"].endswith("This is the summary.")


@pytest.mark.parametrize("action", ["complete", "fail"])
async def test_the_job_commits_with_the_transition(context_dir: Path, action: str) -> None:
    """Queued in the transition's own transaction: its row exists as soon as the answer does."""
    settings = fast_settings(context_dir, job={"poll_s": 60.0})
    async with running_app(settings) as client:
        # job.poll_s=60 with the runner woken by the queue: the job may already run; either
        # way the row must be there.
        task = await run_and_finish(client, action)
        jobs = await client.get("/jobs", params={"task_uuid": task["uuid"]})
        kinds = [job["kind"] for job in jobs.json()["jobs"]]
        assert kinds == ["final_summary"]


async def test_a_finished_task_without_summary_or_job_gets_a_job_on_request(
    context_dir: Path,
) -> None:
    """A task finished before final summaries existed (no file, no job): GET queues one."""
    settings = fast_settings(context_dir)
    async with running_app(settings) as client:
        task = await run_and_finish(client, "complete")
        uuid = task["uuid"]
        await final_summary(client, uuid)
        (context_dir / "completed" / uuid / "final_summary.txt").unlink()
        # The state an older release left: through the app's own database layer (an older
        # release's rows cannot be made through today's API).
        db = open_database(settings.effective_database_url)
        try:
            async with db.transaction() as session:
                await session.execute(delete(Job).where(Job.task_uuid == uuid))
        finally:
            await db.dispose()
        response = await client.get(f"/tasks/{uuid}/final-summary")
        assert response.status_code == 202
        assert response.json()["job"]["status"] in ("queued", "running")
        found = await final_summary(client, uuid)
        assert found["status"] == "ready"


async def test_an_unknown_final_summary_backend_falls_back_to_the_digest(
    context_dir: Path,
) -> None:
    async with running_app(fast_settings(context_dir, final_summary={"backend": "gone"})) as client:
        task = await run_and_finish(client, "complete")
        found = await final_summary(client, task["uuid"])
    assert found["status"] == "ready"
    assert found["summarizer"] == "extractive"
    assert found["job"]["attempts"] == 1


async def test_a_condense_that_ends_after_complete_changes_nothing(
    context_dir: Path, fake_llm: FakeLLM
) -> None:
    """The summariser answers after the task completed: the condense is skipped, the final
    statistics stand."""
    settings = llm_settings(
        context_dir,
        fake_llm,
        final_summary={"backend": "extractive"},
        compaction={"keep_recent": 2, "min_to_compress": 2},
    )
    fake_llm.set("ok", delay=1.0)
    conversation = turns(10, 300)
    async with running_app(settings) as client:
        task = await create_task(client, system_prompt="You are a coding agent.")
        uuid = task["uuid"]
        await client.post(f"/tasks/{uuid}/messages", json={"messages": conversation})

        async def complete_meanwhile() -> httpx.Response:
            await until(lambda: bool(fake_llm.requests))
            return await client.post(f"/tasks/{uuid}/complete")

        condensed, completed = await asyncio.gather(
            client.post(f"/tasks/{uuid}/compress", json={"strategy": "condense"}),
            complete_meanwhile(),
        )
        assert completed.status_code == 200
        assert condensed.json()["kind"] == "skipped"
        assert condensed.json()["reason"] == "task_not_running"
        statistics = (await client.get(f"/tasks/{uuid}")).json()["statistics"]
        assert statistics["compression_count"] == 0
        assert not (context_dir / "completed" / uuid / "summaries.jsonl").exists()


async def test_many_parts_are_combined_in_rounds_that_fit_the_window(
    context_dir: Path, fake_llm: FakeLLM
) -> None:
    window = 1024
    settings = llm_settings(
        context_dir, fake_llm, llm={"window": window}, final_summary={"max_tokens": 100}
    )
    fake_llm.set("ok", text="part summary " * 30)  # about 100 tokens, as asked
    conversation = turns(40, 800, "step")
    async with running_app(settings) as client:
        task = await run_and_finish(client, "complete", messages=conversation)
        found = await final_summary(client, task["uuid"])
    assert found["status"] == "ready"
    counter = HeuristicCounter()
    combines = [r.body for r in fake_llm.requests if "Part 1:" in str(r.body["messages"])]
    assert len(combines) >= 2  # more than one round
    for request in fake_llm.requests:
        sent = sum(counter.count_text(str(m["content"])) for m in request.body["messages"])
        assert sent <= window
