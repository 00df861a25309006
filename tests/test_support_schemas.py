"""The payload validator itself: it accepts a good request and cannot silently pass a bad one."""

import copy
from typing import Any

import pytest

from tests.support.schemas import (
    openai_schema_check,
    openai_sdk_adapter,
    schema_errors,
    sdk_errors,
    validate_openai_request,
)

pytestmark = pytest.mark.database_agnostic  # touches no database

GOOD: dict[str, Any] = {
    "model": "gpt-4o",
    "messages": [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix a.py"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": ""},
    ],
    "max_completion_tokens": 4096,
}


def _bad(path: str) -> dict[str, Any]:
    """GOOD with one defect, named by ``path``."""
    payload = copy.deepcopy(GOOD)
    messages = payload["messages"]
    if path == "tool_without_tool_call_id":
        del messages[3]["tool_call_id"]
    elif path == "arguments_as_object":
        messages[2]["tool_calls"][0]["function"]["arguments"] = {"path": "a.py"}
    elif path == "role_human":
        messages[1]["role"] = "human"
    else:  # pragma: no cover - a typo in a parametrize list
        raise ValueError(path)
    return payload


BAD_CASES = ["tool_without_tool_call_id", "arguments_as_object", "role_human"]


def test_good_payload_passes_both_validators() -> None:
    """A well-formed request (empty assistant content with tool calls, empty result) is valid."""
    assert schema_errors(GOOD) == []
    assert sdk_errors(GOOD) == []
    validate_openai_request(GOOD)


@pytest.mark.parametrize("defect", BAD_CASES)
def test_json_schema_rejects(defect: str) -> None:
    """The JSON Schema check alone finds each defect."""
    assert schema_errors(_bad(defect))


@pytest.mark.parametrize("defect", BAD_CASES)
def test_sdk_check_rejects(defect: str) -> None:
    """The SDK check alone finds each defect (the forcing walk consumes the lazy lists)."""
    assert sdk_errors(_bad(defect))


@pytest.mark.parametrize("defect", BAD_CASES)
def test_validate_openai_request_fails_readably(defect: str) -> None:
    """The combined helper fails, naming both validators and where the error is."""
    with pytest.raises(AssertionError) as failure:
        validate_openai_request(_bad(defect))
    text = str(failure.value)
    assert "JSON Schema:" in text
    assert "openai SDK:" in text
    assert "messages" in text


@pytest.mark.parametrize("defect", BAD_CASES)
def test_sdk_adapter_is_lazy_without_the_walk(defect: str) -> None:
    """Why the walk exists: validate_python alone returns without complaint for these defects."""
    openai_sdk_adapter().validate_python(_bad(defect))


def test_missing_model_is_rejected() -> None:
    """A top-level requirement is checked too, by both validators."""
    payload = {k: v for k, v in GOOD.items() if k != "model"}
    assert schema_errors(payload)
    assert sdk_errors(payload)


def test_failure_message_stays_short_for_huge_content() -> None:
    """An error on a megabyte-sized message does not echo the whole message."""
    payload = copy.deepcopy(GOOD)
    payload["messages"][1] = {"role": "human", "content": "x" * 1_000_000}
    with pytest.raises(AssertionError) as failure:
        validate_openai_request(payload)
    assert len(str(failure.value)) < 20_000


def test_validators_are_built_once() -> None:
    """The large schema is compiled once per process."""
    assert openai_schema_check() is openai_schema_check()
    assert openai_sdk_adapter() is openai_sdk_adapter()
