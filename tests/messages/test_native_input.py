"""Messages posted in Anthropic's and Ollama's shapes, through the real app: stored in the
service's shape, served back in the same provider's format as they were posted (but for the
documented normalisations), pairing and idempotency as for any append, and nothing written
when refused."""

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.errors import assert_error
from tests.support.formats import PNG
from tests.support.tasks import all_messages, create_task
from tests.support.threads import start
from tests.support.unchanged import assert_unchanged, state

Client = httpx.AsyncClient
SYSTEM = "You are a coding agent."


async def post(
    client: Client, uuid: str, body: Any, input_format: str | None = None, **headers: str
) -> httpx.Response:
    params = {"input": input_format} if input_format else {}
    return await client.post(f"/tasks/{uuid}/messages", params=params, json=body, headers=headers)


async def payload(client: Client, uuid: str, fmt: str) -> dict[str, Any]:
    response = await client.get(f"/tasks/{uuid}/request", params={"format": fmt})
    assert response.status_code == 200, response.text
    served: dict[str, Any] = response.json()
    return served


def tool_use(tool_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": arguments}


def tool_result(tool_id: str, content: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": content}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


ANTHROPIC_CONVERSATION: list[dict[str, Any]] = [
    {"role": "user", "content": [text("Fix the crash in parser.py.")]},
    {
        "role": "assistant",
        "content": [
            text("Reading the parser and its test."),
            tool_use("toolu_01Xk9", "read_file", path="parser.py"),
            tool_use("toolu_01Xm2", "read_file", path="test_parser.py"),
        ],
    },
    {
        "role": "user",
        "content": [
            tool_result("toolu_01Xk9", "def parse(s):\n    return s[0]"),
            tool_result("toolu_01Xm2", "def test_empty(): parse('')"),
            text("The test is the one from the issue."),
        ],
    },
    {
        "role": "assistant",
        "content": [
            text("I will guard the empty input."),
            tool_use("toolu_01Xq7", "write_file", path="parser.py", content="..."),
        ],
        "usage": {"input_tokens": 900, "output_tokens": 60, "cache_read_input_tokens": 100},
    },
    {"role": "user", "content": [tool_result("toolu_01Xq7", "written")]},
    {
        "role": "user",
        "content": [
            text("And this screenshot?"),
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/s.png"}},
        ],
    },
    {"role": "assistant", "content": [text("It shows the fixed output.")]},
]


def anthropic_turns(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive messages of one role as one turn, as Anthropic's format serves them."""
    turns: list[dict[str, Any]] = []
    for message in messages:
        if turns and turns[-1]["role"] == message["role"]:
            turns[-1]["content"] = turns[-1]["content"] + message["content"]
        else:
            turns.append({"role": message["role"], "content": list(message["content"])})
    return turns


@pytest.mark.parametrize("input_format", ["anthropic", None], ids=["named", "detected"])
async def test_anthropic_round_trip(client: Client, input_format: str | None) -> None:
    """Posted one by one in Anthropic's shape, served in Anthropic's format: the same turns,
    tool ids and all."""
    uuid = (await create_task(client, llm_provider="anthropic", system_prompt=SYSTEM))["uuid"]
    seqs = []
    for message in ANTHROPIC_CONVERSATION:
        response = await post(client, uuid, message, input_format)
        assert response.status_code == 201, response.text
        seqs += response.json()["seqs"]
    # The user message with two results and a note became three messages, in one append.
    assert seqs == list(range(2, 11))
    served = await payload(client, uuid, "anthropic")
    assert served["system"] == [text(SYSTEM)]
    expected = [{"role": m["role"], "content": m["content"]} for m in ANTHROPIC_CONVERSATION]
    assert served["messages"] == anthropic_turns(expected)

    # Stored in the service's shape: ids, names, contents, usage as posted.
    records = await all_messages(client, uuid)
    assistant = records[2]
    assert [call["id"] for call in assistant["tool_calls"]] == ["toolu_01Xk9", "toolu_01Xm2"]
    assert records[3]["tool_call_id"] == "toolu_01Xk9"
    assert records[3]["tool_name"] == "read_file"
    assert records[5]["content"] == [text("The test is the one from the issue.")]
    assert records[6]["usage"] == ANTHROPIC_CONVERSATION[3]["usage"]
    task = (await client.get(f"/tasks/{uuid}")).json()
    assert task["statistics"]["llm_call_count"] == 1
    assert task["statistics"]["total_tokens"] == 900 + 100 + 60
    # And in OpenAI's format, the same conversation.
    openai = (await payload(client, uuid, "openai"))["messages"]
    assert [m["role"] for m in openai] == [
        "system", "user", "assistant", "tool", "tool", "user", "assistant", "tool", "user",
        "assistant",
    ]  # fmt: skip


async def test_anthropic_errors_are_kept_in_the_history(client: Client) -> None:
    uuid = (await create_task(client, llm_provider="anthropic"))["uuid"]
    call = {"role": "assistant", "content": [tool_use("toolu_1", "bash", command="make")]}
    assert (await post(client, uuid, call)).status_code == 201
    failed = {"role": "user", "content": [{**tool_result("toolu_1", "boom"), "is_error": True}]}
    assert (await post(client, uuid, failed)).status_code == 201
    record = (await all_messages(client, uuid))[-1]
    assert record["is_error"] is True
    assert record["content"] == "boom"


async def test_ollama_round_trip(client: Client) -> None:
    """Posted in Ollama's shape, served in Ollama's format: the same messages, each call with
    an id (derived when it came without one) and each result with it."""
    uuid = (await create_task(client, llm_provider="ollama", system_prompt=SYSTEM))["uuid"]
    conversation: list[dict[str, Any]] = [
        {"role": "user", "content": "What does this show?", "images": [PNG]},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"function": {"name": "read_file", "arguments": {"path": "a.py"}}},
                {"function": {"name": "grep", "arguments": {"pattern": "TODO", "paths": ["."]}}},
            ],
            "prompt_eval_count": 700,
            "eval_count": 25,
        },
        {"role": "tool", "tool_name": "read_file", "content": "print('hi')"},
        {"role": "tool", "tool_name": "grep", "content": "a.py:3: TODO"},
        {"role": "assistant", "content": "It prints hi."},
    ]
    for message in conversation:
        response = await post(client, uuid, message, "ollama")
        assert response.status_code == 201, response.text
    served = (await payload(client, uuid, "ollama"))["messages"]
    assert served[0] == {"role": "system", "content": SYSTEM}
    calls = served[2]["tool_calls"]
    ids = [call["id"] for call in calls]
    assert all(ids)
    assert len(set(ids)) == 2
    assert served[1:] == [
        conversation[0],
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": ids[i], "function": call["function"]}
                for i, call in enumerate(conversation[1]["tool_calls"])
            ],
        },
        {**conversation[2], "tool_call_id": ids[0]},
        {**conversation[3], "tool_call_id": ids[1]},
        conversation[4],
    ]
    statistics = (await client.get(f"/tasks/{uuid}")).json()["statistics"]
    assert (statistics["llm_call_count"], statistics["total_tokens"]) == (1, 725)


async def test_a_result_without_its_call_is_refused_whole(
    client: Client, context_dir: Path, task: dict[str, Any]
) -> None:
    """A tool_result answering no tool_use: 422, and none of the message's parts written (the
    text after it neither)."""
    uuid = task["uuid"]
    call = {"role": "assistant", "content": [tool_use("toolu_1", "ls")]}
    assert (await post(client, uuid, call, "anthropic")).status_code == 201
    before = await state(client, context_dir, uuid)
    orphan = {
        "role": "user",
        "content": [tool_result("toolu_1", "a.py"), tool_result("toolu_404", "?"), text("next")],
    }
    details = assert_error(await post(client, uuid, orphan, "anthropic"), 422, "unknown_tool_call")
    assert details["tool_call_id"] == "toolu_404"
    assert_unchanged(before, await state(client, context_dir, uuid))
    unanswered = {"role": "user", "content": [text("what now?")]}
    assert_error(await post(client, uuid, unanswered, "anthropic"), 409, "tool_results_pending")
    assert_unchanged(before, await state(client, context_dir, uuid))


async def test_a_result_by_name_answers_no_other_call(
    client: Client, context_dir: Path, task: dict[str, Any]
) -> None:
    uuid = task["uuid"]
    call = {"role": "assistant", "tool_calls": [{"function": {"name": "ls", "arguments": {}}}]}
    assert (await post(client, uuid, call, "ollama")).status_code == 201
    before = await state(client, context_dir, uuid)
    wrong = {"role": "tool", "tool_name": "cat", "content": "x"}
    details = assert_error(await post(client, uuid, wrong, "ollama"), 422, "unknown_tool_call")
    assert details["tool_name"] == "cat"
    assert_unchanged(before, await state(client, context_dir, uuid))


async def test_idempotency_keys_hold_for_converted_messages(
    client: Client, context_dir: Path, task: dict[str, Any]
) -> None:
    """A retried native POST is a replay (its conversion is the same), and appends nothing."""
    uuid = task["uuid"]
    call = {"role": "assistant", "content": [tool_use("toolu_1", "ls"), tool_use("toolu_2", "pwd")]}
    assert (await post(client, uuid, call)).status_code == 201
    results = {
        "role": "user",
        "content": [tool_result("toolu_1", "a"), tool_result("toolu_2", "/")],
    }
    first = await post(client, uuid, results, **{"Idempotency-Key": "k-1"})
    assert first.status_code == 201, first.text
    assert len(first.json()["seqs"]) == 2
    before = await state(client, context_dir, uuid)
    replay = await post(client, uuid, results, **{"Idempotency-Key": "k-1"})
    assert replay.status_code == 201
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.json() == first.json()
    assert_unchanged(before, await state(client, context_dir, uuid))
    other = {"role": "user", "content": [text("something else")]}
    assert_error(
        await post(client, uuid, other, **{"Idempotency-Key": "k-1"}), 422, "idempotency_key_reused"
    )
    assert_unchanged(before, await state(client, context_dir, uuid))


async def test_native_messages_reach_a_thread(client: Client, task: dict[str, Any]) -> None:
    uuid = task["uuid"]
    thread_id = (await start(client, uuid, label="sub"))["thread_id"]
    body = {"role": "user", "content": [text("Sub-task: run the tests.")]}
    response = await client.post(
        f"/tasks/{uuid}/messages", params={"thread_id": thread_id, "input": "anthropic"}, json=body
    )
    assert response.status_code == 201, response.text
    records = await all_messages(client, uuid, thread_id=thread_id)
    assert records[-1]["content"] == [text("Sub-task: run the tests.")]
