"""A history record as plain text, and the bounded pieces of it recall and search show."""

import pytest

from app.messages.text import message_text, snippet

pytestmark = pytest.mark.database_agnostic


def test_the_text_of_a_message_names_its_parts_and_tool_calls() -> None:
    record = {
        "seq": 3,
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Looking at it."},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        ],
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
            }
        ],
    }
    assert message_text(record) == (
        'Looking at it.\n[image]\n[tool call call_1: read_file({"path": "a.py"})]'
    )
    assert message_text({"seq": 9, "type": "marker", "marker": "rewind"}) == ""


def test_a_snippet_is_one_line_around_the_match() -> None:
    text = "line one\n" + "x" * 100 + " the Needle here " + "y" * 100
    at = text.find("Needle")
    shown = snippet(text, at, len("Needle"), 40)
    assert "Needle" in shown
    assert shown.startswith("...")
    assert shown.endswith("...")
    assert "\n" not in shown
    assert len(shown) <= 40 + 6
    assert snippet("short Needle", 6, 6, 40) == "short Needle"
