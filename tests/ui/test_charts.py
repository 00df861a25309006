"""The coordinates the pages draw: the context strip and the bar charts."""

import pytest

from app.ui.charts import (
    BarKind,
    ContextEntry,
    bar_chart,
    context_entry,
    context_picture,
    preview,
)

pytestmark = pytest.mark.database_agnostic


def entry(tokens: int, kind: BarKind = "message") -> ContextEntry:
    return ContextEntry(seq=1, role="user", kind=kind, tokens=tokens, hidden_messages=0, preview="")


def test_bars_are_as_wide_as_their_tokens_and_the_lines_sit_at_their_counts() -> None:
    picture = context_picture(
        [entry(100), entry(300)], total_tokens=500, budget=1000, threshold=800
    )
    assert picture.scale == 1050
    first, second = picture.bars
    assert first.x == 0
    assert second.x == first.width
    assert round(second.width / first.width) == 3
    assert picture.other_x == round(first.width + second.width, 2)  # tools: 100 tokens
    assert abs(picture.other_width - first.width) < 0.01
    assert picture.budget_x == round(1000 * 1000 / 1050, 2)
    assert picture.threshold_x == round(800 * 1000 / 1050, 2)


def test_a_context_over_its_budget_fits_the_strip() -> None:
    picture = context_picture([entry(2000)], total_tokens=2000, budget=1000, threshold=800)
    assert picture.bars[0].width <= 1000
    assert picture.budget_x < picture.bars[0].width


def test_records_become_bars_of_their_kind() -> None:
    message = {"seq": 4, "role": "tool", "content": "out", "tokens": 9, "tool_call_id": "a"}
    masked = message | {"masked_by": 9, "content": "[output hidden]"}
    summary = {
        "seq": 12,
        "type": "marker",
        "marker": "condense",
        "role": "user",
        "content": "summary",
        "hides": [3, 10],
        "hidden_messages": 8,
        "tokens": 50,
    }
    assert context_entry(message, "openai").kind == "message"
    assert context_entry(masked, "openai").kind == "masked"
    shown = context_entry(summary, "openai")
    assert (shown.kind, shown.seq, shown.hidden_messages, shown.tokens) == ("summarised", 3, 8, 50)
    cut = summary | {"marker": "elision", "hides": [5, 5], "hidden_messages": 1}
    assert context_entry(cut, "openai").kind == "elided"


def test_previews_are_one_short_line() -> None:
    assert preview({"content": "a\n\n  b"}) == "a b"
    assert preview({"content": [{"type": "text", "text": "x"}, {"type": "image_url"}]}) == "x"
    call = {"content": None, "tool_calls": [{"function": {"name": "read_file"}}]}
    assert preview(call) == "calls read_file"
    assert len(preview({"content": "y" * 1000})) == 161


def test_chart_bars_reach_the_top_at_the_peak() -> None:
    chart = bar_chart("t", [("a", 0), ("b", 5), ("c", 10)], width=300, height=100)
    assert chart.peak == 10
    assert [b.height for b in chart.bars] == [0, 50, 100]
    assert [b.y for b in chart.bars] == [100, 50, 0]
    assert [b.x for b in chart.bars] == [0, 100, 200]
    assert (chart.first, chart.last) == ("a", "c")
    assert bar_chart("empty", []).bars == []
