"""The message body model: OpenAI's role rules. (Fields the service reserves for its own
records are refused by the store, for every writer: tests/context/test_forged_records.py.)"""

import pytest
from pydantic import ValidationError

from app.messages.schemas import MessageIn

pytestmark = pytest.mark.database_agnostic


@pytest.mark.parametrize(
    "body",
    [
        {"role": "system", "content": [{"type": "image_url", "image_url": {"url": "u"}}]},
        {"role": "user", "content": []},
        {"role": "user", "content": None},
        {"role": "user", "content": "x", "tool_calls": []},
        {"role": "assistant", "content": None},
        {"role": "tool", "content": "x"},
        {"role": "developer", "content": "x"},
    ],
)
def test_rejected(body: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        MessageIn.model_validate(body)


def test_extras_are_kept_and_content_parts_dumped() -> None:
    message = MessageIn.model_validate(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "see"},
                {"type": "image_url", "image_url": {"url": "u"}},
            ],
            "reasoning": "kept",
        }
    )
    assert message.fields() == {
        "role": "user",
        "content": [
            {"type": "text", "text": "see"},
            {"type": "image_url", "image_url": {"url": "u"}},
        ],
        "reasoning": "kept",
    }
