"""What a truncation marker says: how many messages it hides, and the facts among them an agent
needs again. Pure.

A truncation keeps no summary, but what the user asked, the files the agent's tool calls acted
on and the errors its tools reported should not vanish with it (an agent that forgets an
instruction, a file it edited or the error it was fixing redoes or undoes work). These facts are
small: the marker lists them, in the extractive digest's sections (so a later condense folds them
in like an earlier digest's), the newest first within a share of the budget, and carries along
those of the older truncation markers it hides. What does not fit is counted ("(+N more)").
"""

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from app.context.effective import marker_kind, position
from app.summaries.excerpts import cut_end, normalize
from app.summaries.layout import ERRORS, FILES, MORE_ITEMS_RE, USER_REQUESTS, listed_sections
from app.summaries.rules import acted_paths, record_errors, record_text
from app.tokens.accounting import content_tokens
from app.tokens.counters import TextCounter

# With the seqs of the history it hides: each can be read again (GET /messages/{seq}).
TRUNCATION_TEXT = (
    "[Sliding window truncation: {count} messages hidden to reduce context (seq {first}-{last})]"
)
QUOTE_CHARS = 240  # of each user message: enough to say what was asked
FACTS_SHARE = 0.05  # of the context's budget, the most the facts of one marker may cost
# The share of that room each list may take first (what one leaves, the next may use).
ROOM_SHARES = {USER_REQUESTS: 0.5, FILES: 0.5, ERRORS: 1.0}


@dataclass
class HiddenFacts:
    """What the hidden records hold that the marker lists: each list oldest first, each item
    once; and how many items of each an older marker left out."""

    lists: dict[str, dict[str, None]] = field(
        default_factory=lambda: {title: {} for title in ROOM_SHARES}
    )
    left_out: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ROOM_SHARES, 0))

    def add(self, title: str, item: str) -> None:
        if MORE_ITEMS_RE.fullmatch(item):
            return  # a count, not a fact (a path argument may read "(+9 more)")
        self.lists[title].pop(item, None)  # seen again: it moves to the newest end
        self.lists[title][item] = None

    def carry(self, marker_content: str) -> None:
        """The facts an older truncation marker listed, and its counts of those left out."""
        for title, items in listed_sections(marker_content).items():
            if title not in self.lists:
                continue
            for item in items:
                more = MORE_ITEMS_RE.fullmatch(item)
                if more:
                    self.left_out[title] += int(more.group(1))
                else:
                    self.add(title, item)


def hidden_facts(hidden: Iterable[dict[str, Any]]) -> HiddenFacts:
    """The facts of the hidden records: the user messages' starts, the paths tool calls acted
    on, the error lines of tool results; and what an older truncation marker among them listed."""
    facts = HiddenFacts()
    for record in hidden:
        kind = marker_kind(record)
        if kind == "truncation":
            facts.carry(record_text(record))
            continue
        if kind not in (None, "elision"):
            continue  # a summary keeps its own facts (an elided message is still a message)
        if record.get("role") == "user":
            text = normalize(record_text(record))
            if text:
                quote = f"[seq {position(record)}] {cut_end(text, QUOTE_CHARS)}"
                facts.add(USER_REQUESTS, quote)
        for path in acted_paths(record):
            facts.add(FILES, path)
        if record.get("role") == "tool":
            for line in record_errors(record):
                facts.add(ERRORS, line)
    return facts


def truncation_text(
    count: int, seqs: tuple[int, int], facts: HiddenFacts, counter: TextCounter, budget: int
) -> str:
    """The marker's content: the count, then each list's newest items that fit its share of
    ``FACTS_SHARE`` of ``budget`` tokens, in their order ("(+N more)" for those left out)."""
    room = int(budget * FACTS_SHARE)
    blocks = [TRUNCATION_TEXT.format(count=count, first=seqs[0], last=seqs[1])]
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
        left_out = len(items) - len(kept) + facts.left_out[title]
        lines = [f"- (+{left_out} more)"] if left_out else []
        lines += [f"- {item}" for item in reversed(kept)]
        if lines:
            blocks.append("\n".join([f"{title}:", *lines]))
    return "\n".join(blocks)
