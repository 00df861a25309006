"""Background condense jobs and the LLM backends behind them, against a real fake LLM server.

The service's appends never wait for a summariser; a failing or hanging summariser ends its
job failed with the error, and GET /request still serves a payload within the budget.
"""

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from app.summaries.summarizer import DEFAULT_PROMPT, KEPT_LABEL
from tests.fakes import llm_server
from tests.fakes.llm_server import Behaviour, FakeLLM
from tests.support.app import running_app
from tests.support.conversations import file_turns
from tests.support.settings import impatient_llm_settings
from tests.support.tasks import new_task, task_body

Client = httpx.AsyncClient


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    """The seed 000 heuristic: the tests size their contexts by characters / 4."""
    return Settings(context_dir=context_dir, token_counter="heuristic")


fake_llm = llm_server.fake_llm  # the fixture: a real HTTP server on 127.0.0.1
PATHS = {"openai": "/v1/chat/completions", "ollama": "/api/chat", "anthropic": "/v1/messages"}
TASK = {"system_prompt": "Be useful.", "max_output_tokens": 200}  # and a window of its own


async def fill(client: Client, uuid: str, count: int, size: int = 1200) -> list[dict[str, Any]]:
    """Append user/assistant turns one at a time; return the append answers."""
    answers = []
    for message in file_turns(count, size):
        response = await client.post(f"/tasks/{uuid}/messages", json=message)
        assert response.status_code == 201, response.text
        answers.append(response.json())
    return answers


async def wait_for(check: Callable[[], Any], seconds: float = 60.0) -> Any:
    """Poll an async check until it returns something truthy (bounded)."""
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        result = await check()
        if result:
            return result
        assert asyncio.get_running_loop().time() < deadline, "timed out waiting"
        await asyncio.sleep(0.05)


def jobs_of(client: Client, uuid: str) -> Callable[[], Any]:
    async def check() -> list[dict[str, Any]]:
        response = await client.get("/jobs", params={"task_uuid": uuid})
        jobs: list[dict[str, Any]] = response.json()["jobs"]
        return jobs

    return check


def finished_job(client: Client, uuid: str) -> Callable[[], Any]:
    async def check() -> dict[str, Any] | None:
        jobs = await jobs_of(client, uuid)()
        done = [j for j in jobs if j["status"] in ("succeeded", "failed", "skipped")]
        return done[0] if done else None

    return check


async def test_crossing_the_threshold_schedules_one_extractive_condense(
    client: Client, settings: Settings
) -> None:
    """The append that crosses the threshold says compaction_scheduled; the job condenses."""
    uuid = await new_task(client, context_length=4000, **TASK)
    answers = await fill(client, uuid, 12)
    scheduled = [a["compaction_scheduled"] for a in answers]
    assert scheduled.count(True) >= 1
    job = await wait_for(finished_job(client, uuid))
    assert job["status"] == "succeeded", job
    assert job["kind"] == "condense"
    assert job["result"]["kind"] == "condense"
    assert job["result"]["tokens_after"] < job["result"]["tokens_before"]
    summaries = (await client.get(f"/tasks/{uuid}/summaries")).json()["summaries"]
    assert [s["kind"] for s in summaries] == ["condense"]
    assert summaries[0]["summarizer"] == "extractive"
    task = (await client.get(f"/tasks/{uuid}")).json()
    assert task["statistics"]["compression_count"] == 1


@pytest.mark.parametrize("kind", sorted(PATHS))
async def test_each_wire_format_summarises(
    context_dir: Path,
    fake_llm: FakeLLM,
    kind: str,
) -> None:
    """A condense through each backend kind puts the LLM's summary in the context."""
    fake_llm.set("ok", text="Summary from the fake model: src/mod_3.py was edited.")
    async with running_app(impatient_llm_settings(context_dir, fake_llm, kind)) as client:
        uuid = await new_task(client, context_length=100_000, **TASK)
        await fill(client, uuid, 12, size=100)
        outcome = (await client.post(f"/tasks/{uuid}/compress", json={})).json()
        assert outcome["kind"] == "condense", outcome
        payload = (await client.get(f"/tasks/{uuid}/request")).json()
    texts = [m["content"] for m in payload["messages"]]
    assert any("Summary from the fake model" in t for t in texts)
    assert fake_llm.paths() == [PATHS[kind]]


@pytest.mark.parametrize("behaviour", ["error", "hang"])
async def test_a_failing_summariser_fails_the_job_and_request_still_fits(
    context_dir: Path,
    fake_llm: FakeLLM,
    behaviour: Behaviour,
) -> None:
    """Errors and hangs: the job ends failed with its error (after its retries), and /request
    still serves a payload within budget, by truncation."""
    fake_llm.set(behaviour)
    settings = impatient_llm_settings(context_dir, fake_llm, llm={"timeout_s": 0.3})
    async with running_app(settings) as client:
        uuid = await new_task(client, context_length=4000, **TASK)
        await fill(client, uuid, 12)
        job = await wait_for(finished_job(client, uuid))
        assert job["status"] == "failed", job
        assert job["attempts"] == 2
        assert job["error"]
        await fill(client, uuid, 14)
        response = await client.get(f"/tasks/{uuid}/request")
        assert response.status_code == 200, response.text
        assert int(response.headers["X-Context-Tokens"]) <= int(
            response.headers["X-Context-Budget"]
        )
        kinds = [
            s["kind"] for s in (await client.get(f"/tasks/{uuid}/summaries")).json()["summaries"]
        ]
        assert "truncation" in kinds
        assert "condense" not in kinds


async def test_appends_do_not_wait_for_a_slow_summariser(
    context_dir: Path,
    fake_llm: FakeLLM,
) -> None:
    """While a summariser takes seconds, appends keep being answered: all of them come back
    while the LLM request is still unanswered."""
    fake_llm.set("ok", delay=3.0)
    async with running_app(
        impatient_llm_settings(context_dir, fake_llm, llm={"timeout_s": 10})
    ) as client:
        uuid = await new_task(client, context_length=4000, **TASK)
        await fill(client, uuid, 12)
        await wait_for(lambda: _returns(bool(fake_llm.requests)))
        await fill(client, uuid, 10, size=50)  # answered while the summary is pending
        jobs = await jobs_of(client, uuid)()
        assert [j["status"] for j in jobs] == ["running"]
        job = await wait_for(finished_job(client, uuid))
        assert job["status"] == "succeeded", job
        assert job["result"]["kind"] == "condense"
        history = (await client.get(f"/tasks/{uuid}/messages", params={"limit": 1000})).json()
        payload = (await client.get(f"/tasks/{uuid}/request")).json()
    contents = [m["content"] for m in history["messages"] if "marker" not in m]
    assert sum("turn" in (c or "") for c in contents) == 22  # nothing appended was lost
    # The 10 appended while the summariser ran stay in the context, after the summary.
    texts = [m["content"] or "" for m in payload["messages"]]
    assert all(any(t.startswith(f"turn {n} ") for t in texts[-10:]) for n in range(10))
    assert any(t.startswith("[Summary of the earlier conversation") for t in texts)


async def _returns(value: bool) -> bool:
    return value


async def test_a_job_running_when_the_process_stopped_resumes_after_restart(
    context_dir: Path,
    fake_llm: FakeLLM,
) -> None:
    """The process stops mid-job (its LLM call hangs); after a restart the lease runs out,
    the job is queued again and completes."""
    fake_llm.set("hang")
    # A lease long enough to be renewed in time on a loaded machine (one that lapses while the
    # first process runs would be a second attempt before the restart).
    settings = impatient_llm_settings(
        context_dir, fake_llm, llm={"timeout_s": 30}, job={"lease_s": 2.0}
    )
    async with running_app(settings) as client:
        uuid = await new_task(client, context_length=4000, **TASK)
        await fill(client, uuid, 12)
        await wait_for(lambda: _returns(bool(fake_llm.requests)))
        assert [j["status"] for j in await jobs_of(client, uuid)()] == ["running"]
    fake_llm.set("ok", text="Resumed summary.")
    await asyncio.sleep(2.1)  # the dead process's lease runs out
    async with running_app(settings) as client:
        job = await wait_for(finished_job(client, uuid))
        assert job["status"] == "succeeded", job
        assert job["attempts"] == 2
        payload = (await client.get(f"/tasks/{uuid}/request")).json()
    assert any("Resumed summary." in (m["content"] or "") for m in payload["messages"])


async def test_a_task_picks_its_summariser_by_name_only(
    context_dir: Path,
    fake_llm: FakeLLM,
) -> None:
    """With an LLM configured, a task that chose "extractive" is condensed without it; an
    unknown name (or anything like a URL) is refused at creation."""
    async with running_app(impatient_llm_settings(context_dir, fake_llm)) as client:
        for name in ("nope", "http://127.0.0.1:9/v1"):
            body = task_body(model="m", summary_backend=name)
            refused = await client.post("/tasks", json=body)
            assert refused.status_code == 422, refused.text
            assert refused.json()["error"]["code"] == "unknown_backend"
        body = task_body(
            context_length=100_000, summary_backend="extractive", system_prompt="Be useful."
        )
        uuid = (await client.post("/tasks", json=body)).json()["uuid"]
        await fill(client, uuid, 12)
        response = await client.post(f"/tasks/{uuid}/compress", json={})
        assert response.status_code == 200, response.text
        assert response.json()["kind"] == "condense", response.text
        summaries = (await client.get(f"/tasks/{uuid}/summaries")).json()["summaries"]
    assert summaries[0]["summarizer"] == "extractive"
    assert fake_llm.requests == []


async def test_a_span_larger_than_the_summariser_window_is_summarised_in_chunks(
    context_dir: Path,
    fake_llm: FakeLLM,
) -> None:
    """The summariser's own window is small: the span goes in several calls, each within it,
    and one more call combines their summaries."""
    fake_llm.set("ok", text="Part summary.")
    settings = impatient_llm_settings(
        context_dir, fake_llm, llm={"window": 1500}, compaction={"summary_max_tokens": 200}
    )
    async with running_app(settings) as client:
        uuid = await new_task(client, context_length=100_000, **TASK)
        await fill(client, uuid, 14)
        response = await client.post(f"/tasks/{uuid}/compress", json={})
        assert response.json()["kind"] == "condense", response.text
    bodies = [r.body for r in fake_llm.requests]
    assert len(bodies) >= 3
    combine = bodies[-1]["messages"][-1]["content"]
    assert combine.startswith("These are summaries of consecutive parts")
    assert combine.count("Part summary.") == len(bodies) - 1
    for body in bodies[:-1]:  # each chunk fits the backend's window (chars/4 estimate)
        assert sum(len(m["content"]) for m in body["messages"]) // 4 <= 1500


async def test_a_prompt_with_messages_gets_them_inline(
    context_dir: Path,
    fake_llm: FakeLLM,
) -> None:
    """Seed 001 §7.3: a prompt containing {messages} receives them as [ROLE]: content lines."""
    settings = impatient_llm_settings(
        context_dir, fake_llm, compaction={"condense_prompt": "Sum up:\n{messages}\nDone."}
    )
    async with running_app(settings) as client:
        uuid = await new_task(client, context_length=100_000, **TASK)
        await fill(client, uuid, 12)
        response = await client.post(f"/tasks/{uuid}/compress", json={})
        assert response.json()["kind"] == "condense", response.text
    [request] = fake_llm.requests
    [message] = request.body["messages"]
    assert message["role"] == "user"
    assert message["content"].startswith(f"Sum up:\n[{KEPT_LABEL}]: turn 0 about src/mod_0.py")
    assert "\n[ASSISTANT]: turn 1 about src/mod_1.py" in message["content"]
    assert "\n[USER]: turn 2 about" in message["content"]
    assert message["content"].endswith("\nDone.")


async def test_a_task_paused_while_its_payload_is_compacted_gets_413_not_409(
    context_dir: Path,
    fake_llm: FakeLLM,
) -> None:
    """GET /request found the task running and over its budget, so it condenses; the owner
    stops the task while the summariser works. The payload is then refused as any paused
    task's over budget is (413), not with the compaction's own refusal (409), and the
    summary that came too late is not committed."""
    fake_llm.set("ok", delay=1.0)
    async with running_app(
        impatient_llm_settings(context_dir, fake_llm, llm={"timeout_s": 10})
    ) as client:
        uuid = await new_task(client, context_length=4000, **TASK)
        turns = [
            {"role": "user" if n % 2 == 0 else "assistant", "content": f"turn {n} " + "w" * 1200}
            for n in range(12)
        ]
        response = await client.post(f"/tasks/{uuid}/messages", json={"messages": turns})
        assert response.status_code == 201, response.text
        payload = asyncio.create_task(client.get(f"/tasks/{uuid}/request"))
        await wait_for(lambda: _returns(bool(fake_llm.requests)))
        stopped = await client.post(f"/tasks/{uuid}/stop")
        assert stopped.status_code == 200, stopped.text
        response = await payload
        assert response.status_code == 413, response.text
        assert response.json()["error"]["code"] == "context_over_budget"
        summaries = (await client.get(f"/tasks/{uuid}/summaries")).json()["summaries"]
        assert summaries == []


async def test_request_after_a_background_condense_brought_it_under_budget_does_not_truncate(
    context_dir: Path,
    fake_llm: FakeLLM,
) -> None:
    """GET /request finds the context over budget while the background condense is with the
    summariser; its own condense waits for that one, then has too few messages to condense.
    The context is under budget by then: it is served as the condense left it.

    Regression: /request truncated after a skipped condense without measuring again, hiding
    the fresh summary behind a truncation marker.
    """
    fake_llm.set("ok", text="Background summary of src/mod_3.py.", delay=0.5)
    settings = impatient_llm_settings(
        context_dir, fake_llm, llm={"timeout_s": 10}, compaction={"request_condense_timeout_s": 10}
    )
    async with running_app(settings) as client:
        uuid = await new_task(client, context_length=4000, **TASK)
        turns = [
            {"role": "user" if n % 2 == 0 else "assistant", "content": f"turn {n} " + "w" * 1200}
            for n in range(12)
        ]
        response = await client.post(f"/tasks/{uuid}/messages", json={"messages": turns})
        assert response.status_code == 201, response.text
        assert response.json()["compaction_scheduled"] is True
        await wait_for(lambda: _returns(bool(fake_llm.requests)))  # the job is summarising

        response = await client.get(f"/tasks/{uuid}/request")

        assert response.status_code == 200, response.text
        assert int(response.headers["X-Context-Tokens"]) <= int(
            response.headers["X-Context-Budget"]
        )
        summaries = (await client.get(f"/tasks/{uuid}/summaries")).json()["summaries"]
        job = await wait_for(finished_job(client, uuid))
    assert job["status"] == "succeeded", job
    assert [s["kind"] for s in summaries] == ["condense"]
    texts = [m["content"] for m in response.json()["messages"]]
    assert texts[1] == turns[0]["content"]
    assert "Background summary of src/mod_3.py." in texts[2]
    kept = texts[3:]  # the newest turns, as many as leave room for the next ones
    assert kept
    assert kept == [t["content"] for t in turns[-len(kept) :]]
    assert len(fake_llm.requests) == 1


async def test_a_blank_condense_prompt_means_the_default_one(
    context_dir: Path,
    fake_llm: FakeLLM,
) -> None:
    """CONDENSE_PROMPT of blanks is no prompt: the summariser gets the default one."""
    settings = impatient_llm_settings(
        context_dir, fake_llm, compaction={"condense_prompt": " \n\t "}
    )
    async with running_app(settings) as client:
        uuid = await new_task(client, context_length=100_000, **TASK)
        await fill(client, uuid, 12)
        response = await client.post(f"/tasks/{uuid}/compress", json={})
        assert response.json()["kind"] == "condense", response.text
    [request] = fake_llm.requests
    assert request.body["messages"][0] == {"role": "system", "content": DEFAULT_PROMPT}


@pytest.mark.parametrize("prompt", ["", "Sum up:\n{messages}\nDone."])
async def test_the_summariser_sees_the_task_statement_marked_as_kept(
    context_dir: Path,
    fake_llm: FakeLLM,
    prompt: str,
) -> None:
    """The first user message stays in the context, outside the span: the summariser gets it
    for reference, said to be kept, before the span, and the span is summarised as before.

    Regression: it got only the span, so a summary could not say what the work was for."""
    settings = impatient_llm_settings(context_dir, fake_llm, compaction={"condense_prompt": prompt})
    async with running_app(settings) as client:
        uuid = await new_task(client, context_length=100_000, **TASK)
        await fill(client, uuid, 12, size=100)  # turn 0, the first user message, is kept
        response = await client.post(f"/tasks/{uuid}/compress", json={})
        assert response.json()["kind"] == "condense", response.text
        assert response.json()["hidden_messages"] == 6  # turns 1..6: the head is not in it
    [request] = fake_llm.requests
    messages = request.body["messages"]
    text = "\n".join(m["content"] for m in messages)
    kept = f"{KEPT_LABEL}]\nturn 0 about src/mod_0.py " if not prompt else f"{KEPT_LABEL}]: turn 0"
    assert text.count("turn 0 about") == 1
    assert kept in text
    assert text.index(kept) < text.index("turn 1 about") < text.index("turn 6 about")
    assert "turn 7 about" not in text
    if not prompt:  # the prompt, the kept message, the span, the request
        assert messages[1]["content"] == f"[{KEPT_LABEL}]\nturn 0 about src/mod_0.py " + "w" * 100
        assert [m["content"][:6] for m in messages[2:-1]] == [f"turn {n}" for n in range(1, 7)]
