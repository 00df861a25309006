"""What a truncation marker says: how many messages it hides, and the facts among them an agent
needs again. Pure.

A truncation keeps no summary, but what the user asked, the files the agent's tool calls acted
on and the errors its tools reported must not vanish with it (an agent that forgets an
instruction, a file it edited or the error it was fixing redoes or undoes work). These facts are
small: the marker lists them, in the extractive digest's sections (so a later condense folds them
in like an earlier digest's), newest first within a share of the budget, and carries along those
of the older truncation markers it hides, so they survive any number of truncations.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from app.compaction.excerpts import cut_end, normalize
from app.compaction.extractive import (
    ERRORS,
    FILES,
    TIER_ACTED,
    USER_REQUESTS,
    content_text,
    listed_sections,
    record_errors,
    record_paths,
)
from app.context.effective import marker_kind
from app.tokens.accounting import content_tokens
from app.tokens.counters import TextCounter

TRUNCATION_TEXT = "[Sliding window truncation: {count} messages hidden to reduce context]"
QUOTE_CHARS = 240  # of each user message: enough to say what was asked
FACTS_SHARE = 0.05  # of the context's budget, the most the facts of one marker may cost
# The share of that room each list may take first (what one leaves, the next may use).
ROOM_SHARES = {USER_REQUESTS: 0.5, FILES: 0.5, ERRORS: 1.0}


@dataclass
class HiddenFacts:
    """What the hidden records hold that the marker lists, each list oldest first, each item
    once."""

    lists: dict[str, dict[str, None]] = field(
        default_factory=lambda: {USER_REQUESTS: {}, FILES: {}, ERRORS: {}}
    )

    def add(self, title: str, item: str) -> None:
        self.lists[title].pop(item, None)  # seen again: it moves to the newest end
        self.lists[title][item] = None


def hidden_facts(hidden: Iterable[dict[str, Any]]) -> HiddenFacts:
    """The facts of the hidden records: the user messages' starts, the paths tool calls acted
    on, the error lines of tool results; and what an older truncation marker among them listed."""
    facts = HiddenFacts()
    for record in hidden:
        kind = marker_kind(record)
        if kind == "truncation":
            for title, items in listed_sections(content_text(record.get("content"))).items():
                for item in items if title in facts.lists else ():
                    facts.add(title, item)
            continue
        if kind is not None:
            continue  # a summary keeps its own facts
        if record.get("role") == "user":
            text = normalize(content_text(record.get("content")))
            if text:
                facts.add(USER_REQUESTS, f"[seq {record['seq']}] {cut_end(text, QUOTE_CHARS)}")
        for path, tier in record_paths(record):
            if tier == TIER_ACTED:
                facts.add(FILES, path)
        if record.get("role") == "tool":
            for line in record_errors(record):
                facts.add(ERRORS, line)
    return facts


def truncation_text(count: int, facts: HiddenFacts, counter: TextCounter, budget: int) -> str:
    """The marker's content: the count, then each list's newest items that fit its share of
    ``FACTS_SHARE`` of ``budget`` tokens, in their order ("(+N more)" for those left out)."""
    room = int(budget * FACTS_SHARE)
    blocks = [TRUNCATION_TEXT.format(count=count)]
    for title, items in facts.lists.items():
        allowance = int(room * ROOM_SHARES[title])
        kept: list[str] = []
        for item in reversed(items):
            cost = content_tokens(counter, item) + 2
            if cost > allowance:
                break
            allowance -= cost
            room -= cost
            kept.append(item)
        if kept:
            left_out = len(items) - len(kept)
            more = [f"- (+{left_out} more)"] if left_out else []
            blocks.append("\n".join([f"{title}:", *more, *(f"- {i}" for i in reversed(kept))]))
    return "\n".join(blocks)
