"""Seed 000's heuristic and the message accounting around it."""

import pytest

from app.tokens.accounting import PER_MESSAGE, image_tokens, message_tokens
from app.tokens.counters import HeuristicCounter

pytestmark = pytest.mark.database_agnostic

counter = HeuristicCounter()


def test_english_is_chars_over_four() -> None:
    assert counter.count_text("") == 0
    assert counter.count_text("abcd" * 25) == 25
    assert counter.count_text("abcde") == 2


def test_mostly_japanese_is_chars_over_two() -> None:
    assert counter.count_text("日本語のテキスト" * 10) == 40
    half = "あ" * 50 + "a" * 50
    assert counter.count_text(half) == 50
    assert counter.count_text("あ" * 49 + "a" * 51) == 25


def test_message_counts_overhead_tool_calls_and_images() -> None:
    assert message_tokens(counter, {"role": "user", "content": "abcd"}) == PER_MESSAGE + 1
    call = {"id": "c1", "type": "function", "function": {"name": "abcd", "arguments": "abcdabcd"}}
    with_call = message_tokens(
        counter, {"role": "assistant", "content": None, "tool_calls": [call]}
    )
    assert with_call > PER_MESSAGE + 3
    assert image_tokens("data:image/png;base64," + "A" * 10_000) == 100
    assert image_tokens("https://example.com/a.png") == 300
