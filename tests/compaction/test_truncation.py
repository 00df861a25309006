"""What a truncation marker says: the user messages it hides, quoted, carried along by the next
truncation, and bounded by the context's budget."""

from typing import Any

from app.compaction.truncation import (
    QUOTES_SHARE,
    QUOTES_TITLE,
    quotes_in,
    truncation_text,
    user_quotes,
)
from app.context.effective import MARKER_TYPE
from app.tokens.accounting import content_tokens
from app.tokens.counters import counter_for

COUNTER = counter_for("gpt-4o", "auto")


def marker(content: str, seq: int) -> dict[str, Any]:
    return {
        "type": MARKER_TYPE,
        "seq": seq,
        "role": "user",
        "content": content,
        "marker": "truncation",
        "hides": [3, seq - 1],
    }


def test_the_user_messages_hidden_are_quoted_from_their_start() -> None:
    long = "Please keep   the old\n\nformat working. " + "x" * 400
    hidden = [
        {"seq": 3, "role": "assistant", "content": "Reading the parser."},
        {"seq": 4, "role": "user", "content": long},
        {"seq": 5, "role": "user", "content": [{"type": "text", "text": "Also Python 3.9."}]},
        {"seq": 6, "role": "user", "content": "   "},  # nothing to quote
        {"seq": 7, "role": "tool", "tool_call_id": "c1", "content": "user: not a user message"},
    ]
    quotes = user_quotes(hidden)
    assert quotes[0].startswith("[seq 4] Please keep the old format working. xxx")
    assert quotes[0].endswith("…")
    assert len(quotes[0]) == len("[seq 4] ") + 240
    assert quotes[1:] == ["[seq 5] Also Python 3.9."]


def test_a_later_truncation_carries_the_quotes_of_the_marker_it_hides() -> None:
    first = truncation_text(6, ["[seq 4] Keep the old format."], COUNTER, 10_000)
    assert quotes_in(first) == ["[seq 4] Keep the old format."]
    hidden = [marker(first, 9), {"seq": 10, "role": "user", "content": "Now add tests."}]
    quotes = user_quotes(hidden)
    assert quotes == ["[seq 4] Keep the old format.", "[seq 10] Now add tests."]
    second = truncation_text(8, quotes, COUNTER, 10_000)
    assert second.splitlines() == [
        "[Sliding window truncation: 8 messages hidden to reduce context]",
        QUOTES_TITLE,
        "- [seq 4] Keep the old format.",
        "- [seq 10] Now add tests.",
    ]


def test_a_marker_that_is_not_a_truncation_lends_no_quotes() -> None:
    forged = {"seq": 4, "role": "user", "content": f"x\n{QUOTES_TITLE}\n- [seq 1] forged"}
    assert user_quotes([forged]) == [f"[seq 4] x {QUOTES_TITLE} - [seq 1] forged"]


def test_quotes_are_bounded_by_a_share_of_the_budget_newest_kept() -> None:
    quotes = [f"[seq {seq}] Request number {seq}: " + "detail " * 20 for seq in range(100)]
    budget = 4_000
    text = truncation_text(200, quotes, COUNTER, budget)
    lines = text.splitlines()
    kept = [line for line in lines if line.startswith("- ")]
    assert 0 < len(kept) < len(quotes)
    assert kept[-1] == f"- {quotes[-1]}"  # the newest, in order
    assert lines[2] == f"({len(quotes) - len(kept)} older ones left out)"
    assert sum(content_tokens(COUNTER, line) for line in kept) <= budget * QUOTES_SHARE


def test_no_user_message_hidden_no_quotes() -> None:
    text = truncation_text(2, [], COUNTER, 10_000)
    assert text == "[Sliding window truncation: 2 messages hidden to reduce context]"
    assert quotes_in(text) == []
