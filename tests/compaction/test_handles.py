"""Reversible masking and elision: a masked result's placeholder and an elision's note name a
seq (and the characters cut), and GET /tasks/{uuid}/messages/{seq} shows exactly what they
hide."""

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.compaction.elision import elided
from app.config import Settings
from app.tokens.counters import HeuristicCounter
from tests.support.payloads import payload_messages
from tests.support.tasks import append, new_task

HANDLE = re.compile(
    r"\[\.\.\. ([\d,]+) characters elided to fit the context window "
    r"\(seq (\d+), chars ([\d,]+)-([\d,]+)\) \.\.\.\]"
)
MASK_SEQ = re.compile(r"\) hidden: .*, seq (\d+)\]")


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    return Settings(context_dir=context_dir, token_counter="heuristic")


def number(text: str) -> int:
    return int(text.replace(",", ""))


def read_turn(i: int, output: str) -> list[dict[str, Any]]:
    call = {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/m{i}.py"})},
    }
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": output},
    ]


async def expand(client: httpx.AsyncClient, uuid: str, seq: int, **params: Any) -> str:
    """All of the range, page by page."""
    text, start = "", params.pop("start", 0)
    while start is not None:
        response = await client.get(
            f"/tasks/{uuid}/messages/{seq}", params={"start": start, **params}
        )
        assert response.status_code == 200, response.text
        page = response.json()
        text += page["text"]
        start = page["next_start"]
    return text


async def test_an_elided_output_names_the_range_it_cut(client: httpx.AsyncClient) -> None:
    """A 60 KB output in an 8k window is cut as it is appended; its note's range, expanded,
    is exactly what the cut took."""
    uuid = await new_task(client, context_length=8000, max_output_tokens=1000)
    huge = "\n".join(f"line {i:05d}: build output {'x' * 40}" for i in range(1200))
    instruction = {"role": "user", "content": "Build it."}
    seqs = await append(client, uuid, instruction, *read_turn(1, huge))

    shown = (await payload_messages(client, uuid))[-1]["content"]

    found = HANDLE.search(shown)
    assert found is not None, shown[:500]
    cut, seq, start, end = (number(g) for g in found.groups())
    assert seq == seqs[-1]
    assert end - start == cut
    # The note is a line of its own: a newline on each side.
    assert shown[: found.start() - 1] == huge[:start]
    assert shown[found.end() + 1 :] == huge[end:]
    assert await expand(client, uuid, seq, start=start, end=end) == huge[start:end]


async def test_a_masked_output_comes_back_whole_by_its_seq(client: httpx.AsyncClient) -> None:
    uuid = await new_task(client)
    outputs = [f"def f{i}():\n" + f"    return {i}\n" * 300 for i in range(8)]
    turns = [turn for i, output in enumerate(outputs) for turn in read_turn(i, output)]
    await append(client, uuid, {"role": "user", "content": "Read them all."}, *turns)
    response = await client.post(f"/tasks/{uuid}/compress", json={"strategy": "mask"})
    assert response.json()["kind"] == "mask", response.text

    masked = [
        m for m in await payload_messages(client, uuid) if MASK_SEQ.search(m["content"] or "")
    ]

    assert masked
    for message in masked:
        found = MASK_SEQ.search(message["content"])
        assert found is not None
        assert await expand(client, uuid, int(found.group(1))) in outputs


def test_the_handle_costs_are_cut_too() -> None:
    """A note with a handle is longer than one without; the cut grows by its cost, so the
    elided text is no larger for carrying it."""
    counter = HeuristicCounter()
    text = "word " * 4000
    plain, handled = elided(counter, text, 1000), elided(counter, text, 1000, seq=12345)
    assert HANDLE.search(handled)
    assert counter.count_text(handled) <= counter.count_text(plain)


@pytest.mark.parametrize(
    ("strategy", "heading"),
    [
        ("truncate", r"\[Sliding window truncation: \d+ messages hidden to reduce context "),
        ("condense", r"\[Summary of the earlier conversation \(\d+ messages, "),
    ],
)
async def test_a_summary_and_a_truncation_name_the_seqs_they_stand_for(
    client: httpx.AsyncClient, strategy: str, heading: str
) -> None:
    uuid = await new_task(client)
    turns = [
        {"role": ("user", "assistant")[i % 2], "content": f"Turn {i}. " + "words " * 150}
        for i in range(14)
    ]
    seqs = await append(client, uuid, {"role": "user", "content": "Fix the parser."}, *turns)
    response = await client.post(f"/tasks/{uuid}/compress", json={"strategy": strategy})
    assert response.status_code == 200, response.text

    [marker] = [m for m in await payload_messages(client, uuid) if re.match(heading, m["content"])]

    found = re.search(r"seq (\d+)-(\d+)\)", marker["content"].split("\n")[0])
    assert found is not None, marker["content"][:200]
    first, last = int(found.group(1)), int(found.group(2))
    assert seqs[1] <= first < last < seqs[-1]
    assert await expand(client, uuid, first) == turns[seqs.index(first) - 1]["content"]
