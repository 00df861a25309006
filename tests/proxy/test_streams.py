"""Server-sent event streams of both wires summed up into the answer they stream, from the
fake LLM server's own event renderings, cut at every byte boundary."""

from typing import Any

import pytest

from app.proxy.streams import AnthropicStream, EventSplitter, OpenAIStream, event_data
from app.proxy.wires import anthropic_reply, openai_reply
from tests.fakes.llm_server import (
    ANTHROPIC_PATH,
    OPENAI_PATH,
    ToolUse,
    answer_of,
    anthropic_events,
    openai_events,
)

TURNS: list[str | ToolUse] = [
    "Reading the files now, then the tests.",
    ToolUse("read_file", {"path": "a.py", "n": 2}),
]


def split(data: bytes, size: int) -> list[bytes]:
    """The events ``data`` holds, fed ``size`` bytes at a time."""
    splitter = EventSplitter()
    events: list[bytes] = []
    for start in range(0, len(data), size):
        events += splitter.feed(data[start : start + size])
    assert splitter.rest() == b""
    return events


@pytest.mark.parametrize("size", [1, 3, 64, 100_000])
def test_events_come_out_whole_however_the_bytes_are_cut(size: int) -> None:
    events = openai_events(answer_of(OPENAI_PATH, "m", TURNS[1], 1), usage=True)
    assert split(b"".join(events), size) == events


def test_crlf_boundaries_and_data_lines() -> None:
    data = b'event: a\r\ndata: {"x":\r\ndata: 1}\r\n\r\ndata: [DONE]\r\n\r\n'
    events = split(data, 5)
    assert [event_data(e) for e in events] == ['{"x":\n1}', "[DONE]"]
    assert event_data(b": keep-alive\n\n") is None


@pytest.mark.parametrize("turn", TURNS, ids=["text", "tool_call"])
@pytest.mark.parametrize("keep_usage", [True, False])
def test_an_openai_stream_makes_up_the_completion(turn: Any, keep_usage: bool) -> None:
    answer = answer_of(OPENAI_PATH, "m", turn, 7)
    events = openai_events(answer, usage=True)
    stream = OpenAIStream(keep_usage=keep_usage)
    passed = [e for e in split(b"".join(events), 5) if stream.take(e)]
    assert stream.done
    assert openai_reply(stream.answer()) == openai_reply(answer)
    dropped = [e for e in events if e not in passed]
    if keep_usage:
        assert dropped == []
    else:  # only the usage chunk, which the agent did not ask for
        (usage,) = dropped
        assert b'"usage"' in usage
        assert b'"choices": []' in usage


def test_an_openai_stream_cut_short_is_not_done() -> None:
    events = openai_events(answer_of(OPENAI_PATH, "m", TURNS[0], 1), usage=False)
    stream = OpenAIStream(keep_usage=False)
    for event in events[:-1]:
        stream.take(event)
    assert not stream.done


@pytest.mark.parametrize("turn", TURNS, ids=["text", "tool_use"])
def test_an_anthropic_stream_makes_up_the_message(turn: Any) -> None:
    answer = answer_of(ANTHROPIC_PATH, "m", turn, 3)
    stream = AnthropicStream()
    assert all(stream.take(e) for e in split(b"".join(anthropic_events(answer)), 7))
    assert stream.done
    assert anthropic_reply(stream.answer()) == anthropic_reply(answer)
    assert stream.answer()["usage"] == {"input_tokens": 10, "output_tokens": 5}
