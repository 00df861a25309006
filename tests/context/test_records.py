"""Records and the head, without I/O: pairing rules, batches all or nothing, payload fields."""

from typing import Any

import pytest

from app.context.records import ContextAccumulator, HeadState, openai_message
from app.errors import Conflict, InvalidInput, TooLarge
from app.formats.costs import TokenCosts
from app.tokens.counters import HeuristicCounter

pytestmark = pytest.mark.database_agnostic

CALL = {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}


def prepare(acc: ContextAccumulator, messages: list[dict[str, Any]], limit: int = 1 << 20) -> Any:
    prepared = acc.prepare(
        messages, costs=TokenCosts(HeuristicCounter()), timestamp="t", max_message_bytes=limit
    )
    for record, line in prepared:
        acc.admit(record, line)
    return prepared


def test_seqs_tokens_and_head_advance() -> None:
    acc = ContextAccumulator(HeadState())
    prepared = prepare(
        acc, [{"role": "user", "content": "a" * 40}, {"role": "user", "content": "b"}]
    )
    assert [r["seq"] for r, _ in prepared] == [1, 2]
    assert prepared[0][0]["batch_size"] == 2
    assert "batch_size" not in prepared[1][0]
    assert acc.head.last_seq == 2
    assert acc.head.current_messages == 2
    assert acc.head.context_tokens == sum(r["tokens"] for r, _ in prepared)
    assert acc.head.messages_bytes == sum(len(line) for _, line in prepared)


def test_tool_result_gets_tool_name_and_closes_the_call() -> None:
    acc = ContextAccumulator(HeadState())
    prepare(acc, [{"role": "assistant", "content": None, "tool_calls": [CALL]}])
    assert acc.head.open_tool_calls == [["call_1", "read_file"]]
    [(record, _)] = prepare(acc, [{"role": "tool", "tool_call_id": "call_1", "content": "x"}])
    assert record["tool_name"] == "read_file"
    assert acc.head.open_tool_calls == []
    assert acc.stats.tool_calls == 1


def test_other_messages_cannot_interrupt_open_calls() -> None:
    acc = ContextAccumulator(HeadState())
    prepare(acc, [{"role": "assistant", "content": "", "tool_calls": [CALL]}])
    with pytest.raises(Conflict) as caught:
        prepare(acc, [{"role": "user", "content": "hi"}])
    assert caught.value.code == "tool_results_pending"


def test_unknown_tool_result_is_rejected() -> None:
    with pytest.raises(InvalidInput) as caught:
        prepare(
            ContextAccumulator(HeadState()), [{"role": "tool", "tool_call_id": "x", "content": ""}]
        )
    assert caught.value.code == "unknown_tool_call"


def test_a_result_by_name_answers_the_oldest_open_call_of_that_name() -> None:
    """Ollama's clients name the tool, not the call: results pair in the calls' order."""
    calls = [
        {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": "{}"}}
        for n, name in enumerate(["read_file", "ls", "read_file"])
    ]
    acc = ContextAccumulator(HeadState())
    results = [
        {"role": "tool", "tool_name": name, "content": name} for name in ("read_file", "read_file")
    ]
    prepared = prepare(acc, [{"role": "assistant", "content": None, "tool_calls": calls}, *results])
    assert [record["tool_call_id"] for record, _ in prepared[1:]] == ["call_0", "call_2"]
    assert [openai_message(record)["tool_call_id"] for record, _ in prepared[1:]] == [
        "call_0",
        "call_2",
    ]
    assert acc.head.open_tool_calls == [["call_1", "ls"]]
    with pytest.raises(InvalidInput) as caught:
        prepare(acc, [{"role": "tool", "tool_name": "read_file", "content": ""}])
    assert caught.value.code == "unknown_tool_call"
    assert caught.value.details["tool_name"] == "read_file"


def test_a_bad_message_rejects_its_whole_batch_and_leaves_the_head() -> None:
    acc = ContextAccumulator(HeadState())
    before = HeadState(**vars(acc.head))
    with pytest.raises(InvalidInput):
        prepare(
            acc,
            [
                {"role": "user", "content": "ok"},
                {"role": "tool", "tool_call_id": "?", "content": ""},
            ],
        )
    assert acc.head == before


def test_message_size_limit() -> None:
    with pytest.raises(TooLarge) as caught:
        prepare(
            ContextAccumulator(HeadState()), [{"role": "user", "content": "x" * 500}], limit=200
        )
    assert caught.value.code == "message_too_large"


def test_payload_carries_only_schema_fields() -> None:
    record = {
        "seq": 3,
        "role": "tool",
        "content": "out",
        "tool_call_id": "c",
        "tool_name": "read_file",
        "name": "n",
        "timestamp": "t",
        "tokens": 1,
        "custom": 1,
    }
    assert openai_message(record) == {"role": "tool", "content": "out", "tool_call_id": "c"}
    user = {"seq": 1, "role": "user", "content": "hi", "name": "bob", "usage": {}}
    assert openai_message(user) == {"role": "user", "content": "hi", "name": "bob"}
