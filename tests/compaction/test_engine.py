"""The compaction engine through the API: condense, truncate, elide, rewind, rebuild.

Every test runs the real app (real SQLite, real files) with the default extractive summariser.
Tasks use a 128k window unless said otherwise, so no background condense job is ever scheduled
by an append (the threshold is never crossed) and every compaction is the one the test asks for.
"""

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from app.context.files import ContextFiles, CurrentRender
from app.summaries.layout import KEPT_TITLE
from tests.support.app import running_app
from tests.support.errors import assert_error
from tests.support.files import read_jsonl, task_dir
from tests.support.payloads import payload
from tests.support.tasks import SYSTEM_PROMPT, all_messages, append, new_task, task_body


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    """The seed 000 heuristic (characters / 4): these tests work out token counts by hand.
    Exact counting has its own tests (tests/tokens, tests/payloads). No message cap: these
    tests are about what each compaction does when asked; the cap, which cuts a large message
    as it is appended, has its own (test_message_cap.py)."""
    return Settings(
        context_dir=context_dir, token_counter="heuristic", compaction={"max_message_share": 1.0}
    )


Message = dict[str, Any]

SYSTEM = {"role": "system", "content": SYSTEM_PROMPT}
INSTRUCTION = {"role": "user", "content": "Fix the failing tests in src/ and explain the fix."}
SUMMARY_HEADER = "[Summary of the earlier conversation ({count} messages, seq {first}-{last})]\n"
ELISION_TEXT = "characters elided to fit the context window"
MARKER_COUNT = (
    r"\[Sliding window truncation: (\d+) messages hidden"
    r"|\[Summary of the earlier conversation \((\d+) messages, seq \d+-\d+\)\]"
)


def call_turn(i: int, result: str | None = None) -> list[Message]:
    """An assistant calling read_file on src/mod{i}.py, and the tool's result."""
    call_id = f"call_{i}"
    arguments = json.dumps({"path": f"src/mod{i}.py"})
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "read_file", "arguments": arguments},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": call_id,
            "content": result if result is not None else f"def f{i}():\n    return {i}\n" * 8,
        },
    ]


def text_turns(count: int) -> list[Message]:
    """Alternating assistant and user text messages (~200 tokens each: a digest is smaller)."""
    roles = ("assistant", "user")
    body = "Details of the step, with enough words to be worth a summary. " * 12
    return [{"role": roles[i % 2], "content": f"Turn {i}. {body}"} for i in range(count)]


def tool_conversation(turns: int = 10) -> list[Message]:
    """The instruction and `turns` read_file calls with their results."""
    messages = [INSTRUCTION]
    for i in range(turns):
        messages += call_turn(i)
    return messages


async def compress(client: httpx.AsyncClient, uuid: str, strategy: str) -> dict[str, Any]:
    response = await client.post(f"/tasks/{uuid}/compress", json={"strategy": strategy})
    assert response.status_code == 200, response.text
    outcome: dict[str, Any] = response.json()
    return outcome


async def rewind(
    client: httpx.AsyncClient, uuid: str, to_seq: int, include_target: bool = False
) -> dict[str, Any]:
    body = {"to_seq": to_seq, "include_target": include_target}
    response = await client.post(f"/tasks/{uuid}/rewind", json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


async def tokens_by_format(client: httpx.AsyncClient, uuid: str) -> dict[str, int]:
    """X-Context-Tokens of GET /request in each payload format."""
    counts = {}
    for name in ("openai", "anthropic", "ollama"):
        response = await client.get(f"/tasks/{uuid}/request", params={"format": name})
        assert response.status_code == 200, response.text
        counts[name] = int(response.headers["X-Context-Tokens"])
    return counts


async def statistics(client: httpx.AsyncClient, uuid: str) -> dict[str, Any]:
    response = await client.get(f"/tasks/{uuid}")
    assert response.status_code == 200, response.text
    task: dict[str, Any] = response.json()
    return task


# -- condense ---------------------------------------------------------------------------------


async def test_condense_replaces_the_middle_with_one_summary(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    """Condense keeps the head and the tail, puts one summary in the hidden middle's place."""
    uuid = await new_task(client)
    posted = tool_conversation(10)  # seqs 2..22: instruction, then calls (odd) and results
    await append(client, uuid, *posted)
    before, tokens_before, _ = await payload(client, uuid)

    outcome = await compress(client, uuid, "condense")

    # The last 5 would start on a tool result (seq 18): the cut moves back to its call.
    assert outcome["kind"] == "condense"
    assert outcome["reason"] is None
    assert outcome["summary_id"] == 1
    assert outcome["hidden_messages"] == 14
    assert outcome["tokens_before"] == tokens_before
    assert outcome["tokens_after"] < outcome["tokens_before"]
    after, tokens_after, _ = await payload(client, uuid)
    assert tokens_after == outcome["tokens_after"]
    messages = after["messages"]
    assert messages[:2] == [SYSTEM, INSTRUCTION]
    summary = messages[2]
    assert summary["role"] == "user"
    assert summary["content"].startswith(SUMMARY_HEADER.format(count=14, first=3, last=16))
    assert "src/mod0.py" in summary["content"]  # the digest speaks of the hidden span
    assert messages[3:] == posted[-6:]
    assert len(messages) == len(before["messages"]) - 14 + 1

    records = await all_messages(client, uuid)
    assert [r["seq"] for r in records] == list(range(1, 24))
    marker = records[-1]
    assert marker["marker"] == "condense"
    assert marker["hides"] == [3, 16]
    assert marker["summary_id"] == 1
    assert marker["content"] == summary["content"]

    (record,) = read_jsonl(task_dir(context_dir, uuid) / "summaries.jsonl")
    hidden = [r for r in records if 3 <= r["seq"] <= 16]
    original = sum(r["tokens"] for r in hidden)
    assert record["id"] == 1
    assert record["kind"] == "condense"
    assert (record["start_seq"], record["end_seq"]) == (3, 16)
    assert record["summary"] == summary["content"]
    assert record["original_tokens"] == original
    assert record["summary_tokens"] == marker["tokens"]
    assert record["ratio"] == round(marker["tokens"] / original, 4)
    assert record["compressed_message_count"] == 14
    assert record["tokens_saved"] == original - marker["tokens"]
    assert record["summarizer"] == "extractive"
    assert record["marker_seq"] == 23
    assert record["duration_ms"] >= 0  # how long it took, for the ops page's timeline
    assert record["created_at"] == record["timestamp"]
    assert outcome["tokens_before"] - outcome["tokens_after"] == record["tokens_saved"]

    page = (await client.get(f"/tasks/{uuid}/summaries")).json()
    assert page == {"summaries": [record], "next_after_id": None}
    task = await statistics(client, uuid)
    assert task["statistics"]["compression_count"] == 1
    assert task["statistics"]["total_summaries"] == 1
    assert task["statistics"]["total_messages"] == 22  # markers are not messages
    assert task["context"]["tokens"] == tokens_after
    assert task["context"]["messages"] == len(messages)


async def test_auto_strategy_condenses_keeping_exactly_the_last_five(
    client: httpx.AsyncClient,
) -> None:
    """strategy auto is a condense; with text turns the tail is exactly keep_recent (5)."""
    uuid = await new_task(client)
    posted = [INSTRUCTION, *text_turns(14)]  # seqs 2..15
    await append(client, uuid, *posted)

    outcome = await compress(client, uuid, "auto")

    assert outcome["kind"] == "condense"
    assert outcome["hidden_messages"] == 16 - 2 - 5
    body, _, _ = await payload(client, uuid)
    assert body["messages"][:2] == [SYSTEM, INSTRUCTION]
    assert body["messages"][2]["content"].startswith(
        SUMMARY_HEADER.format(count=9, first=3, last=11)
    )
    assert body["messages"][3:] == posted[-5:]


async def test_the_digest_shows_the_task_statement_as_kept_not_summarised(
    client: httpx.AsyncClient,
) -> None:
    """The extractive digest quotes the first user message under its own heading, as kept in
    the context for reference; it is not one of the messages summarised.

    Regression: the digest saw only the span, so nothing said what the work was for."""
    uuid = await new_task(client)
    await append(client, uuid, INSTRUCTION, *text_turns(12))

    outcome = await compress(client, uuid, "condense")

    assert outcome["hidden_messages"] == 7
    body, _, _ = await payload(client, uuid)
    summary = body["messages"][2]["content"]
    assert f"\n\n{KEPT_TITLE}:\n- {INSTRUCTION['content']}\n\n" in summary
    assert summary.count(INSTRUCTION["content"]) == 1
    assert "Extractive digest of 7 messages (seq 3-9): 4 assistant, 3 user." in summary
    assert body["messages"][1] == INSTRUCTION


async def test_condense_twice_folds_the_older_summary_in(client: httpx.AsyncClient) -> None:
    """A second condense after more messages hides the first summary with the rest."""
    uuid = await new_task(client)
    await append(client, uuid, INSTRUCTION, *text_turns(12))
    first = await compress(client, uuid, "condense")
    more = text_turns(10)
    await append(client, uuid, *more)

    second = await compress(client, uuid, "condense")

    assert first["kind"] == second["kind"] == "condense"
    assert second["summary_id"] == 2
    body, _, _ = await payload(client, uuid)
    summaries = [m for m in body["messages"] if m["content"].startswith("[Summary of")]
    assert len(summaries) == 1  # the first summary is inside the second's span
    assert body["messages"][3:] == more[-5:]
    # It stands for the first one's 7 messages and 10 more, not for the summary as one.
    assert [second["hidden_messages"]] == shown_counts(summaries) == [7 + 10]
    assert len(body["messages"]) - 1 + 17 == 1 + 1 + 12 + 10  # shown or counted, once
    records = await all_messages(client, uuid)
    markers = [r for r in records if r.get("marker") == "condense"]
    assert markers[1]["hides"][0] == markers[0]["hides"][0]  # starts at the older summary
    assert (await statistics(client, uuid))["statistics"]["compression_count"] == 2


async def test_condense_skips_too_few_messages(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    """Fewer than 5 messages between the head and the kept tail: skipped, nothing written."""
    uuid = await new_task(client)
    await append(client, uuid, INSTRUCTION, *text_turns(8))  # 3 between head and tail
    directory = task_dir(context_dir, uuid)
    messages_before = (directory / "messages.jsonl").read_bytes()
    _, tokens, _ = await payload(client, uuid)

    for strategy in ("auto", "condense"):
        outcome = await compress(client, uuid, strategy)
        assert outcome == {
            "kind": "skipped",
            "reason": "too_few_messages",
            "summary_id": None,
            "hidden_messages": 0,
            "tokens_before": tokens,
            "tokens_after": tokens,
        }

    assert (directory / "messages.jsonl").read_bytes() == messages_before
    assert not (directory / "summaries.jsonl").exists()
    page = (await client.get(f"/tasks/{uuid}/summaries")).json()
    assert page == {"summaries": [], "next_after_id": None}
    assert (await statistics(client, uuid))["statistics"]["compression_count"] == 0


async def test_condense_skips_recently_condensed(context_dir: Path) -> None:
    """With the newest summary in the kept tail, condense skips: recently_condensed.

    Right after a condense the summary is never in the last KEEP_RECENT messages (it keeps at
    least that many after it); it is once the service restarts with a larger KEEP_RECENT.
    """
    async with running_app(
        Settings(context_dir=context_dir, token_counter="heuristic", storage={"fsync": "never"})
    ) as client:
        uuid = await new_task(client)
        await append(client, uuid, INSTRUCTION, *text_turns(12))
        assert (await compress(client, uuid, "condense"))["kind"] == "condense"
        # [system, instruction, summary, 5 kept]: the summary is among the last 6.
    wider = Settings(
        context_dir=context_dir,
        token_counter="heuristic",
        storage={"fsync": "never"},
        compaction={"keep_recent": 6},
    )
    async with running_app(wider) as client:
        messages_file = task_dir(context_dir, uuid) / "messages.jsonl"
        written = messages_file.read_bytes()
        outcome = await compress(client, uuid, "condense")
        assert outcome["kind"] == "skipped"
        assert outcome["reason"] == "recently_condensed"
        assert outcome["tokens_before"] == outcome["tokens_after"]
        assert messages_file.read_bytes() == written
        assert (await statistics(client, uuid))["statistics"]["compression_count"] == 1


# -- truncate ---------------------------------------------------------------------------------


async def test_truncate_hides_half_with_a_marker(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    """Truncate hides an even half after the head behind the sliding-window marker."""
    uuid = await new_task(client)
    posted = [INSTRUCTION, *text_turns(12)]  # seqs 2..14
    await append(client, uuid, *posted)

    outcome = await compress(client, uuid, "truncate")

    assert outcome["kind"] == "truncation"
    assert outcome["hidden_messages"] == 6
    assert outcome["summary_id"] == 1
    assert outcome["tokens_after"] < outcome["tokens_before"]
    body, tokens, _ = await payload(client, uuid)
    assert tokens == outcome["tokens_after"]
    # The user messages it hides are listed, their first 240 characters: seqs 4, 6 and 8.
    quoted = [f"- [seq {seq}] {posted[seq - 2]['content'][:239].rstrip()}…" for seq in (4, 6, 8)]
    text = "\n".join(
        [
            "[Sliding window truncation: 6 messages hidden to reduce context (seq 3-8)]",
            "User requests:",
            *quoted,
        ]
    )
    assert body["messages"] == [SYSTEM, INSTRUCTION, {"role": "user", "content": text}, *posted[7:]]
    records = await all_messages(client, uuid)
    assert records[-1]["marker"] == "truncation"
    assert records[-1]["hides"] == [3, 8]
    (record,) = read_jsonl(task_dir(context_dir, uuid) / "summaries.jsonl")
    assert record["kind"] == "truncation"
    assert record["summary"] == text
    assert (record["start_seq"], record["end_seq"]) == (3, 8)
    assert record["compressed_message_count"] == 6
    assert record["summarizer"] is None
    assert record["marker_seq"] == records[-1]["seq"]
    assert (await statistics(client, uuid))["statistics"]["compression_count"] == 1


def shown_counts(messages: list[Message]) -> list[int]:
    """The message counts that the payload's truncation and summary markers show."""
    counts = []
    for message in messages:
        found = re.match(MARKER_COUNT, message.get("content") or "")
        if found:
            counts.append(int(found.group(1) or found.group(2)))
    return counts


async def test_a_second_truncation_counts_the_messages_the_first_one_hid(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    """A truncation whose span takes in an earlier marker folds it in: the new marker stands
    for the earlier marker's messages and its own, and counts no marker as a message.

    Regression: the earlier marker counted as one message, so the second marker said
    "2 messages hidden" while 7 were.
    """
    uuid = await new_task(client)
    posted = [INSTRUCTION, *text_turns(12)]  # seqs 2..14
    await append(client, uuid, *posted)
    first = await compress(client, uuid, "truncate")  # hides 3..8: 6 messages
    # [system, instruction, marker, 6 turns]: half of 7 is 3, even 2: the marker and a turn.

    second = await compress(client, uuid, "truncate")

    assert (first["hidden_messages"], second["hidden_messages"]) == (6, 7)
    body, _, _ = await payload(client, uuid)
    # The first marker's quotes carried along (no user message among the turn it adds).
    first_text = (await all_messages(client, uuid))[-2]["content"]
    text = first_text.replace("6 messages hidden", "7 messages hidden").replace("3-8)", "3-9)")
    assert text.count("- [seq ") == 3
    assert body["messages"] == [SYSTEM, INSTRUCTION, {"role": "user", "content": text}, *posted[8:]]
    # Every message is either shown or counted by exactly one marker shown.
    shown = len(body["messages"]) - len(shown_counts(body["messages"]))
    assert shown + sum(shown_counts(body["messages"])) == 1 + len(posted)
    records = await all_messages(client, uuid)
    markers = [r for r in records if r.get("marker") == "truncation"]
    assert [m["hides"] for m in markers] == [[3, 8], [3, 9]]  # both stay in the history
    summaries = read_jsonl(task_dir(context_dir, uuid) / "summaries.jsonl")
    assert [s["compressed_message_count"] for s in summaries] == [6, 7]
    assert summaries[1]["summary"] == text


async def test_truncate_never_splits_a_tool_pair(client: httpx.AsyncClient) -> None:
    """A truncation cut landing between a call and its result moves before the call."""
    uuid = await new_task(client)
    posted = [INSTRUCTION, *text_turns(3), *call_turn(1), *call_turn(2), *text_turns(3)]
    # 10 messages after the head: hide 4, which would end between call_1 and its result.
    await append(client, uuid, *posted)

    outcome = await compress(client, uuid, "truncate")

    assert outcome["kind"] == "truncation"
    assert outcome["hidden_messages"] == 3  # moved back off the tool result
    body, _, _ = await payload(client, uuid)
    assert body["messages"][3:] == posted[4:]


async def test_truncating_behind_a_summary_keeps_the_summary(
    client: httpx.AsyncClient,
) -> None:
    """A truncation after a condense keeps the summary (the memory of what came before) and
    hides what follows it, taking a call's results along rather than ending between them.

    Regressions: a truncation over the summary hid it with the messages it stood for, so a
    payload kept nothing of them; and moving the cut back before a call left a span of markers
    only, whose replacement gains nothing.
    """
    uuid = await new_task(client)
    calls: Message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
            for i in ("x1", "x2", "x3")
        ],
    }
    results: list[Message] = [
        {"role": "tool", "tool_call_id": i, "content": f"{i} ok"} for i in ("x1", "x2", "x3")
    ]
    tail = [calls, *results, {"role": "user", "content": "Continue."}]
    posted = [*tool_conversation(7), *tail]  # seqs 2..16, then 17..21
    await append(client, uuid, *posted)
    condensed = await compress(client, uuid, "condense")  # hides 3..16: the tail is kept
    assert condensed["hidden_messages"] == 14
    summary = (await payload(client, uuid))[0]["messages"][2]
    # [system, instruction, summary, call, 3 results, user]: half of the 5 after the summary is
    # 2, which would end between the call and its results; the results go with it.

    outcome = await compress(client, uuid, "truncate")

    assert outcome["kind"] == "truncation"
    assert outcome["hidden_messages"] == 4  # the call and its 3 results
    assert outcome["tokens_after"] < outcome["tokens_before"]
    body, tokens, _ = await payload(client, uuid)
    assert tokens == outcome["tokens_after"]
    text = "[Sliding window truncation: 4 messages hidden to reduce context (seq 17-20)]"
    assert body["messages"] == [
        SYSTEM,
        INSTRUCTION,
        summary,
        {"role": "user", "content": text},
        tail[-1],
    ]
    records = await all_messages(client, uuid)
    assert records[-1]["hides"] == [17, 20]


async def test_request_elides_when_truncation_gains_nothing(client: httpx.AsyncClient) -> None:
    """Over budget with one big message and a truncation marker that only replaces itself.

    Regression: truncate kept "succeeding" by hiding its own previous marker behind a new one
    of the same size, so /request gave up after its rounds with 413 instead of eliding.
    """
    uuid = await new_task(client, context_length=2048, max_output_tokens=256)
    small = {"role": "user", "content": "short note"}
    big = {"role": "user", "content": "[big] " + "alpha beta gamma delta " * 265}
    await append(client, uuid, INSTRUCTION, small, small, *call_turn(1, "ok"), big)

    body, tokens, budget = await payload(client, uuid)

    assert tokens <= budget
    assert ELISION_TEXT in body["messages"][-1]["content"]
    summaries = (await client.get(f"/tasks/{uuid}/summaries")).json()["summaries"]
    assert [s["kind"] for s in summaries][-1] == "elision"
    assert all(s["summary_tokens"] < s["original_tokens"] for s in summaries)


async def test_truncate_of_a_short_context_is_skipped(client: httpx.AsyncClient) -> None:
    """Too little after the head: nothing_to_truncate."""
    uuid = await new_task(client)
    await append(client, uuid, INSTRUCTION, *text_turns(3))
    outcome = await compress(client, uuid, "truncate")
    assert outcome["kind"] == "skipped"
    assert outcome["reason"] == "nothing_to_truncate"


async def test_compress_on_a_stopped_task_is_refused(client: httpx.AsyncClient) -> None:
    """Only running tasks change: compress and rewind answer 409 task_not_writable."""
    uuid = await new_task(client)
    await append(client, uuid, INSTRUCTION, *text_turns(12))
    assert (await client.post(f"/tasks/{uuid}/stop")).status_code == 200
    response = await client.post(f"/tasks/{uuid}/compress", json={"strategy": "truncate"})
    assert_error(response, 409, "task_not_writable")
    response = await client.post(f"/tasks/{uuid}/rewind", json={"to_seq": 3})
    assert_error(response, 409, "task_not_writable")


# -- elision ----------------------------------------------------------------------------------


async def test_request_elides_a_single_huge_tool_output(client: httpx.AsyncClient) -> None:
    """One 60 KB tool result in an 8k window: /request elides its middle and fits the budget."""
    uuid = await new_task(client, context_length=8000, max_output_tokens=1000)
    lines = [f"line {i:05d}: build output {'x' * 40}" for i in range(1200)]
    huge = "\n".join(lines)
    assert len(huge) > 60_000
    posted = [INSTRUCTION, *call_turn(1, huge), {"role": "assistant", "content": "Read it."}]
    seqs = await append(client, uuid, *posted)

    body, tokens, budget = await payload(client, uuid)

    assert budget == int(8000 * 0.9) - 1000
    assert tokens <= budget
    messages = body["messages"]
    assert messages[:2] == [SYSTEM, INSTRUCTION]
    assert messages[2] == posted[1]  # the call, untouched
    tool = messages[3]
    assert tool["role"] == "tool"
    assert tool["tool_call_id"] == "call_1"
    assert ELISION_TEXT in tool["content"]
    assert tool["content"].startswith(lines[0])
    assert tool["content"].endswith(lines[-1])
    assert len(tool["content"]) < len(huge)
    assert messages[4] == posted[-1]

    records = await all_messages(client, uuid)
    original = next(r for r in records if r["seq"] == seqs[2])
    assert original["content"] == huge  # messages.jsonl keeps it whole
    elisions = [r for r in records if r.get("marker") == "elision"]
    assert elisions
    assert all(r["hides"] == [seqs[2], seqs[2]] for r in elisions)
    assert elisions[-1]["tool_call_id"] == "call_1"
    summaries = (await client.get(f"/tasks/{uuid}/summaries")).json()["summaries"]
    assert [s["kind"] for s in summaries].count("elision") == len(elisions)
    assert all(s["compressed_message_count"] == 1 for s in summaries if s["kind"] == "elision")


async def test_an_elision_frees_a_tenth_of_the_context_so_the_next_turns_keep_the_prefix(
    client: httpx.AsyncClient,
) -> None:
    """A context a few tokens over budget loses at least MIN_GAIN_SHARE (10%) of it, not just
    the excess: a just-big-enough cut would come back at the next turn and move the payload's
    prefix (the provider's prompt cache) every time."""
    uuid = await new_task(client, context_length=8000, max_output_tokens=1000)
    lines = [f"line {i:04d}: build output {'x' * 40}" for i in range(300)]
    await append(client, uuid, INSTRUCTION, *call_turn(1, "\n".join(lines)))
    _, under, budget = await payload(client, uuid)
    room = budget - under
    assert room > 200
    await append(client, uuid, {"role": "user", "content": "word " * (room + 60)})

    first, _, _ = await payload(client, uuid)

    summaries = (await client.get(f"/tasks/{uuid}/summaries")).json()["summaries"]
    assert [s["kind"] for s in summaries] == ["elision"]
    # Over budget before: a tenth of the budget is less than a tenth of the context.
    assert summaries[0]["original_tokens"] - summaries[0]["summary_tokens"] >= budget // 10
    assert ELISION_TEXT in first["messages"][3]["content"]  # the large output gave way
    reply = {"role": "assistant", "content": "word " * 150}
    await append(client, uuid, reply)
    second, _, _ = await payload(client, uuid)
    assert second["messages"] == [*first["messages"], reply]
    summaries = (await client.get(f"/tasks/{uuid}/summaries")).json()["summaries"]
    assert [s["kind"] for s in summaries] == ["elision"]  # no second one


async def test_an_elided_tool_output_keeps_the_error_lines_it_cut(
    client: httpx.AsyncClient,
) -> None:
    """The middle of a huge output is cut, but the error lines that were in it follow the
    elided text, as a masked result's placeholder shows them."""
    uuid = await new_task(client, context_length=4000, max_output_tokens=500)
    lines = [f"line {i:03d}: build output {'x' * 400}" for i in range(200)]
    lines[25] = "ValueError: NULL date at row 28"  # among the first 30
    await append(client, uuid, INSTRUCTION, *call_turn(1, "\n".join(lines)))

    body, _, _ = await payload(client, uuid)

    tool = body["messages"][-1]["content"]
    assert ELISION_TEXT in tool
    assert tool.endswith("\nerror: ValueError: NULL date at row 28")


async def test_request_elides_the_next_largest_when_the_largest_cannot_shrink(
    client: httpx.AsyncClient,
) -> None:
    """The largest message's size is in its tool call's arguments: the result is elided.

    Regression: elision only ever tried the largest message; when its content could not shrink
    /request answered 413 though eliding the next fit. Arguments are cut only when no content
    can give way (next test).
    """
    uuid = await new_task(client, context_length=2048, max_output_tokens=256)
    source = "\n".join(f"line {i}: some code here" for i in range(200))
    write = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "w1",
                "type": "function",
                "function": {
                    "name": "write_file",
                    "arguments": json.dumps({"path": "src/big.py", "content": source}),
                },
            }
        ],
    }
    result = {"role": "tool", "tool_call_id": "w1", "content": "written\n" + "ok " * 900}
    await append(client, uuid, INSTRUCTION, write, result)

    body, tokens, budget = await payload(client, uuid)

    assert tokens <= budget
    assert body["messages"][2] == write  # a content could give way: arguments are kept
    assert body["messages"][3]["tool_call_id"] == "w1"
    assert ELISION_TEXT in body["messages"][3]["content"]


async def test_request_cuts_tool_arguments_when_no_content_can_give_way(
    client: httpx.AsyncClient,
) -> None:
    """An unanswered call whose arguments alone exceed the budget (a big file written) has the
    longest string in its arguments cut in the middle; the arguments stay valid JSON."""
    uuid = await new_task(client, context_length=2048, max_output_tokens=256)
    source = "\n".join(f"line {i}: some code here" for i in range(400))
    arguments = {"path": "src/big.py", "content": source}
    call = {
        "id": "w1",
        "type": "function",
        "function": {"name": "write_file", "arguments": json.dumps(arguments)},
    }
    await append(client, uuid, INSTRUCTION, {"role": "assistant", "tool_calls": [call]})

    body, tokens, budget = await payload(client, uuid)

    assert tokens <= budget
    sent = body["messages"][-1]["tool_calls"][0]
    assert sent["id"] == "w1"
    cut = json.loads(sent["function"]["arguments"])
    assert cut["path"] == "src/big.py"
    assert "characters elided to fit the context window" in cut["content"]
    assert cut["content"].startswith("line 0: some code here")
    assert cut["content"].endswith("line 399: some code here")


async def test_request_413_when_the_tools_alone_are_over_budget(client: httpx.AsyncClient) -> None:
    """Tool definitions bigger than the budget cannot be compacted: 413 context_over_budget."""
    tool = {"type": "function", "function": {"name": "big", "description": "rules " * 8000}}
    response = await client.post(
        "/tasks", json=task_body(tools=[tool], context_length=4000, max_output_tokens=500)
    )
    assert response.status_code == 201, response.text
    uuid = response.json()["uuid"]
    await append(client, uuid, INSTRUCTION)
    response = await client.get(f"/tasks/{uuid}/request")
    assert_error(response, 413, "context_over_budget")


async def test_a_system_prompt_over_the_budget_is_elided_as_a_last_resort(
    client: httpx.AsyncClient,
) -> None:
    """A system prompt bigger than the whole budget is cut in the middle (marked) rather than
    the task refused; it stays first, and the instruction stays after it."""
    response = await client.post(
        "/tasks",
        json=task_body(system_prompt="rules " * 8000, context_length=4000, max_output_tokens=500),
    )
    assert response.status_code == 201, response.text
    uuid = response.json()["uuid"]
    await append(client, uuid, INSTRUCTION)
    body, tokens, budget = await payload(client, uuid)
    assert tokens <= budget
    system, instruction = body["messages"]
    assert system["role"] == "system"
    assert "characters elided to fit the context window" in system["content"]
    assert instruction == INSTRUCTION


async def test_dense_messages_are_elided_to_fit_a_tiny_calibrated_budget(
    client: httpx.AsyncClient,
) -> None:
    """A 1k window the provider counts three times ours (a 264-token budget), and a last call
    whose three results are in scripts that cost a token every few characters: elision cuts
    each down to a short start and end, so the payload fits. Regression: elision kept 200
    characters of every message, 70-90 tokens of such text, and GET /request answered 413."""
    uuid = await new_task(client, context_length=1024, max_output_tokens=128)
    dense = "𠮷齉龘靐鬱 👩🏽‍🔬 " * 100
    await append(client, uuid, {"role": "user", "content": dense})
    _, served, _ = await payload(client, uuid)  # what the reply's usage calibrates against
    reply = {"role": "assistant", "content": "Looking.", "usage": {"prompt_tokens": served * 3}}
    calls = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": f"call_{i}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
            for i in range(3)
        ],
    }
    results = [{"role": "tool", "tool_call_id": f"call_{i}", "content": dense} for i in range(3)]
    await append(client, uuid, reply, calls, *results)

    body, tokens, budget = await payload(client, uuid)

    assert budget == 264  # (1024 * 0.9 - 128) / 3, the calibration's largest factor
    assert tokens <= budget
    last = body["messages"][-1]["content"]
    assert ELISION_TEXT in last
    assert last.startswith(dense[:10])
    assert last.endswith(dense[-10:])


# -- rewind -----------------------------------------------------------------------------------


async def test_rewind_without_target_removes_it_and_what_follows(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    """to_seq=5: messages 5.. leave the payload; messages.jsonl keeps every line."""
    uuid = await new_task(client)
    posted = [INSTRUCTION, *text_turns(6)]  # seqs 2..8
    await append(client, uuid, *posted)
    messages_file = task_dir(context_dir, uuid) / "messages.jsonl"
    written = messages_file.read_bytes()

    result = await rewind(client, uuid, 5)

    body, tokens, _ = await payload(client, uuid)
    assert body["messages"] == [SYSTEM, *posted[:3]]  # seqs 1..4
    records = await all_messages(client, uuid)
    assert result == {"last_seq": 9, "messages": 4, "context_tokens": tokens - 3}
    assert sum(r["tokens"] for r in records if r["seq"] <= 4) == result["context_tokens"]
    assert [r["seq"] for r in records] == list(range(1, 10))
    marker = records[-1]
    assert marker["marker"] == "rewind"
    assert marker["to_seq"] == 5
    assert marker["include_target"] is False
    assert marker["tokens"] == 0
    assert marker.get("role") is None  # a rewind is not a message
    assert messages_file.read_bytes().startswith(written)
    assert "role" not in read_jsonl(messages_file)[-1]


async def test_rewind_include_target_keeps_the_target(client: httpx.AsyncClient) -> None:
    """include_target: the target stays, what follows it goes."""
    uuid = await new_task(client)
    posted = [INSTRUCTION, *text_turns(6)]
    await append(client, uuid, *posted)
    result = await rewind(client, uuid, 5, include_target=True)
    body, _, _ = await payload(client, uuid)
    assert body["messages"] == [SYSTEM, *posted[:4]]  # seqs 1..5
    assert result["messages"] == 5


async def test_appends_after_a_rewind_continue_the_seq(client: httpx.AsyncClient) -> None:
    """seq never repeats: the next message comes after the rewind marker."""
    uuid = await new_task(client)
    posted = [INSTRUCTION, *text_turns(6)]
    await append(client, uuid, *posted)
    await rewind(client, uuid, 4)  # marker seq 9
    new = {"role": "user", "content": "Let's try another approach."}
    assert await append(client, uuid, new) == [10]
    body, _, _ = await payload(client, uuid)
    assert body["messages"] == [SYSTEM, *posted[:2], new]
    assert [r["seq"] for r in await all_messages(client, uuid)] == list(range(1, 11))


async def test_rewind_to_before_a_condense_brings_the_messages_back(
    client: httpx.AsyncClient,
) -> None:
    """A condense made after the cut leaves with it: the summarised messages are back."""
    uuid = await new_task(client)
    posted = tool_conversation(10)  # seqs 2..22
    await append(client, uuid, *posted)
    assert (await compress(client, uuid, "condense"))["kind"] == "condense"  # marker 23

    await rewind(client, uuid, 20, include_target=True)

    body, _, _ = await payload(client, uuid)
    assert body["messages"] == [SYSTEM, *posted[:19]]  # seqs 1..20, no summary
    assert not any(m["content"] and "[Summary of" in m["content"] for m in body["messages"])
    records = await all_messages(client, uuid)
    assert [r["seq"] for r in records] == list(range(1, 25))
    # The context can be condensed again, over the restored messages.
    again = await compress(client, uuid, "condense")
    assert again["kind"] == "condense"
    assert again["summary_id"] == 2


async def test_rewind_after_a_condense_keeps_it(client: httpx.AsyncClient) -> None:
    """A cut after the condense marker leaves the summary in force."""
    uuid = await new_task(client)
    await append(client, uuid, *tool_conversation(10))  # seqs 2..22, condense -> 23
    await compress(client, uuid, "condense")
    later = text_turns(4)
    await append(client, uuid, *later)  # seqs 24..27
    before, _, _ = await payload(client, uuid)

    await rewind(client, uuid, 26)

    body, _, _ = await payload(client, uuid)
    assert body["messages"] == before["messages"][:-2]
    assert body["messages"][2]["content"].startswith("[Summary of")


async def test_rewind_undone_by_an_earlier_target(client: httpx.AsyncClient) -> None:
    """A rewind removed by a later rewind no longer applies: its removed messages return."""
    uuid = await new_task(client)
    posted = [INSTRUCTION, *text_turns(6)]  # seqs 2..8
    await append(client, uuid, *posted)
    await rewind(client, uuid, 4)  # removes 4..8; marker 9
    new = text_turns(2)
    await append(client, uuid, *new)  # seqs 10, 11
    await rewind(client, uuid, 6)  # removes 6..11: the first rewind too, so 4 and 5 return
    body, _, _ = await payload(client, uuid)
    assert body["messages"] == [SYSTEM, *posted[:4]]  # seqs 1..5


async def test_rewind_reopens_a_tool_call_at_the_cut(client: httpx.AsyncClient) -> None:
    """A cut between two results leaves the second call open: results first, then messages."""
    uuid = await new_task(client)
    calls = {
        "role": "assistant",
        "content": "Reading two files.",
        "tool_calls": [
            {
                "id": f"c{i}",
                "type": "function",
                "function": {"name": "read_file", "arguments": "{}"},
            }
            for i in (1, 2)
        ],
    }
    first = {"role": "tool", "tool_call_id": "c1", "content": "one"}
    second = {"role": "tool", "tool_call_id": "c2", "content": "two"}
    after = [{"role": "assistant", "content": "Both read."}, {"role": "user", "content": "Go on"}]
    await append(client, uuid, INSTRUCTION, calls, first, second, *after)  # seqs 2..7

    await rewind(client, uuid, 5)  # removes the c2 result and what followed

    body, _, _ = await payload(client, uuid)
    assert body["messages"] == [SYSTEM, INSTRUCTION, calls, first]  # a call open at the end
    user = {"role": "user", "content": "Any news?"}
    response = await client.post(f"/tasks/{uuid}/messages", json=user)
    details = assert_error(response, 409, "tool_results_pending")
    assert details["open"] == ["c2"]
    response = await client.post(f"/tasks/{uuid}/messages", json=first)
    assert_error(response, 422, "unknown_tool_call")  # c1 is still answered
    redo = {"role": "tool", "tool_call_id": "c2", "content": "two, again"}
    assert await append(client, uuid, redo) == [9]
    assert await append(client, uuid, user) == [10]
    body, _, _ = await payload(client, uuid)
    assert body["messages"] == [SYSTEM, INSTRUCTION, calls, first, redo, user]


async def test_rewind_to_an_invalid_target_is_refused(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    """A seq that is not a message (unknown, or a marker): 422, and nothing is written."""
    uuid = await new_task(client)
    await append(client, uuid, INSTRUCTION, *text_turns(12))  # seqs 2..14
    await compress(client, uuid, "truncate")  # marker 15
    directory = task_dir(context_dir, uuid)
    written = (directory / "messages.jsonl").read_bytes()
    for target in (16, 999, 15):
        response = await client.post(f"/tasks/{uuid}/rewind", json={"to_seq": target})
        details = assert_error(response, 422, "invalid_rewind_target")
        assert details["to_seq"] == target
    response = await client.post(f"/tasks/{uuid}/rewind", json={"to_seq": 0})
    assert_error(response, 422, "validation_error")
    assert (directory / "messages.jsonl").read_bytes() == written


# -- rebuild ----------------------------------------------------------------------------------


async def test_current_is_rebuilt_byte_identical_after_compactions_and_rewinds(
    client: httpx.AsyncClient, context_dir: Path, settings: Settings
) -> None:
    """SPEC §3.2: current.jsonl deleted after condense, truncate, rewinds, then the service
    restarted: it is rebuilt the same, and the restarted service serves the same payload."""
    uuid = await new_task(client)
    await append(client, uuid, *tool_conversation(10))  # 2..22
    assert (await compress(client, uuid, "condense"))["kind"] == "condense"  # 23
    await append(client, uuid, *text_turns(8))  # 24..31
    await rewind(client, uuid, 29)  # 32: removes 29..31
    await append(client, uuid, *call_turn(20), *text_turns(5))  # 33..39
    assert (await compress(client, uuid, "truncate"))["kind"] == "truncation"  # 40
    await append(client, uuid, *text_turns(4))  # 41..44
    await rewind(client, uuid, 43, include_target=True)  # 45
    await append(client, uuid, *call_turn(21), {"role": "assistant", "content": "done"})

    directory = task_dir(context_dir, uuid)
    current = directory / "current.jsonl"
    live = current.read_bytes()
    body, tokens, _ = await payload(client, uuid)
    format_tokens = await tokens_by_format(client, uuid)
    view = (await statistics(client, uuid))["context"]
    rendered = b"".join(CurrentRender(ContextFiles(directory)))
    assert rendered == live
    assert [json.loads(line) for line in live.splitlines()] == body["messages"]

    current.unlink()
    async with running_app(settings) as restarted:
        rebuilt_body, rebuilt_tokens, _ = await payload(restarted, uuid)
        assert (await statistics(restarted, uuid))["context"] == view
        # The rebuilt head holds the same totals in every format (SPEC §3.2, §3.3).
        assert await tokens_by_format(restarted, uuid) == format_tokens

    assert current.read_bytes() == live
    assert rebuilt_body == body
    assert rebuilt_tokens == tokens


async def test_a_summary_cut_to_fit_stays_the_newest_summary(context_dir: Path) -> None:
    """When the newest summary itself must give way, it is cut in the middle, never dropped, and
    stays a summary: the payload still shows it, and a later condense folds it in as an earlier
    summary rather than taking it for something the user said."""
    roomy = Settings(
        context_dir=context_dir, storage={"fsync": "never"}, compaction={"summary_max_share": 0.9}
    )
    async with running_app(roomy) as client:
        uuid = await new_task(client, context_length=8_000, max_output_tokens=800)
        turns: list[Message] = []
        for i in range(30):
            ask = f"Request {i}: also handle case {i} in src/m{i}.py, and keep case {i - 1}. "
            turns += [{"role": "user", "content": ask * 3}, text_turns(1)[0]]
        await append(client, uuid, INSTRUCTION, *turns)
        condensed = await compress(client, uuid, "condense")
        assert condensed["kind"] == "condense", condensed
    # No condense now: one would fold the summary into a new one, sized to its share, rather
    # than leave a summary that must give way.
    no_condense = Settings(
        context_dir=context_dir,
        storage={"fsync": "never"},
        compaction={"tiers": ("mask", "truncate", "elide")},
    )
    async with running_app(no_condense) as client:
        _, served, _ = await payload(client, uuid)
        reply = {"role": "assistant", "content": "Next.", "usage": {"prompt_tokens": served * 3}}
        await append(client, uuid, reply)

        body, _, _ = await payload(client, uuid)

        summary = next(m for m in body["messages"] if m["content"].startswith("[Summary of"))
        assert ELISION_TEXT in summary["content"]
        records = await all_messages(client, uuid)
        first = next(r for r in records if r.get("marker") == "condense")
        assert records[-1]["marker"] == "condense"  # the cut summary: a summary still
        assert records[-1]["hides"] == first["hides"]
        page = (await client.get(f"/tasks/{uuid}/summaries")).json()
        assert [s["kind"] for s in page["summaries"]][-1] == "elision"
