"""Inheritance (seed 000 §8): a new run on the same task key and user starts from the last one."""

import shutil
from pathlib import Path
from typing import Any

import httpx

from app.tokens.counters import HeuristicCounter
from tests.fakes import llm_server
from tests.fakes.llm_server import FakeLLM
from tests.support.app import running_app
from tests.support.conversations import turns
from tests.support.settings import fast_settings, llm_settings
from tests.support.tasks import create_task, key, run_and_finish, task_body
from tests.support.waits import final_summary

fake_llm = llm_server.fake_llm
PLANS = ("1. Read parser.py\n2. Add a guard", "1. Guard added\n2. Run the tests")


async def inherited_message(client: httpx.AsyncClient, uuid: str) -> dict[str, Any]:
    records = (await client.get(f"/tasks/{uuid}/messages")).json()["messages"]
    assert records[0]["content"] == "You are a coding agent."
    message: dict[str, Any] = records[1]
    assert message["role"] == "system"
    return message


async def test_a_new_run_carries_the_last_one_s_summary_and_plans(context_dir: Path) -> None:
    async with running_app(fast_settings(context_dir)) as client:
        failed = await run_and_finish(client, "fail", plans=PLANS)
        summary = (await final_summary(client, failed["uuid"]))["summary"]
        created = await create_task(client, system_prompt="You are a coding agent.")
        uuid = created["uuid"]
        assert created["inherited_from"] == failed["uuid"]
        record = created["inheritance"]
        assert record["from_uuid"] == failed["uuid"]
        assert record["status"] == "failed"
        assert record["summary_source"] == "final_summary"
        assert record["planning_entries"] == 2
        assert record["truncated"] is False
        assert record["seq"] == 2
        comment = created["notification_comment"]
        assert failed["uuid"] in comment
        assert "failed" in comment
        assert "tests failed: test_empty_input" in comment
        message = await inherited_message(client, uuid)
        content = message["content"]
        assert summary in content
        for plan in PLANS:
            assert plan in content
        assert content.index(PLANS[0]) < content.index(PLANS[1])
        assert "Continue the task from where the previous run left off" in content
        assert HeuristicCounter().count_text(content) == record["tokens"] <= 4000
        payload = (await client.get(f"/tasks/{uuid}/request")).json()
        assert payload["messages"][1]["content"] == content
        shown = (await client.get(f"/tasks/{uuid}/inheritance")).json()
        assert shown == {
            "uuid": uuid,
            "inherited_from": failed["uuid"],
            "inheritance": record,
            "notification_comment": comment,
        }
        again = await client.post(
            "/tasks", json=task_body(uuid=uuid, system_prompt="You are a coding agent.")
        )
        assert again.status_code == 200
        assert again.json()["inheritance"] == record


async def test_candidates_are_the_same_key_and_user_newest_first(context_dir: Path) -> None:
    async with running_app(fast_settings(context_dir)) as client:
        first = await run_and_finish(client, "complete", inherit=False)
        second = await run_and_finish(client, "fail", inherit=False)
        await run_and_finish(client, "complete", inherit=False, user="someone-else")
        await run_and_finish(client, "complete", inherit=False, task_key=key(task_id="28"))
        await create_task(client, inherit=False)  # running: not a candidate
        await final_summary(client, second["uuid"])
        params = key() | {"user": "notfolder"}
        found = (await client.get("/inheritance/candidates", params=params)).json()
        uuids = [c["uuid"] for c in found["candidates"]]
        assert uuids == [second["uuid"], first["uuid"]]
        assert found["candidates"][0]["status"] == "failed"
        assert found["candidates"][0]["final_summary_ready"] is True
        response = await client.get("/inheritance/candidates", params=key(task_id="99"))
        assert response.json() == {"candidates": []}
        response = await client.get("/inheritance/candidates", params={"owner": "x"})
        assert response.status_code == 422


async def test_inheritance_can_be_declined(context_dir: Path) -> None:
    async with running_app(fast_settings(context_dir, inheritance={"enabled": False})) as client:
        await run_and_finish(client, "complete")
        by_default = await create_task(client)
        assert by_default["inheritance"] is None
        assert by_default["inherited_from"] is None
        assert by_default["notification_comment"] is None
        asked = await create_task(client, inherit=True)
        assert asked["inherited_from"] is not None
        declined = (await client.get(f"/tasks/{by_default['uuid']}/inheritance")).json()
        assert declined["inheritance"] is None


async def test_the_message_is_cut_to_max_summary_tokens_keeping_the_latest_plans(
    context_dir: Path,
) -> None:
    limit = 300
    plans = tuple(f"plan {n}: " + "step " * 120 for n in range(12))
    settings = fast_settings(context_dir, inheritance={"max_summary_tokens": limit})
    async with running_app(settings) as client:
        await run_and_finish(client, "complete", plans=plans)
        created = await create_task(client, system_prompt="You are a coding agent.")
        record = created["inheritance"]
        content = (await inherited_message(client, created["uuid"]))["content"]
    assert record["truncated"] is True
    assert HeuristicCounter().count_text(content) <= limit
    assert record["tokens"] <= limit
    assert f"[Inherited context cut to fit {limit} tokens" in content
    assert "plan 11: " in content  # the latest plan is kept
    assert "plan 0: " not in content
    assert "## Summary of the previous run" in content
    assert content.endswith("address what remained or went wrong.")


async def test_a_pending_final_summary_falls_back_to_the_latest_condense_summary(
    context_dir: Path, fake_llm: FakeLLM
) -> None:
    """The final summary's backend hangs: after the wait, the condense summary is used."""
    settings = llm_settings(
        context_dir,
        fake_llm,
        llm={"timeout_s": 30.0},
        compaction={"condense_backend": "extractive"},
        inheritance={"wait_s": 0.3},
    )
    fake_llm.set("hang")
    conversation = turns(14)
    async with running_app(settings) as client:
        created = await create_task(client, system_prompt="You are a coding agent.")
        uuid = created["uuid"]
        await client.post(f"/tasks/{uuid}/messages", json={"messages": conversation})
        condensed = await client.post(f"/tasks/{uuid}/compress", json={"strategy": "condense"})
        assert condensed.json()["kind"] == "condense", condensed.text
        await client.post(f"/tasks/{uuid}/complete")
        pending = await client.get(f"/tasks/{uuid}/final-summary")
        assert pending.status_code == 202
        successor = await create_task(client, system_prompt="You are a coding agent.")
        record = successor["inheritance"]
        assert record["summary_source"] == "condense_summary"
        assert "final one was not ready" in successor["notification_comment"]
        content = (await inherited_message(client, successor["uuid"]))["content"]
        assert "final summary was not ready in time" in content
        assert "[Summary of the earlier conversation (" in content


async def test_a_run_whose_files_are_gone_is_passed_over(context_dir: Path) -> None:
    """The newest earlier run's directory was removed by hand: the one before it is used."""
    async with running_app(fast_settings(context_dir)) as client:
        older = await run_and_finish(client, "complete", plans=PLANS)
        newest = await run_and_finish(client, "fail", inherit=False)
        await final_summary(client, older["uuid"])
        await final_summary(client, newest["uuid"])
        shutil.rmtree(context_dir / "completed" / newest["uuid"])
        created = await create_task(client)
        assert created["inherited_from"] == older["uuid"]


async def test_a_long_error_does_not_crowd_out_the_summary(context_dir: Path) -> None:
    traceback = "Traceback (most recent call last):\n" + "  File x.py, line 1\n" * 3000
    async with running_app(fast_settings(context_dir)) as client:
        task = await create_task(client, system_prompt="You are a coding agent.")
        uuid = task["uuid"]
        turn = {"role": "user", "content": "Fix the crash in parser.py when the input is empty."}
        await client.post(f"/tasks/{uuid}/messages", json=turn)
        response = await client.post(f"/tasks/{uuid}/fail", json={"error_message": traceback})
        assert response.status_code == 200
        summary = (await final_summary(client, uuid))["summary"]
        assert len(summary) < 2000 + 1500  # the error's end, then the digest
        created = await create_task(client, system_prompt="You are a coding agent.")
        content = (await inherited_message(client, created["uuid"]))["content"]
        assert "It failed with this error: Traceback (most recent call last): [...]" in content
        assert "Fix the crash in parser.py when the input is empty." in content
        assert content.endswith("address what remained or went wrong.")


async def test_a_small_window_gets_at_most_half_its_budget(context_dir: Path) -> None:
    plans = tuple(f"plan {n}: " + "step " * 300 for n in range(20))
    async with running_app(fast_settings(context_dir)) as client:
        await run_and_finish(client, "complete", plans=plans)
        created = await create_task(client, context_length=4096, max_output_tokens=512)
        budget = created["context"]["budget"]
        record = created["inheritance"]
        assert record["max_summary_tokens"] == budget // 2
        assert record["tokens"] <= budget // 2
        assert record["truncated"] is True
