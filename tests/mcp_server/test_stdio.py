"""``context-service mcp``: the same MCP server over stdio, spawned by the official SDK's stdio
client on the CONTEXT_DIR and database of a real running service, whose REST API sees what the
tools change."""

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from tests.support.mcp import call, read_json, refusal, stdio_session
from tests.support.postgres import PostgresDatabases
from tests.support.server import Server, server_of_its_own
from tests.support.tasks import key, task_body
from tests.support.waits import WAIT_S

pytestmark = pytest.mark.e2e

MISSING = "00000000-0000-4000-8000-000000000000"


@pytest.fixture(scope="module")
def live(
    tmp_path_factory: pytest.TempPathFactory, postgres: PostgresDatabases | None
) -> Iterator[Server]:
    with server_of_its_own(tmp_path_factory.mktemp("mcp-stdio"), postgres, {}) as server:
        yield server


@pytest.fixture(scope="module")
def storage(live: Server) -> dict[str, str]:
    """What ``context-service mcp`` needs to open the service's storage."""
    return {
        "CONTEXT_DIR": str(live.context_dir),
        "DATABASE_URL": live.extra_env["DATABASE_URL"],
    }


@pytest.fixture(scope="module")
def world(live: Server) -> dict[str, Any]:
    """A running task with a short conversation, and a finished one with its final summary."""
    with httpx.Client(base_url=live.base_url, timeout=60) as http:
        running = http.post("/tasks", json=task_body(system_prompt="You are a coding agent."))
        done = http.post("/tasks", json=task_body(task_key=key(task_id="2")))
        assert running.status_code == done.status_code == 201, (running.text, done.text)
        uuid, finished = running.json()["uuid"], done.json()["uuid"]
        messages = [
            {"role": "user", "content": "Rename the Widget class"},
            {"role": "assistant", "content": "Renaming widget.py's class now."},
        ]
        assert http.post(f"/tasks/{uuid}/messages", json={"messages": messages}).is_success
        assert http.post(f"/tasks/{finished}/messages", json=messages[0]).is_success
        assert http.post(f"/tasks/{finished}/complete").status_code == 200
        deadline = time.monotonic() + WAIT_S
        while http.get(f"/tasks/{finished}/final-summary").status_code == 202:
            assert time.monotonic() < deadline, "the final summary was not written"
            time.sleep(0.05)
    return {"running": uuid, "finished": finished}


async def rest_get(live: Server, path: str) -> Any:
    async with httpx.AsyncClient(base_url=live.base_url, timeout=60) as http:
        response = await http.get(path)
    assert response.status_code == 200, response.text
    return response.json()


async def test_every_tool_over_stdio_on_the_services_storage(
    live: Server, storage: dict[str, str], world: dict[str, Any]
) -> None:
    uuid = world["running"]
    items = [{"text": "find the class", "status": "done"}, {"text": "rename it"}]
    async with stdio_session(storage) as session:
        tools = {tool.name for tool in (await session.list_tools()).tools}
        updated = await call(session, "update_plan", uuid=uuid, items=items)
        plan = await call(session, "get_plan", uuid=uuid)
        recalled = await call(session, "recall_message", uuid=uuid, seq=2, start=11, end=17)
        found = await call(session, "search_history", uuid=uuid, query="WIDGET")
        budget = await call(session, "context_budget", uuid=uuid)
    assert tools == {
        "get_plan",
        "update_plan",
        "recall_message",
        "search_history",
        "context_budget",
    }
    assert plan == updated
    assert [i["status"] for i in plan["current_items"]] == ["done", "pending"]
    rest = await rest_get(live, f"/tasks/{uuid}/planning")
    assert rest["current_items"] == plan["current_items"]
    assert rest["planning"][-1] == plan["latest_entry"]
    assert (recalled["text"], recalled["start"], recalled["end"]) == ("Widget", 11, 17)
    assert [hit["seq"] for hit in found["hits"]] == [2, 3]
    view = await rest_get(live, f"/tasks/{uuid}/context")
    assert (budget["tokens"], budget["budget"]) == (view["tokens"], view["budget"])


async def test_resources_and_refusals_over_stdio(
    live: Server, storage: dict[str, str], world: dict[str, Any]
) -> None:
    async with stdio_session(storage) as session:
        summary = await read_json(session, f"context://tasks/{world['finished']}/final-summary")
        inheritance = await read_json(session, f"context://tasks/{world['running']}/inheritance")
        unknown = await refusal(session, "get_plan", uuid=MISSING)
        bad_seq = await refusal(session, "recall_message", uuid=world["running"], seq=40)
        with pytest.raises(MCPError) as running:
            await session.read_resource(f"context://tasks/{world['running']}/final-summary")
    assert summary == await rest_get(live, f"/tasks/{world['finished']}/final-summary")
    assert summary["status"] == "ready"
    assert inheritance == await rest_get(live, f"/tasks/{world['running']}/inheritance")
    assert unknown["code"] == "task_not_found"
    assert bad_seq["code"] == "message_not_found"
    assert '"task_not_finished"' in running.value.message
