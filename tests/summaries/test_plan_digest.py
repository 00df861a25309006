"""The plan block of the extractive digest: the items as given, within the digest's size."""

from typing import Any

import pytest

from app.planning.items import ChecklistItem, item_line
from app.summaries.digest import NEXT_STEPS, extractive_digest
from app.summaries.layout import PLAN_TITLE

pytestmark = pytest.mark.database_agnostic

RECORDS: list[dict[str, Any]] = [
    {"role": "user", "content": "Please fix src/parser.py. " + "context " * 20, "seq": 2},
    {"role": "assistant", "content": "Next I will write the tests again. " + "words " * 200},
]
# Thirty items, the open ones last: a tight digest must still show every open one.
PLAN = [ChecklistItem(str(n), f"finished step number {n}", "done") for n in range(1, 26)] + [
    ChecklistItem(str(n), f"open step number {n}", "pending" if n % 2 else "active")
    for n in range(26, 31)
]


def test_a_tight_digest_keeps_the_open_items_and_counts_the_rest() -> None:
    digest = extractive_digest(iter(RECORDS), max_chars=1200, plan=PLAN)
    assert len(digest) <= 1200
    block = digest[digest.index(PLAN_TITLE) :]
    assert len(block) <= 600  # at most half the digest
    for item in PLAN[25:]:
        assert item_line(item) in block
    shown_done = sum(item_line(item) in block for item in PLAN[:25])
    assert 0 < shown_done < 25
    assert f"(+{25 - shown_done} more plan items)" in block
    assert block.endswith(f"{NEXT_STEPS}26, 27, 28, 29, 30")
    assert "Please fix src/parser.py." in digest  # the span is still digested


def test_a_digest_with_a_plan_never_exceeds_its_size() -> None:
    for max_chars in (60, 120, 300, 700, 2000, 6000):
        digest = extractive_digest(iter(RECORDS), max_chars=max_chars, plan=PLAN)
        assert len(digest) <= max_chars, max_chars


def test_a_plan_with_nothing_open_says_so() -> None:
    done = [ChecklistItem("a", "ship it", "done"), ChecklistItem("b", "old idea", "cancelled")]
    digest = extractive_digest(iter(RECORDS), plan=done)
    assert digest.endswith(
        f"{PLAN_TITLE}\n[x] a. ship it\n[-] b. old idea (cancelled)\n"
        f"{NEXT_STEPS}none; every plan item is done or cancelled"
    )
