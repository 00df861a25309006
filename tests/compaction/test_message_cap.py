"""The message cap (``max_message_share`` of the budget): a larger message is cut as its append
commits, at the end of the payload, so no later cut moves the payload's prefix (the provider's
prompt cache); an elision cuts a message down to the cap at once rather than a little at every
turn. Token counts here are the characters / 4 heuristic, worked out by hand."""

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import CompactionSettings, Settings
from app.context.files import ContextFiles, CurrentRender
from tests.support.conversations import tool_call, tool_result
from tests.support.files import task_dir
from tests.support.payloads import payload
from tests.support.tasks import all_messages, append, new_task, post_messages, task_body

ELISION_TEXT = "characters elided to fit the context window"
INSTRUCTION = {"role": "user", "content": "Fix the failing build and explain the fix."}
WINDOW, RESERVED = 8000, 1000
BUDGET = int(WINDOW * 0.9) - RESERVED  # 6,200
CAP = int(BUDGET * CompactionSettings().max_message_share)  # 620 tokens: ~2,500 characters

Message = dict[str, Any]


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    return Settings(context_dir=context_dir, token_counter="heuristic")


def build_output(lines: int) -> str:
    return "\n".join(f"line {i:05d}: compiling module {i} {'x' * 30}" for i in range(lines))


def read_call(i: int, output: str) -> list[Message]:
    """An assistant running make step i, and the step's output."""
    arguments = json.dumps({"cmd": f"make {i}"})
    return [tool_call(f"call_{i}", arguments), tool_result(f"call_{i}", output)]


async def elisions(client: httpx.AsyncClient, uuid: str) -> list[dict[str, Any]]:
    summaries = (await client.get(f"/tasks/{uuid}/summaries")).json()["summaries"]
    return [s for s in summaries if s["kind"] == "elision"]


async def test_a_message_over_the_cap_is_cut_before_its_append_returns(
    client: httpx.AsyncClient,
) -> None:
    """A 5,000-token build log in an 8k window: once its append has returned, the context
    shows it cut to the cap (start and end kept), the payload before it unchanged; the
    history keeps it whole."""
    uuid = await new_task(client, context_length=WINDOW, max_output_tokens=RESERVED)
    await append(client, uuid, INSTRUCTION)
    before, _, _ = await payload(client, uuid)
    output = build_output(400)
    assert len(output) // 4 > 3 * CAP
    turn = read_call(1, output)
    seqs = await append(client, uuid, *turn)

    records = await all_messages(client, uuid)
    assert next(r for r in records if r["seq"] == seqs[1])["content"] == output
    [elision] = await elisions(client, uuid)
    assert (elision["start_seq"], elision["end_seq"]) == (seqs[1], seqs[1])
    assert elision["summary_tokens"] <= CAP
    after, _, _ = await payload(client, uuid)
    assert after["messages"][: len(before["messages"])] == before["messages"]
    assert after["messages"][-2] == turn[0]
    shown = after["messages"][-1]["content"]
    assert ELISION_TEXT in shown
    assert shown.startswith("line 00000")
    assert shown.endswith(output[-40:])


async def test_the_append_answer_counts_the_context_after_the_cut(
    client: httpx.AsyncClient,
) -> None:
    """The answer's context_tokens is the context as the cut left it: the next append's
    answer adds only its own tokens to it."""
    uuid = await new_task(client, context_length=WINDOW, max_output_tokens=RESERVED)
    await append(client, uuid, INSTRUCTION)
    output = build_output(400)
    cut = await post_messages(client, uuid, {"messages": read_call(1, output)})
    assert len(await elisions(client, uuid)) == 1
    assert cut["tokens"][1] > 3 * CAP  # the message as posted
    assert cut["context_tokens"] < sum(cut["tokens"])  # the context holds it cut
    after = await post_messages(client, uuid, {"role": "user", "content": "Now run the tests."})
    assert after["context_tokens"] == cut["context_tokens"] + after["tokens"][0]


async def test_a_rewind_keeping_a_cut_message_keeps_it_cut(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    """A rewind to the build log the cap cut drops the elision that followed it: the log is
    cut again before the rewind answers, as its append cut it, so the payload's prefix is the
    one the provider cached and no later turn cuts the log from the middle of a payload. The
    context is still what its files rebuild (SPEC §3.2)."""
    uuid = await new_task(client, context_length=WINDOW, max_output_tokens=RESERVED)
    await append(client, uuid, INSTRUCTION)
    output = build_output(400)
    seqs = await append(client, uuid, *read_call(1, output))
    cut, _, _ = await payload(client, uuid)
    reply = await post_messages(client, uuid, {"role": "assistant", "content": "It fails."})
    rewound = await client.post(
        f"/tasks/{uuid}/rewind", json={"to_seq": seqs[1], "include_target": True}
    )
    assert rewound.status_code == 200, rewound.text
    assert len(await elisions(client, uuid)) == 2  # the append's, dropped; the rewind's
    after, _, _ = await payload(client, uuid)
    assert after["messages"] == cut["messages"]
    assert rewound.json()["context_tokens"] == reply["context_tokens"] - reply["tokens"][0]
    directory = task_dir(context_dir, uuid)
    rendered = b"".join(CurrentRender(ContextFiles(directory)))
    assert rendered == (directory / "current.jsonl").read_bytes()


async def test_a_rewind_dropping_a_cut_message_cuts_nothing(client: httpx.AsyncClient) -> None:
    uuid = await new_task(client, context_length=WINDOW, max_output_tokens=RESERVED)
    await append(client, uuid, INSTRUCTION)
    seqs = await append(client, uuid, *read_call(1, build_output(400)))
    rewound = await client.post(f"/tasks/{uuid}/rewind", json={"to_seq": seqs[1]})
    assert rewound.status_code == 200, rewound.text
    assert len(await elisions(client, uuid)) == 1  # the append's alone


async def test_messages_under_the_cap_are_left_whole(client: httpx.AsyncClient) -> None:
    uuid = await new_task(client, context_length=WINDOW, max_output_tokens=RESERVED)
    output = build_output(35)
    assert len(output) // 4 < CAP
    await append(client, uuid, INSTRUCTION, *read_call(1, output), *read_call(2, output))

    assert await elisions(client, uuid) == []
    body, _, _ = await payload(client, uuid)
    assert body["messages"][-1]["content"] == output


async def test_an_oversized_system_prompt_is_cut_to_the_cap_once_not_at_every_turn(
    client: httpx.AsyncClient,
) -> None:
    """A 5,600-token system prompt fits at first. When the turns (each too small to elide) no
    longer fit beside it, one elision cuts it down to the cap, not by just what is over: the
    next turns keep it, and the payload's prefix, as they are. (Elision alone, so that no
    condense or truncation makes the room first.)"""
    system_prompt = "Rule: keep every change small and tested. " * 520
    response = await client.post(
        "/tasks",
        json=task_body(
            system_prompt=system_prompt,
            context_length=WINDOW,
            max_output_tokens=RESERVED,
            compaction={"tiers": ["elide"]},
        ),
    )
    assert response.status_code == 201, response.text
    uuid = response.json()["uuid"]
    await append(client, uuid, INSTRUCTION)
    payloads = []
    for i in range(24):
        await append(client, uuid, *read_call(i, f"ok: step {i} built; " * 8))
        payloads.append((await payload(client, uuid))[0]["messages"])

    cut = [i for i, messages in enumerate(payloads) if ELISION_TEXT in messages[0]["content"]]
    assert cut, "the turns never crowded the system prompt: make them more"
    first = cut[0]
    assert first > 0
    assert cut == list(range(first, len(payloads)))
    assert len(payloads[first][0]["content"]) // 4 <= CAP
    for earlier, later in zip(payloads[first:], payloads[first + 1 :], strict=False):
        assert later[: len(earlier)] == earlier  # each turn only adds at the end
    assert [(e["start_seq"], e["end_seq"]) for e in await elisions(client, uuid)] == [(1, 1)]


async def test_the_head_is_not_cut_as_it_is_appended(client: httpx.AsyncClient) -> None:
    """A task instruction over the cap, in a payload that fits: it stays whole (the head gives
    way only when a payload needs it to)."""
    uuid = await new_task(client, context_length=WINDOW, max_output_tokens=RESERVED)
    instruction = {"role": "user", "content": "Fix the build. Details: " + "context " * 800}
    assert len(instruction["content"]) // 4 > CAP
    await append(client, uuid, instruction)

    assert await elisions(client, uuid) == []
    body, tokens, _ = await payload(client, uuid)
    assert tokens < BUDGET
    assert body["messages"][1] == instruction


async def test_a_condense_summarises_a_cut_output_as_it_was_posted(
    client: httpx.AsyncClient,
) -> None:
    """The summariser reads a message the cap cut as it was posted: the digest counts the
    file view's 400 lines, not what the cut left of them."""
    uuid = await new_task(client, context_length=WINDOW, max_output_tokens=RESERVED)
    view = "\n".join(f"{i:6}\tvalue_{i} = compute({i}, {'x' * 30})" for i in range(1, 401))
    await append(client, uuid, INSTRUCTION, *read_call(1, view))
    assert len(await elisions(client, uuid)) == 1
    turns = [
        {"role": "assistant" if i % 2 else "user", "content": f"step {i} " + "note " * 20}
        for i in range(8)
    ]
    await append(client, uuid, *turns)
    response = await client.post(f"/tasks/{uuid}/compress", json={"strategy": "condense"})
    assert response.json()["kind"] == "condense", response.text

    summary = (await client.get(f"/tasks/{uuid}/summaries")).json()["summaries"][-1]["summary"]
    assert "400 lines of a file view" in summary


async def test_an_append_cut_while_its_task_is_deleted_is_answered_as_committed(
    client: httpx.AsyncClient,
) -> None:
    """A large output appended while the task is being deleted: the cut after the commit, and
    the condense job it may call for, may find the task gone, and the append is still
    answered as what it was (201: committed, 404: the task was gone first), never a server
    error that would have a client retry a write that is stored. (Regression: queueing the
    job for a task deleted meanwhile broke its foreign key: 500.)"""
    output = build_output(400)
    for i in range(12):
        uuid = await new_task(client, context_length=WINDOW, max_output_tokens=RESERVED)
        await append(client, uuid, INSTRUCTION)
        posted, deleted = await asyncio.gather(
            client.post(f"/tasks/{uuid}/messages", json={"messages": read_call(i, output)}),
            client.delete(f"/tasks/{uuid}"),
        )
        assert posted.status_code in (201, 404), posted.text
        assert deleted.status_code == 204, deleted.text
