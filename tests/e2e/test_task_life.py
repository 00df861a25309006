"""A task's whole life on a real server: conversation, payload, statistics, directory moves."""

import json
from typing import Any

import httpx
import pytest

from tests.support.schemas import validate_openai_request
from tests.support.server import ServerPool, assert_seqs_contiguous, jsonl_records, task_dirs
from tests.support.tasks import all_messages, task_body

pytestmark = pytest.mark.e2e

SYSTEM_PROMPT = "You are a coding agent. Fix the issue, run the tests, then report."


def _function(name: str, description: str, properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": sorted(properties),
            },
        },
    }


TOOLS = [
    _function("read_file", "Read a file of the repository", {"path": {"type": "string"}}),
    _function(
        "write_file",
        "Overwrite a file of the repository",
        {"path": {"type": "string"}, "content": {"type": "string"}},
    ),
    _function("run_tests", "Run the test suite", {"selector": {"type": "string"}}),
]


def _call(call_id: str, name: str, **arguments: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


# What the agent posts, as posted: single messages and batches (lists).
CONVERSATION: list[dict[str, Any] | list[dict[str, Any]]] = [
    {"role": "user", "name": "notfolder", "content": "Issue #27: add() returns a - b. Fix it."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [_call("call_1", "read_file", path="calc.py")],
        "usage": {"prompt_tokens": 1200, "completion_tokens": 40},
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "def add(a, b):\n    return a - b\n"},
    {
        "role": "assistant",
        "content": "add() subtracts. I will fix it and run the tests.",
        "tool_calls": [
            _call(
                "call_2", "write_file", path="calc.py", content="def add(a, b):\n    return a + b\n"
            ),
            _call("call_3", "run_tests", selector="tests/test_calc.py"),
        ],
        "usage": {"prompt_tokens": 1350, "completion_tokens": 95},
    },
    [
        {"role": "tool", "tool_call_id": "call_2", "content": "wrote 33 bytes to calc.py"},
        {"role": "tool", "tool_call_id": "call_3", "content": "1 passed in 0.02s"},
    ],
    [
        {
            "role": "assistant",
            "content": "Fixed add() in calc.py; the tests pass.",
            "usage": {"prompt_tokens": 1500, "completion_tokens": 22},
        },
        {"role": "user", "content": "Thanks, please also report what changed."},
    ],
    {
        "role": "assistant",
        "content": "Changed `a - b` to `a + b` in calc.py.",
        "usage": {"prompt_tokens": 1560, "completion_tokens": 18},
    },
]

TOOL_RECORDS: list[dict[str, Any]] = [
    {
        "tool": "read_file",
        "args": {"path": "calc.py"},
        "result": "def add(a, b):\n    return a - b\n",
        "status": "success",
        "duration_ms": 3,
        "tool_call_id": "call_1",
    },
    {
        "tool": "write_file",
        "args": {"path": "calc.py", "content": "def add(a, b):\n    return a + b\n"},
        "result": "wrote 33 bytes to calc.py",
        "status": "success",
        "duration_ms": 5,
        "tool_call_id": "call_2",
    },
    {
        "tool": "run_tests",
        "args": {"selector": "tests/test_calc.py"},
        "result": "1 passed in 0.02s",
        "status": "success",
        "duration_ms": 812,
        "tool_call_id": "call_3",
    },
]

PLANS: list[dict[str, Any]] = [
    {"plan_type": "initial", "plan_content": "1. Read calc.py\n2. Fix add()\n3. Run the tests"},
    {"plan_type": "revision", "plan_content": {"done": [1, 2], "next": ["run the tests"]}},
]


def _posted_messages() -> list[dict[str, Any]]:
    flat: list[dict[str, Any]] = []
    for item in CONVERSATION:
        flat += item if isinstance(item, list) else [item]
    return flat


def _as_openai(message: dict[str, Any]) -> dict[str, Any]:
    """What the payload should carry for a posted message (no usage, no name on tools)."""
    return {k: v for k, v in message.items() if k != "usage"}


async def _post_conversation(http: httpx.AsyncClient, uuid: str) -> list[int]:
    seqs: list[int] = []
    for item in CONVERSATION:
        body = {"messages": item} if isinstance(item, list) else item
        response = await http.post(f"/tasks/{uuid}/messages", json=body)
        assert response.status_code == 201, response.text
        seqs += response.json()["seqs"]
    return seqs


async def _transition(http: httpx.AsyncClient, uuid: str, action: str, **body: str) -> Any:
    response = await http.post(f"/tasks/{uuid}/{action}", json=body or None)
    assert response.status_code == 200, response.text
    return response.json()


async def test_conversation_payload_and_completion(servers: ServerPool) -> None:
    """A realistic tool-using conversation yields a schema-valid payload in order; completing
    the task moves its directory to completed/ and the statistics count exactly what was
    posted (messages, LLM calls, tool calls, reported usage tokens)."""
    srv = servers.start()
    context_dir = servers.context_dir
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
        created = await http.post(
            "/tasks",
            json=task_body(
                system_prompt=SYSTEM_PROMPT,
                tools=TOOLS,
                request_defaults={"temperature": 0.2},
            ),
        )
        assert created.status_code == 201, created.text
        uuid = created.json()["uuid"]
        assert task_dirs(context_dir, uuid) == ["running"]

        seqs = await _post_conversation(http, uuid)
        posted = _posted_messages()
        assert seqs == list(range(2, len(posted) + 2))  # the system prompt is seq 1

        for i, record in enumerate(TOOL_RECORDS, start=1):
            response = await http.post(f"/tasks/{uuid}/tools", json=record)
            assert response.status_code == 201, response.text
            assert response.json()["seq"] == i
        for i, plan in enumerate(PLANS, start=1):
            response = await http.post(f"/tasks/{uuid}/planning", json=plan)
            assert response.status_code == 201, response.text
            assert response.json()["id"] == i

        response = await http.get(f"/tasks/{uuid}/request", params={"format": "openai"})
        assert response.status_code == 200, response.text
        payload = response.json()
        validate_openai_request(payload)
        assert payload["model"] == "gpt-4o"
        assert payload["tools"] == TOOLS
        assert payload["temperature"] == 0.2
        assert payload["max_completion_tokens"] == 4096
        assert payload["messages"] == [
            {"role": "system", "content": SYSTEM_PROMPT},
            *(_as_openai(m) for m in posted),
        ]
        assert int(response.headers["X-Context-Tokens"]) <= int(
            response.headers["X-Context-Budget"]
        )

        history = await all_messages(http, uuid, limit=3)
        assert_seqs_contiguous(history)
        assert [r["role"] for r in history] == ["system", *(m["role"] for m in posted)]
        assert history[2]["usage"] == {"prompt_tokens": 1200, "completion_tokens": 40}

        tools_page = (await http.get(f"/tasks/{uuid}/tools")).json()["tools"]
        assert [(t["seq"], t["tool"], t["tool_call_id"]) for t in tools_page] == [
            (1, "read_file", "call_1"),
            (2, "write_file", "call_2"),
            (3, "run_tests", "call_3"),
        ]
        plans_page = (await http.get(f"/tasks/{uuid}/planning")).json()["planning"]
        assert [(p["id"], p["plan_content"]) for p in plans_page] == [
            (1, PLANS[0]["plan_content"]),
            (2, PLANS[1]["plan_content"]),
        ]

        before = (await http.get(f"/tasks/{uuid}")).json()
        completed = await _transition(http, uuid, "complete")
        assert completed["status"] == "completed"

        # The filesystem: the whole directory moved to completed/, nothing left in running/.
        assert task_dirs(context_dir, uuid) == ["completed"]
        task_dir = context_dir / "completed" / uuid
        assert not (context_dir / "running" / uuid).exists()
        on_disk = jsonl_records(task_dir / "messages.jsonl")
        assert_seqs_contiguous(on_disk)
        assert len(on_disk) == len(posted) + 1
        assert len(jsonl_records(task_dir / "current.jsonl")) == len(posted) + 1
        assert [r["seq"] for r in jsonl_records(task_dir / "tools.jsonl")] == [1, 2, 3]
        assert [r["id"] for r in jsonl_records(task_dir / "planning.jsonl")] == [1, 2]

        task = (await http.get(f"/tasks/{uuid}")).json()
        assert task["status"] == "completed"
        assert task["completed_at"] is not None
        assert task["error_message"] is None
        usages = [m["usage"] for m in posted if "usage" in m]
        stats = task["statistics"]
        assert stats["total_messages"] == len(posted) + 1
        assert stats["llm_call_count"] == len(usages) == 4
        assert stats["tool_call_count"] == 3
        assert stats["total_tokens"] == sum(
            u["prompt_tokens"] + u["completion_tokens"] for u in usages
        )
        assert stats["final_message_count"] == len(posted) + 1
        assert stats["final_token_count"] == before["context"]["tokens"]
        assert task["context"]["last_seq"] == len(posted) + 1

        # A completed task is read-only, and its payload is still served.
        refused = await http.post(f"/tasks/{uuid}/messages", json={"role": "user", "content": "x"})
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "task_not_writable"
        again = await http.get(f"/tasks/{uuid}/request")
        assert again.status_code == 200
        assert again.json() == payload


async def test_stop_resume_fail_move_directories(servers: ServerPool) -> None:
    """stop moves the directory to paused/ (and survives a restart), resume moves it back to
    running/ and appends continue the seq, fail moves it to completed/ with the error."""
    srv = servers.start()
    context_dir = servers.context_dir
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
        created = await http.post("/tasks", json=task_body(system_prompt=SYSTEM_PROMPT))
        assert created.status_code == 201, created.text
        uuid = created.json()["uuid"]
        first = await http.post(f"/tasks/{uuid}/messages", json={"role": "user", "content": "a"})
        assert first.json()["seqs"] == [2]

        assert (await _transition(http, uuid, "stop"))["status"] == "paused"
        assert task_dirs(context_dir, uuid) == ["paused"]
        refused = await http.post(f"/tasks/{uuid}/messages", json={"role": "user", "content": "b"})
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "task_not_writable"

    srv.restart()
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
        assert (await http.get(f"/tasks/{uuid}")).json()["status"] == "paused"
        assert task_dirs(context_dir, uuid) == ["paused"]

        assert (await _transition(http, uuid, "resume"))["status"] == "running"
        assert task_dirs(context_dir, uuid) == ["running"]
        second = await http.post(f"/tasks/{uuid}/messages", json={"role": "user", "content": "c"})
        assert second.status_code == 201, second.text
        assert second.json()["seqs"] == [3]

        failed = await _transition(http, uuid, "fail", error_message="the tests never passed")
        assert failed["status"] == "failed"
        assert task_dirs(context_dir, uuid) == ["completed"]
        task = (await http.get(f"/tasks/{uuid}")).json()
        assert task["status"] == "failed"
        assert task["error_message"] == "the tests never passed"
        assert task["completed_at"] is not None
        assert task["statistics"]["total_messages"] == 3
        assert task["statistics"]["final_message_count"] == 3
        assert [
            r["content"] for r in jsonl_records(context_dir / "completed" / uuid / "messages.jsonl")
        ] == [SYSTEM_PROMPT, "a", "c"]

        resumed = await http.post(f"/tasks/{uuid}/resume")
        assert resumed.status_code == 409
        assert resumed.json()["error"]["code"] == "invalid_transition"
        assert task_dirs(context_dir, uuid) == ["completed"]
