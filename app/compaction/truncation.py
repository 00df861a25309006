"""What a truncation marker says: how many messages it hides, and the start of each user message
among them. Pure.

A truncation keeps no summary, but what the user asked must not vanish with it (an agent that
forgets an instruction given mid-task redoes or undoes work). The marker quotes the start of every
user message it hides, newest first within a bound, and carries along the quotes of the older
truncation markers it hides, so the user's requests survive any number of truncations.
"""

from collections.abc import Iterable
from typing import Any

from app.compaction.excerpts import cut_end, normalize
from app.context.effective import marker_kind
from app.formats.parts import plain_text
from app.tokens.accounting import content_tokens
from app.tokens.counters import TextCounter

TRUNCATION_TEXT = "[Sliding window truncation: {count} messages hidden to reduce context]"
QUOTES_TITLE = "The user's messages among them (their starts):"
QUOTE_CHARS = 240  # of each user message: enough to say what was asked
QUOTES_SHARE = 0.05  # of the context's budget, the most the quotes of one marker may cost


def user_quotes(hidden: Iterable[dict[str, Any]]) -> list[str]:
    """The quotes of the user messages among the hidden records, oldest first: their own, and
    those an older truncation marker among them carried."""
    quotes: list[str] = []
    for record in hidden:
        kind = marker_kind(record)
        if kind == "truncation":
            quotes += quotes_in(plain_text(record.get("content")))
        elif kind is None and record.get("role") == "user":
            text = normalize(plain_text(record.get("content")))
            if text:
                quotes.append(f"[seq {record['seq']}] {cut_end(text, QUOTE_CHARS)}")
    return quotes


def quotes_in(content: str) -> list[str]:
    """The quotes a truncation marker's content lists."""
    _, found, listed = content.partition(f"\n{QUOTES_TITLE}\n")
    return [line[2:] for line in listed.splitlines() if line.startswith("- ")] if found else []


def truncation_text(count: int, quotes: list[str], counter: TextCounter, budget: int) -> str:
    """The marker's content: the count, then the newest quotes that fit ``QUOTES_SHARE`` of
    ``budget`` tokens, in their order (older ones left out say how many)."""
    text = TRUNCATION_TEXT.format(count=count)
    room = int(budget * QUOTES_SHARE)
    kept: list[str] = []
    for quote in reversed(quotes):
        cost = content_tokens(counter, quote) + 2
        if cost > room:
            break
        room -= cost
        kept.append(quote)
    if not kept:
        return text
    left_out = len(quotes) - len(kept)
    lines = [f"- {quote}" for quote in reversed(kept)]
    if left_out:
        lines.insert(0, f"({left_out} older ones left out)")
    return "\n".join([text, QUOTES_TITLE, *lines])
