"""Crash recovery through the real app: files left out of step with the committed head.

A crash is simulated by editing a task's files between requests (no request in flight): every
locked access compares the files with the committed head (context_heads) and repairs them.
"""

import logging
import os
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.context.files import ContextFiles, CurrentRender
from app.context.records import openai_message
from tests.support.corpus import corpus_messages
from tests.support.errors import assert_error
from tests.support.files import task_dir
from tests.support.paths import REPO
from tests.support.records import (
    append_raw,
    build_batch,
    current_lines_of,
    get_json,
    lines_of,
    post_json,
    records_of,
)
from tests.support.tasks import task_body

CALL = {"id": "call_a", "type": "function", "function": {"name": "ls", "arguments": '{"p": 1}'}}
# Committed by the fixture below: seq 1 system, 2 user, 3 assistant call (usage 10+5), 4 tool.
COMMITTED = [
    {"role": "user", "content": "List the files."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [CALL],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
    },
    {"role": "tool", "tool_call_id": "call_a", "content": "a.py\nb.py"},
]


def _recovery_logs(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "app.context.files"]


@pytest.fixture
async def seeded(client: httpx.AsyncClient, context_dir: Path) -> tuple[str, Path]:
    """A running task with 4 committed messages; returns its uuid and directory."""
    created = await post_json(client, "/tasks", task_body(system_prompt="You are an agent."))
    uuid = created["uuid"]
    for seq, message in enumerate(COMMITTED, start=2):  # one by one: no batch to cut across
        assert (await post_json(client, f"/tasks/{uuid}/messages", message))["seqs"] == [seq]
    return uuid, task_dir(context_dir, uuid)


async def _state(client: httpx.AsyncClient, uuid: str) -> dict[str, Any]:
    """Everything a reader can see of a task."""
    return {
        "task": await get_json(client, f"/tasks/{uuid}"),
        "history": await get_json(client, f"/tasks/{uuid}/messages?limit=1000"),
        "request": await get_json(client, f"/tasks/{uuid}/request"),
    }


# -- (1) records written but not committed are caught up ----------------------------------


@pytest.mark.parametrize("with_current", [False, True], ids=["messages-only", "both-files"])
async def test_uncommitted_records_are_caught_up(
    client: httpx.AsyncClient,
    seeded: tuple[str, Path],
    caplog: pytest.LogCaptureFixture,
    with_current: bool,
) -> None:
    """Whole records fsynced to messages.jsonl (and maybe current.jsonl) before a crash cut the
    DB commit short become part of the context: in the history, in the payload, in the
    statistics and in current.jsonl; the next append continues after them."""
    uuid, directory = seeded
    before = (await get_json(client, f"/tasks/{uuid}"))["statistics"]
    second_call = {**CALL, "id": "call_b", "function": {"name": "cat", "arguments": "{}"}}
    orphans = [
        *build_batch(
            5,
            [
                {
                    "role": "assistant",
                    "content": "Reading b.py",
                    "tool_calls": [second_call],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 20},
                }
            ],
        ),
        *build_batch(
            6,
            [{"role": "tool", "content": "print(1)", "tool_call_id": "call_b", "tool_name": "cat"}],
        ),
        *build_batch(
            7,
            [
                {"role": "user", "content": "Thanks"},
                {"role": "assistant", "content": "Done.", "usage": {"prompt_tokens": 7}},
            ],
        ),
    ]
    append_raw(directory / "messages.jsonl", lines_of(orphans))
    if with_current:
        append_raw(directory / "current.jsonl", current_lines_of(orphans))

    with caplog.at_level(logging.WARNING):
        task = await get_json(client, f"/tasks/{uuid}")  # the first access after the crash
    assert any("recovered messages 5..8" in m for m in _recovery_logs(caplog))
    assert task["context"]["last_seq"] == 8
    assert task["context"]["messages"] == 8
    task = await get_json(client, f"/tasks/{uuid}")
    stats = task["statistics"]
    assert stats["total_messages"] == before["total_messages"] + 4
    assert stats["llm_call_count"] == before["llm_call_count"] + 2
    assert stats["tool_call_count"] == before["tool_call_count"] + 1
    assert stats["total_tokens"] == before["total_tokens"] + 127

    history = await get_json(client, f"/tasks/{uuid}/messages?after_seq=4")
    assert history["messages"] == orphans
    assert history["last_seq"] == 8
    payload = await get_json(client, f"/tasks/{uuid}/request")
    assert payload["messages"][4:] == [openai_message(r) for r in orphans]
    assert len(payload["messages"]) == 8

    all_records = records_of(directory / "messages.jsonl")
    assert [r["seq"] for r in all_records] == list(range(1, 9))
    assert (directory / "current.jsonl").read_bytes() == current_lines_of(all_records)

    appended = await post_json(client, f"/tasks/{uuid}/messages", {"role": "user", "content": "!"})
    assert appended["seqs"] == [9]
    final = await get_json(client, f"/tasks/{uuid}")
    assert final["statistics"]["total_messages"] == before["total_messages"] + 5


async def test_first_read_after_crash_reports_recovered_statistics(
    client: httpx.AsyncClient, seeded: tuple[str, Path]
) -> None:
    """The very first GET /tasks/{uuid} after a crash already reports the statistics of the
    messages it just recovered (not the row as it was before the repair)."""
    uuid, directory = seeded
    before = (await get_json(client, f"/tasks/{uuid}"))["statistics"]
    orphan = build_batch(5, [{"role": "user", "content": "one more"}])
    append_raw(directory / "messages.jsonl", lines_of(orphan))
    task = await get_json(client, f"/tasks/{uuid}")
    assert task["context"]["last_seq"] == 5
    assert task["statistics"]["total_messages"] == before["total_messages"] + 1


# -- (2) torn or foreign tails are cut ----------------------------------------------------


@pytest.mark.parametrize(
    "tail",
    [
        b'{"seq": 5, "role": "user", "content": "half a mess',  # torn write, no newline
        b"\x00\x00\x00\x00\n",  # zero-filled block after a power loss
        lines_of(build_batch(7, [{"role": "user", "content": "gap"}])),  # out of sequence
        lines_of(build_batch(4, [{"role": "user", "content": "dup"}])),  # duplicate seq
    ],
    ids=["torn-json", "zeros", "seq-gap", "seq-duplicate"],
)
async def test_bad_tail_is_cut(
    client: httpx.AsyncClient,
    seeded: tuple[str, Path],
    caplog: pytest.LogCaptureFixture,
    tail: bytes,
) -> None:
    """A torn last line (or any line that is not the next seq) in messages.jsonl is cut and
    logged; the task reads exactly as before and the next append gets seq 5."""
    uuid, directory = seeded
    state = await _state(client, uuid)
    messages_before = (directory / "messages.jsonl").read_bytes()
    current_before = (directory / "current.jsonl").read_bytes()
    append_raw(directory / "messages.jsonl", tail)

    with caplog.at_level(logging.WARNING):
        history = await get_json(client, f"/tasks/{uuid}/messages")
    assert any(f"cut {len(tail)} torn bytes" in m for m in _recovery_logs(caplog))
    assert history == state["history"]
    assert (directory / "messages.jsonl").read_bytes() == messages_before
    assert (directory / "current.jsonl").read_bytes() == current_before
    after = await _state(client, uuid)
    assert after["request"] == state["request"]
    assert after["task"]["context"] == state["task"]["context"]
    assert after["task"]["statistics"] == state["task"]["statistics"]

    appended = await post_json(client, f"/tasks/{uuid}/messages", {"role": "user", "content": "!"})
    assert appended["seqs"] == [5]


async def test_good_records_before_a_torn_line_are_kept(
    client: httpx.AsyncClient, seeded: tuple[str, Path]
) -> None:
    """An uncommitted whole record followed by a torn one: the first is caught up, the torn
    rest is cut."""
    uuid, directory = seeded
    good = build_batch(5, [{"role": "user", "content": "kept"}])
    append_raw(directory / "messages.jsonl", lines_of(good) + b'{"seq": 6, "ro')
    history = await get_json(client, f"/tasks/{uuid}/messages?after_seq=4")
    assert history["messages"] == good
    assert records_of(directory / "messages.jsonl")[-1] == good[0]


# -- (3) a batch whose tail was lost is cut whole -----------------------------------------


@pytest.mark.parametrize("preceding", [0, 1], ids=["alone", "after-a-whole-batch"])
async def test_incomplete_batch_is_cut_entirely(
    client: httpx.AsyncClient,
    seeded: tuple[str, Path],
    caplog: pytest.LogCaptureFixture,
    preceding: int,
) -> None:
    """A batch of 3 whose last record never reached the disk is cut entirely (all or nothing),
    while a whole uncommitted batch before it is kept."""
    uuid, directory = seeded
    messages_before = (directory / "messages.jsonl").read_bytes()
    whole = build_batch(5, [{"role": "user", "content": "whole"}])[:preceding]
    batch = build_batch(
        5 + preceding,
        [
            {"role": "user", "content": "first of three"},
            {"role": "assistant", "content": "second of three"},
            {"role": "user", "content": "third of three"},
        ],
    )
    assert batch[0]["batch_size"] == 3
    torn = lines_of(batch[:2])
    append_raw(directory / "messages.jsonl", lines_of(whole) + torn)

    with caplog.at_level(logging.WARNING):
        payload = await get_json(client, f"/tasks/{uuid}/request")
    assert any(f"cut {len(torn)} torn bytes" in m for m in _recovery_logs(caplog))
    assert len(payload["messages"]) == 4 + preceding
    assert (directory / "messages.jsonl").read_bytes() == messages_before + lines_of(whole)
    history = await get_json(client, f"/tasks/{uuid}/messages?after_seq=4")
    assert history["messages"] == whole
    appended = await post_json(client, f"/tasks/{uuid}/messages", {"role": "user", "content": "!"})
    assert appended["seqs"] == [5 + preceding]


async def test_batch_starting_inside_an_unfinished_batch_is_cut(
    client: httpx.AsyncClient, seeded: tuple[str, Path]
) -> None:
    """A batch of 3 with 2 records, then records of another batch (seqs still consecutive): the
    second batch's first record cannot complete the first, so everything after seq 4 is cut."""
    uuid, directory = seeded
    messages_before = (directory / "messages.jsonl").read_bytes()
    first = build_batch(5, [{"role": "user", "content": f"a{i}"} for i in range(3)])[:2]
    second = build_batch(7, [{"role": "user", "content": f"b{i}"} for i in range(2)])
    append_raw(directory / "messages.jsonl", lines_of(first + second))

    history = await get_json(client, f"/tasks/{uuid}/messages")
    assert history["last_seq"] == 4
    assert (directory / "messages.jsonl").read_bytes() == messages_before


# -- (4) current.jsonl missing, short or too long -----------------------------------------


def _delete(path: Path) -> None:
    path.unlink()


def _truncate_half(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def _empty(path: Path) -> None:
    os.truncate(path, 0)


def _garbage(path: Path) -> None:
    append_raw(path, b'{"role": "user", "content": "not committed"}\ngarbage')


@pytest.mark.parametrize(
    "damage",
    [_delete, _truncate_half, _empty, _garbage],
    ids=["deleted", "truncated", "emptied", "extra-bytes"],
)
async def test_current_jsonl_is_rebuilt(
    client: httpx.AsyncClient,
    seeded: tuple[str, Path],
    caplog: pytest.LogCaptureFixture,
    damage: Callable[[Path], None],
) -> None:
    """current.jsonl deleted, cut short or with bytes past the head comes back byte-identical on
    the next read; messages.jsonl is untouched and the payload is unchanged."""
    uuid, directory = seeded
    state = await _state(client, uuid)
    current = directory / "current.jsonl"
    messages_before = (directory / "messages.jsonl").read_bytes()
    current_before = current.read_bytes()
    damage(current)

    payload = await get_json(client, f"/tasks/{uuid}/request")
    assert current.read_bytes() == current_before
    assert payload == state["request"]
    assert (directory / "messages.jsonl").read_bytes() == messages_before
    assert not list(directory.glob("*.tmp"))

    caplog.clear()  # once repaired, files agree with the head: no further repair
    with caplog.at_level(logging.WARNING):
        assert (await get_json(client, f"/tasks/{uuid}"))["context"] == state["task"]["context"]
    assert _recovery_logs(caplog) == []


# -- (5) an uncommitted idempotency key is registered on recovery -------------------------


@pytest.mark.parametrize("read_first", [False, True], ids=["retry-first", "read-then-retry"])
@pytest.mark.parametrize("size", [1, 2], ids=["single", "batch"])
async def test_uncommitted_idempotency_key_is_registered(
    client: httpx.AsyncClient, seeded: tuple[str, Path], read_first: bool, size: int
) -> None:
    """A batch written with its Idempotency-Key but not committed: the client's retry gets the
    original seqs with Idempotent-Replayed: true and nothing is appended again; reusing the key
    for another body is refused."""
    uuid, directory = seeded
    messages = [{"role": "user", "content": "retried"}, {"role": "assistant", "content": "ok"}]
    messages = messages[:size]
    body: dict[str, Any] = {"messages": messages} if size > 1 else messages[0]
    written = build_batch(5, messages, idempotency_key="retry-1")
    append_raw(directory / "messages.jsonl", lines_of(written))
    if read_first:  # recovery by a reader registers the key in the DB
        assert (await get_json(client, f"/tasks/{uuid}"))["context"]["last_seq"] == 4 + size
    assert (await get_json(client, f"/tasks/{uuid}"))["context"]["last_seq"] == 4 + size
    files_after_recovery = (
        (directory / "messages.jsonl").read_bytes(),
        (directory / "current.jsonl").read_bytes(),
    )

    headers = {"Idempotency-Key": "retry-1"}
    retry = await client.post(f"/tasks/{uuid}/messages", json=body, headers=headers)
    assert retry.status_code == 201, retry.text
    assert retry.headers.get("Idempotent-Replayed") == "true"
    assert retry.json() == {
        "seqs": [r["seq"] for r in written],
        "tokens": [r["tokens"] for r in written],
        "context_tokens": sum(r["tokens"] for r in records_of(directory / "messages.jsonl")),
        "compaction_scheduled": False,
    }
    assert (
        (directory / "messages.jsonl").read_bytes(),
        (directory / "current.jsonl").read_bytes(),
    ) == files_after_recovery

    reused = await client.post(
        f"/tasks/{uuid}/messages", json={"role": "user", "content": "other"}, headers=headers
    )
    assert reused.status_code == 422
    assert reused.json()["error"]["code"] == "idempotency_key_reused"
    fresh = await post_json(client, f"/tasks/{uuid}/messages", {"role": "user", "content": "new"})
    assert fresh["seqs"] == [5 + size]


# -- (6) messages.jsonl lost bytes below the committed head -------------------------------


@pytest.fixture
async def longer(client: httpx.AsyncClient, seeded: tuple[str, Path]) -> tuple[str, Path]:
    """The seeded task plus seq 5 (assistant, usage 30+3) and seq 6 (user)."""
    uuid, directory = seeded
    more = [
        {
            "role": "assistant",
            "content": "b.py looks wrong",
            "usage": {"prompt_tokens": 30, "completion_tokens": 3},
        },
        {"role": "user", "content": "Fix it."},
    ]
    assert (await post_json(client, f"/tasks/{uuid}/messages", {"messages": more}))["seqs"] == [
        5,
        6,
    ]
    stats = (await get_json(client, f"/tasks/{uuid}"))["statistics"]
    assert (stats["total_messages"], stats["llm_call_count"], stats["total_tokens"]) == (6, 2, 48)
    return uuid, directory


def _keep_records(path: Path, count: int, extra: bytes = b"") -> list[dict[str, Any]]:
    """Cut the file after its first ``count`` lines (plus ``extra`` bytes); returns those."""
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:count]) + extra)
    return [orjson.loads(line) for line in lines[:count]]


def repair(context_dir: Path, uuid: str) -> dict[str, Any]:
    """``context-service repair UUID`` as an operator runs it (a real process)."""
    env = {k: v for k, v in os.environ.items() if k.upper() != "FSYNC"}
    result = subprocess.run(
        [str(Path(sys.executable).parent / "context-service"), "repair", uuid],
        cwd=REPO,
        env=env | {"CONTEXT_DIR": str(context_dir)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = orjson.loads(result.stdout)
    return report


@pytest.mark.parametrize("extra", [b"", b'{"seq": 3, "role": "assi'], ids=["clean", "mid-line"])
async def test_lost_committed_messages_refuse_the_task_until_repaired(
    client: httpx.AsyncClient,
    longer: tuple[str, Path],
    context_dir: Path,
    extra: bytes,
) -> None:
    """messages.jsonl cut to its first 2 records (bytes lost below the committed head): every
    access answers task_files_damaged naming the missing seqs, nothing is cut or appended, a
    metric counts it; the operator's repair serves what remains and the next append gets seq 7,
    never a lost seq again."""
    uuid, directory = longer
    kept = _keep_records(directory / "messages.jsonl", 2, extra)
    damaged = (directory / "messages.jsonl").read_bytes()

    for method, path, body in [
        ("GET", f"/tasks/{uuid}/request", None),
        ("GET", f"/tasks/{uuid}/messages", None),
        ("GET", f"/tasks/{uuid}", None),
        ("POST", f"/tasks/{uuid}/messages", {"role": "user", "content": "!"}),
    ]:
        response = await client.request(method, path, json=body)
        details = assert_error(response, 500, "task_files_damaged")
        assert details["missing_seqs"] == [3, 6]
        assert details["committed_last_seq"] == 6
        assert details["found_bytes"] == len(damaged)
        assert f"context-service repair {uuid}" in response.json()["error"]["message"]
    assert (directory / "messages.jsonl").read_bytes() == damaged
    metrics = (await client.get("/metrics")).text
    assert "context_damaged_files_total 4.0" in metrics

    assert repair(context_dir, uuid) == {
        "uuid": uuid,
        "thread_id": 0,
        "repaired": True,
        "lost": [3, 6],
    }
    payload = await get_json(client, f"/tasks/{uuid}/request")
    assert payload["messages"] == [openai_message(r) for r in kept]
    assert (directory / "current.jsonl").read_bytes() == current_lines_of(kept)
    records = records_of(directory / "messages.jsonl")
    assert records[:2] == kept
    assert records[2]["seq"] == 6
    assert (records[2]["type"], records[2]["marker"], records[2]["lost"]) == (
        "marker",
        "lost",
        [3, 6],
    )

    task = await get_json(client, f"/tasks/{uuid}")
    assert task["context"]["last_seq"] == 6
    assert task["context"]["messages"] == 2
    stats = task["statistics"]
    assert (stats["total_messages"], stats["llm_call_count"], stats["tool_call_count"]) == (2, 0, 0)
    assert stats["total_tokens"] == 0

    appended = await post_json(client, f"/tasks/{uuid}/messages", {"role": "user", "content": "!"})
    assert appended["seqs"] == [7]
    assert (await get_json(client, f"/tasks/{uuid}"))["statistics"]["total_messages"] == 3
    assert repair(context_dir, uuid)["repaired"] is False  # nothing left to repair


async def test_a_repair_leaves_an_open_tool_call_open(
    client: httpx.AsyncClient, longer: tuple[str, Path], context_dir: Path
) -> None:
    """Cut right after the assistant's tool call: after the repair the call is open again, so
    only its result is accepted next (tool pairing survives the loss)."""
    uuid, directory = longer
    _keep_records(directory / "messages.jsonl", 3)
    assert repair(context_dir, uuid)["lost"] == [4, 6]
    task = await get_json(client, f"/tasks/{uuid}")
    assert task["context"]["last_seq"] == 6
    assert task["statistics"]["tool_call_count"] == 1
    assert task["statistics"]["llm_call_count"] == 1
    assert task["statistics"]["total_tokens"] == 15
    pending = await client.post(f"/tasks/{uuid}/messages", json={"role": "user", "content": "?"})
    assert pending.status_code == 409
    assert pending.json()["error"]["code"] == "tool_results_pending"
    result = {"role": "tool", "tool_call_id": "call_a", "content": "again"}
    assert (await post_json(client, f"/tasks/{uuid}/messages", result))["seqs"] == [7]


async def test_bytes_lost_inside_a_committed_batch_are_damage_too(
    client: httpx.AsyncClient, longer: tuple[str, Path], context_dir: Path
) -> None:
    """Bytes lost in the middle of a committed batch (seq 5-6, batch_size 2; only seq 5 left):
    seq 6 was acknowledged, so it is damage, not a torn tail; the repair keeps seq 5."""
    uuid, directory = longer
    kept = _keep_records(directory / "messages.jsonl", 5)
    assert kept[-1]["batch_size"] == 2
    response = await client.get(f"/tasks/{uuid}")
    assert assert_error(response, 500, "task_files_damaged")["missing_seqs"] == [6, 6]
    assert repair(context_dir, uuid)["lost"] == [6, 6]
    task = await get_json(client, f"/tasks/{uuid}")
    assert task["context"]["last_seq"] == 6
    assert task["statistics"]["total_messages"] == 5
    assert records_of(directory / "messages.jsonl")[:5] == kept
    appended = await post_json(client, f"/tasks/{uuid}/messages", {"role": "user", "content": "!"})
    assert appended["seqs"] == [7]


# -- (7) current.jsonl is a function of messages.jsonl (SPEC §3.2) ------------------------

CORPUS_FILES = [
    "swe-agent__function_calling_simple.jsonl",
    "openhands__multiswe_ponyc-4593.jsonl",
    "claude-agent-sdk__ja_issue-453_evaluation.jsonl",
]


def _as_openai(message: dict[str, Any]) -> dict[str, Any]:
    expected = {"role": message["role"], "content": message.get("content")}
    if message.get("tool_calls"):
        expected["tool_calls"] = message["tool_calls"]
    if message["role"] == "tool":
        expected["tool_call_id"] = message["tool_call_id"]
    return expected


@pytest.mark.parametrize("name", CORPUS_FILES)
async def test_rebuilt_current_equals_live_on_corpus_replay(
    client: httpx.AsyncClient, context_dir: Path, name: str
) -> None:
    """Replay a corpus trajectory in random batches; the current.jsonl rebuilt from
    messages.jsonl alone is byte-identical to the live one, both as computed offline and as
    the service rebuilds it after the live file is deleted."""
    messages = corpus_messages(name)
    created = await post_json(client, "/tasks", task_body(context_length=1_000_000))
    uuid = created["uuid"]
    rng = random.Random(name)
    index = 0
    while index < len(messages):
        size = rng.randint(1, 6)
        chunk = messages[index : index + size]
        body: dict[str, Any] = {"messages": chunk} if len(chunk) > 1 else chunk[0]
        result = await post_json(client, f"/tasks/{uuid}/messages", body)
        assert result["seqs"] == list(range(index + 1, index + len(chunk) + 1))
        index += len(chunk)

    directory = task_dir(context_dir, uuid)
    live = (directory / "current.jsonl").read_bytes()
    assert [orjson.loads(line) for line in live.splitlines()] == [_as_openai(m) for m in messages]
    files = ContextFiles(directory)
    assert b"".join(CurrentRender(files)) == live

    payload = await get_json(client, f"/tasks/{uuid}/request")
    files.current.unlink()
    assert await get_json(client, f"/tasks/{uuid}/request") == payload
    assert files.current.read_bytes() == live
