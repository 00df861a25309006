"""The MCP server at /mcp of a real uvicorn, through the official SDK's streamable HTTP client:
every tool and resource, the API keys (none, wrong, another tenant's task), bad input refused
with the service's error and nothing written, and a plan update seen over REST."""

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from tests.support.mcp import call, http_session, read_json, refusal
from tests.support.postgres import PostgresDatabases
from tests.support.server import Server, server_of_its_own
from tests.support.tasks import key, task_body
from tests.support.waits import WAIT_S

pytestmark = [pytest.mark.e2e, pytest.mark.database_agnostic]

ADMIN_KEY = "mcp-test-admin-key-0123456789"
ADA_KEY = "mcp-test-ada-key-0123456789"  # an agent key for user ada's tasks only
MISSING = "00000000-0000-4000-8000-000000000000"
# A tool output far larger than one recall may return: 2 bytes a character, the needle at its end.
BIG_OUTPUT = "é" * 40_000 + " Traceback: NeedleError at line 7"
RECALL_BYTES = 32 * 1024  # a range's byte cap in the test: the output takes three and a bit


@pytest.fixture(scope="module")
def live(
    tmp_path_factory: pytest.TempPathFactory, postgres: PostgresDatabases | None
) -> Iterator[Server]:
    env = {
        "ADMIN_API_KEYS": ADMIN_KEY,
        "API_KEYS": json.dumps({"ada-agent": {"key": ADA_KEY, "users": ["ada"]}}),
    }
    with server_of_its_own(tmp_path_factory.mktemp("mcp"), postgres, env) as server:
        yield server


@pytest.fixture(scope="module")
def admin(live: Server) -> Iterator[httpx.Client]:
    auth = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with httpx.Client(base_url=live.base_url, headers=auth, timeout=60) as http:
        yield http


async def rest_get(live: Server, path: str) -> Any:
    """GET ``path`` with the admin key: its JSON."""
    auth = {"Authorization": f"Bearer {ADMIN_KEY}"}
    async with httpx.AsyncClient(base_url=live.base_url, headers=auth, timeout=60) as http:
        response = await http.get(path)
    assert response.status_code in (200, 202), response.text
    return response.json()


def created(admin: httpx.Client, **overrides: Any) -> str:
    response = admin.post("/tasks", json=task_body(**overrides))
    assert response.status_code == 201, response.text
    uuid: str = response.json()["uuid"]
    return uuid


def appended(admin: httpx.Client, uuid: str, *messages: dict[str, Any]) -> None:
    response = admin.post(f"/tasks/{uuid}/messages", json={"messages": list(messages)})
    assert response.status_code == 201, response.text


@pytest.fixture(scope="module")
def ada_task(admin: httpx.Client) -> str:
    """User ada's running task: a request, a tool call with a huge output, an answer."""
    # A window the big output fits in whole: it is not cut as it is appended.
    uuid = created(
        admin, user="ada", system_prompt="You are a coding agent.", context_length=1_000_000
    )
    call_ = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "run_tests", "arguments": '{"path": "tests/"}'},
    }
    appended(
        admin,
        uuid,
        {"role": "user", "content": "Fix the Parser in src/parser.py"},
        {"role": "assistant", "content": None, "tool_calls": [call_]},
        {"role": "tool", "tool_call_id": "call_1", "content": BIG_OUTPUT},
        {"role": "assistant", "content": "The parser fails on NeedleError; fixing it."},
    )
    return uuid


@pytest.fixture(scope="module")
def bob_task(admin: httpx.Client) -> str:
    uuid = created(admin, user="bob", task_key=key(task_id="2"))
    appended(admin, uuid, {"role": "user", "content": "Bob's secret work"})
    return uuid


@pytest.fixture(scope="module")
def inheriting_task(admin: httpx.Client) -> tuple[str, str]:
    """A completed run of ada's (its final summary written) and the run that inherits it."""
    earlier = created(admin, user="ada", task_key=key(task_id="3"))
    appended(admin, earlier, {"role": "user", "content": "Port the lexer."})
    assert admin.post(f"/tasks/{earlier}/complete").status_code == 200
    deadline = time.monotonic() + WAIT_S
    while admin.get(f"/tasks/{earlier}/final-summary").status_code == 202:  # its job runs
        assert time.monotonic() < deadline, "the final summary was not written"
        time.sleep(0.05)
    later = created(admin, user="ada", task_key=key(task_id="3"), inherit=True)
    return earlier, later


async def test_the_tools_and_resources_are_listed(live: Server) -> None:
    async with http_session(live.base_url, ADMIN_KEY) as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        templates = (await session.list_resource_templates()).resource_templates
    assert set(tools) == {
        "get_plan",
        "update_plan",
        "recall_message",
        "search_history",
        "context_budget",
    }
    for tool in tools.values():
        assert tool.input_schema["required"][0] == "uuid", tool.name
        assert tool.output_schema is not None, tool.name
    assert tools["get_plan"].annotations is not None
    assert tools["get_plan"].annotations.read_only_hint is True
    assert {t.uri_template for t in templates} == {
        "context://tasks/{uuid}/final-summary",
        "context://tasks/{uuid}/inheritance",
    }


async def test_update_plan_changes_the_plan_rest_shows(live: Server, ada_task: str) -> None:
    items = [
        {"id": "1", "text": "reproduce the failure", "status": "done"},
        {"id": "2", "text": "fix the parser", "status": "active"},
        {"id": "3", "text": "run the tests"},
    ]
    async with http_session(live.base_url, ADA_KEY) as session:
        plan = await call(session, "update_plan", uuid=ada_task, items=items)
        assert plan["current_items"][2] == {"id": "3", "text": "run the tests", "status": "pending"}
        assert plan["checklist"].splitlines()[1:3] == [
            "[x] 1. reproduce the failure",
            "[>] 2. fix the parser (active)",
        ]
        note = await call(session, "update_plan", uuid=ada_task, plan_content="parser fixed")
        seen = await call(session, "get_plan", uuid=ada_task)
    assert seen == note
    assert seen["latest_entry"]["plan_content"] == "parser fixed"
    assert seen["current_entry_id"] == plan["latest_entry"]["id"]  # a note keeps the items
    rest = await rest_get(live, f"/tasks/{ada_task}/planning")
    assert rest["current_items"] == seen["current_items"]
    assert rest["current_entry_id"] == seen["current_entry_id"]
    assert rest["planning"][-1] == seen["latest_entry"]


async def test_a_bad_plan_is_refused_and_nothing_is_written(live: Server, ada_task: str) -> None:
    before = await rest_get(live, f"/tasks/{ada_task}/planning")
    twice = [{"id": "1", "text": "a"}, {"id": "1", "text": "b"}]
    async with http_session(live.base_url, ADA_KEY) as session:
        duplicate = await refusal(session, "update_plan", uuid=ada_task, items=twice)
        empty = await refusal(session, "update_plan", uuid=ada_task)
        unknown = await refusal(session, "update_plan", uuid=MISSING, plan_content="x")
        bad_status = await session.call_tool(
            "update_plan", {"uuid": ada_task, "items": [{"text": "a", "status": "finished"}]}
        )
    assert duplicate["code"] == "validation_error"
    assert "given twice" in duplicate["message"]
    assert empty["code"] == "validation_error"
    assert "plan_content, items, or both" in empty["message"]
    assert unknown["code"] == "task_not_found"
    assert bad_status.is_error  # refused by the input schema, before the tool runs
    assert await rest_get(live, f"/tasks/{ada_task}/planning") == before


async def test_recall_message_returns_a_range_within_the_byte_cap(
    live: Server, ada_task: str
) -> None:
    async with http_session(live.base_url, ADA_KEY) as session:
        request = await call(session, "recall_message", uuid=ada_task, seq=2)
        tool_call = await call(session, "recall_message", uuid=ada_task, seq=3)
        ranges = [await call(session, "recall_message", uuid=ada_task, seq=4, end=100)]
        while ranges[-1]["end"] < ranges[-1]["total_chars"]:
            ranges.append(
                await call(
                    session,
                    "recall_message",
                    uuid=ada_task,
                    seq=4,
                    start=ranges[-1]["end"],
                    max_bytes=RECALL_BYTES,
                )
            )
        rest = await rest_get(live, f"/tasks/{ada_task}/messages/4?end=100")
    assert request["text"] == "Fix the Parser in src/parser.py"
    assert (request["role"], request["next_start"]) == ("user", None)
    assert tool_call["tool_calls"] == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "run_tests", "arguments": '{"path": "tests/"}'},
        }
    ]
    first = ranges[0]
    assert first == rest  # the tool and the REST route answer alike
    assert (first["role"], first["tool_call_id"]) == ("tool", "call_1")
    assert (first["start"], first["end"], first["total_chars"]) == (0, 100, len(BIG_OUTPUT))
    # 2-byte characters: the byte cap ends each range, and says where the next one starts.
    assert [r["end"] - r["start"] for r in ranges[1:-1]] == [RECALL_BYTES // 2] * 2
    assert all(r["cut"] and r["next_start"] == r["end"] for r in ranges[1:-1])
    assert all(len(r["text"].encode()) <= RECALL_BYTES for r in ranges)
    assert "".join(r["text"] for r in ranges) == BIG_OUTPUT


async def test_a_bad_seq_is_a_clear_tool_error(live: Server, ada_task: str) -> None:
    async with http_session(live.base_url, ADA_KEY) as session:
        beyond = await refusal(session, "recall_message", uuid=ada_task, seq=99)
        no_thread = await refusal(session, "recall_message", uuid=ada_task, seq=1, thread_id=5)
        zero = await session.call_tool("recall_message", {"uuid": ada_task, "seq": 0})
    assert beyond["code"] == "message_not_found"
    assert beyond["details"] == {"uuid": ada_task, "thread_id": 0, "seq": 99, "last_seq": 5}
    assert no_thread["code"] == "thread_not_found"
    assert zero.is_error


async def test_search_history_finds_text_case_ignored_and_pages(
    live: Server, ada_task: str
) -> None:
    async with http_session(live.base_url, ADA_KEY) as session:
        found = await call(session, "search_history", uuid=ada_task, query="needleERROR")
        first = await call(session, "search_history", uuid=ada_task, query="PARSER", limit=1)
        after = await call(
            session,
            "search_history",
            uuid=ada_task,
            query="parser",
            after_seq=first["next_after_seq"],
        )
        nothing = await call(session, "search_history", uuid=ada_task, query="no such text")
        too_long = await session.call_tool("search_history", {"uuid": ada_task, "query": "x" * 201})
    assert [(h["seq"], h["role"]) for h in found["hits"]] == [(4, "tool"), (5, "assistant")]
    assert found["hits"][0]["snippet"].endswith("Traceback: NeedleError at line 7")
    assert len(found["hits"][0]["snippet"]) < 200  # a snippet, not the 40,000 characters
    assert found["next_after_seq"] is None
    assert [h["seq"] for h in first["hits"]] == [2]
    assert first["next_after_seq"] == 2
    assert [h["seq"] for h in after["hits"]] == [5]
    assert nothing == {"query": "no such text", "hits": [], "next_after_seq": None}
    assert too_long.is_error


async def test_context_budget_agrees_with_the_context_view(live: Server, ada_task: str) -> None:
    async with http_session(live.base_url, ADA_KEY) as session:
        budget = await call(session, "context_budget", uuid=ada_task)
        anthropic = await call(session, "context_budget", uuid=ada_task, format="anthropic")
    view = await rest_get(live, f"/tasks/{ada_task}/context")
    for field in ("tokens", "budget", "threshold", "window", "next_action", "next_step"):
        assert budget[field] == view[field], field
    assert budget["last_seq"] == 5
    assert "messages" not in budget
    assert anthropic["format"] == "anthropic"


async def test_the_final_summary_and_inheritance_resources(
    live: Server, inheriting_task: tuple[str, str]
) -> None:
    earlier, later = inheriting_task
    async with http_session(live.base_url, ADA_KEY) as session:
        summary = await read_json(session, f"context://tasks/{earlier}/final-summary")
        inheritance = await read_json(session, f"context://tasks/{later}/inheritance")
        nothing = await read_json(session, f"context://tasks/{earlier}/inheritance")
        with pytest.raises(MCPError) as running:
            await session.read_resource(f"context://tasks/{later}/final-summary")
        with pytest.raises(MCPError) as unknown:
            await session.read_resource(f"context://tasks/{MISSING}/inheritance")
        with pytest.raises(MCPError) as not_a_uuid:
            await session.read_resource("context://tasks/not-a-uuid/inheritance")
    rest = await rest_get(live, f"/tasks/{earlier}/final-summary")
    assert summary == rest
    assert (summary["uuid"], summary["status"]) == (earlier, "ready")
    assert "Port the lexer." in summary["summary"]
    assert inheritance == await rest_get(live, f"/tasks/{later}/inheritance")
    assert inheritance["inherited_from"] == earlier
    assert nothing["inherited_from"] is None
    assert json.loads(running.value.message)["error"]["code"] == "task_not_finished"
    assert json.loads(unknown.value.message)["error"]["code"] == "task_not_found"
    assert unknown.value.code == -32602  # invalid params: nothing there
    assert json.loads(not_a_uuid.value.message)["error"]["code"] == "validation_error"


async def test_an_agent_key_cannot_reach_another_tenants_task(live: Server, bob_task: str) -> None:
    before = await rest_get(live, f"/tasks/{bob_task}/planning")
    async with http_session(live.base_url, ADA_KEY) as session:
        refusals = [
            await refusal(session, "get_plan", uuid=bob_task),
            await refusal(session, "update_plan", uuid=bob_task, plan_content="mine now"),
            await refusal(session, "recall_message", uuid=bob_task, seq=2),
            await refusal(session, "search_history", uuid=bob_task, query="secret"),
            await refusal(session, "context_budget", uuid=bob_task),
        ]
        with pytest.raises(MCPError) as resource:
            await session.read_resource(f"context://tasks/{bob_task}/inheritance")
    # Word for word what an unknown task answers: nothing shows that it exists.
    assert all(r == refusals[0] for r in refusals)
    assert refusals[0]["code"] == "task_not_found"
    assert json.loads(resource.value.message)["error"]["code"] == "task_not_found"
    assert await rest_get(live, f"/tasks/{bob_task}/planning") == before
    async with http_session(live.base_url, ADMIN_KEY) as session:  # an unscoped key may
        hits = await call(session, "search_history", uuid=bob_task, query="secret")
    assert [h["seq"] for h in hits["hits"]] == [1]


@pytest.mark.parametrize("key", [None, "not-a-configured-key-0123456789"], ids=["none", "wrong"])
async def test_a_caller_without_a_valid_key_is_refused(live: Server, key: str | None) -> None:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(f"{live.base_url}/mcp", json=body, headers=headers)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"
    with pytest.raises(ExceptionGroup) as refused:
        async with http_session(live.base_url, key):
            pass
    assert refused.group_contains(MCPError, match="error response")


def test_mcp_is_not_in_the_openapi_document(tmp_path: Path) -> None:
    from app.config import Settings
    from app.main import create_app

    paths = create_app(Settings(context_dir=tmp_path)).openapi()["paths"]
    assert not [path for path in paths if path.startswith("/mcp")]


def test_the_session_manager_is_stateless() -> None:
    """Any worker may answer any POST: a session kept in one process would break them."""
    from app.mcp_server.http import http_route, request_caller
    from app.mcp_server.server import build_server

    server = build_server(request_caller)
    http_route(server, max_body_bytes=1 << 20)
    assert server.session_manager.stateless is True


INITIALIZE: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}


def test_an_app_started_again_in_another_event_loop_serves_mcp(tmp_path: Path) -> None:
    """Each run of the lifespan has its own wait for the first request: the one of a run that
    never served /mcp, bound to its loop, would leave the next run's first request hanging."""
    from asgi_lifespan import LifespanManager

    from app.config import Settings
    from app.main import create_app

    app = create_app(Settings(context_dir=tmp_path / "contexts"))

    async def run(ask_mcp: bool) -> int:
        async with LifespanManager(app) as started:
            transport = httpx.ASGITransport(app=started.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
                if not ask_mcp:
                    return (await http.get("/healthz")).status_code
                accept = {"Accept": "application/json, text/event-stream"}
                answer = await asyncio.wait_for(
                    http.post("/mcp", json=INITIALIZE, headers=accept), WAIT_S
                )
                return answer.status_code

    assert asyncio.run(run(ask_mcp=False)) == 200
    assert asyncio.run(run(ask_mcp=True)) == 200
    assert asyncio.run(run(ask_mcp=True)) == 200


_SDK_ON_FIRST_USE = """
import asyncio, json, sys
import httpx
from asgi_lifespan import LifespanManager
from app.config import Settings
from app.main import create_app

INITIALIZE = json.loads(sys.argv[2])

async def main() -> None:
    app = create_app(Settings(context_dir=sys.argv[1]))
    async with LifespanManager(app) as started:
        transport = httpx.ASGITransport(app=started.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            served = (await http.get("/healthz")).status_code
            before = "mcp" in sys.modules
            answer = await http.post(
                "/mcp", json=INITIALIZE, headers={"Accept": "application/json, text/event-stream"}
            )
            print(served, before, answer.status_code, answer.json()["result"]["serverInfo"]["name"])

asyncio.run(main())
"""


def test_the_sdk_is_imported_on_the_first_request_to_mcp(tmp_path: Path) -> None:
    """A service nobody reaches over MCP does not pay the SDK's import (a third of a start)."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _SDK_ON_FIRST_USE,
            str(tmp_path / "contexts"),
            json.dumps(INITIALIZE),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["200", "False", "200", "context-service"]
