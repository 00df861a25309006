"""Validating payloads against the OpenAI request schema and the openai SDK's TypedDicts.

Two independent checks, both strict:

- the official OpenAPI-derived JSON Schema (Draft 2020-12): checked by jsonschema-rs (the
  schemas are large and the corpus tests check thousands of payloads: in pure Python that was
  a large share of their time), and when it refuses a payload, explained by jsonschema, every
  error collected (it says what is wrong in a miss among ``anyOf`` branches);
- ``CompletionCreateParamsNonStreaming`` from the openai SDK through a pydantic TypeAdapter. The SDK
  types lists as ``Iterable[...]``, which pydantic validates lazily (it hands back a
  ``ValidatorIterator`` and reports nothing until consumed), so the result is walked and every
  iterator forced with ``list()``; without that walk a bad message passes silently.

The validators are built once per process.
"""

import functools
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema_rs
import pydantic
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError as SchemaError
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming

from tests.support.paths import SCHEMAS

OPENAI_REQUEST_SCHEMA = SCHEMAS / "openai_chat_completion_request.schema.json"

_MAX_SHOWN = 20  # errors listed in a failure message
_MAX_TEXT = 300  # characters of one error's text (messages can echo megabytes of content)


@dataclass(frozen=True)
class SchemaCheck:
    """One JSON Schema, checked fast and explained in detail when the check fails."""

    fast: jsonschema_rs.Draft202012Validator
    detailed: Draft202012Validator


def load_schema_check(path: Path) -> SchemaCheck:
    """The check of the schema in ``path``; jsonschema-rs refuses a schema that is not valid
    against its metaschema (much faster than jsonschema's own check)."""
    schema = json.loads(path.read_text(encoding="utf-8"))
    return SchemaCheck(
        fast=jsonschema_rs.Draft202012Validator(schema), detailed=Draft202012Validator(schema)
    )


@functools.cache
def openai_schema_check() -> SchemaCheck:
    """The JSON Schema check of an OpenAI chat completion request (built once)."""
    return load_schema_check(OPENAI_REQUEST_SCHEMA)


@functools.cache
def openai_sdk_adapter() -> pydantic.TypeAdapter[CompletionCreateParamsNonStreaming]:
    """The pydantic adapter for the openai SDK's request TypedDict (built once)."""
    return pydantic.TypeAdapter(CompletionCreateParamsNonStreaming)


def _short(text: str) -> str:
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + f"... ({len(text)} chars)"


def schema_errors(payload: Any, check: SchemaCheck | None = None) -> list[str]:
    """Every JSON Schema error of the payload (OpenAI's schema by default), as 'path: message'.

    For an ``anyOf`` miss (a message matching none of the roles' schemas) the deepest inner
    error is added, so the line says what is wrong, not only that something is.
    """
    check = check or openai_schema_check()
    if check.fast.is_valid(payload):
        return []
    lines = []
    for error in sorted(check.detailed.iter_errors(payload), key=lambda e: list(e.path)):
        line = f"{error.json_path}: {_short(error.message)}"
        if error.context:
            cause = _deepest(error.context)
            line += f" (deepest cause: {cause.json_path}: {_short(cause.message)})"
        lines.append(line)
    # The two implementations disagreeing is a failure too, not a pass.
    return lines or ["jsonschema-rs refuses the payload, jsonschema accepts it"]


def _deepest(errors: Iterable[SchemaError]) -> SchemaError:
    """The inner error furthest down the instance, searching nested anyOf/oneOf contexts."""
    leaves: list[SchemaError] = []
    stack = list(errors)
    while stack:
        error = stack.pop(0)
        if error.context:
            stack.extend(error.context)
        else:
            leaves.append(error)
    return max(leaves, key=lambda e: len(e.absolute_path))


def _force(value: Any, path: str, errors: list[str]) -> None:
    """Consume every lazy iterator pydantic handed back, recursively, collecting item errors."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            _force(item, f"{path}.{key}" if path else str(key), errors)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _force(item, f"{path}.{index}", errors)
    elif isinstance(value, Iterator):
        try:
            items = list(value)
        except pydantic.ValidationError as exc:
            errors.extend(_sdk_lines(exc, path))
            return
        for index, item in enumerate(items):
            _force(item, f"{path}.{index}", errors)


def _sdk_lines(exc: pydantic.ValidationError, path: str) -> list[str]:
    lines = []
    for error in exc.errors():
        where = ".".join(
            [path, *(str(part) for part in error["loc"])] if path else map(str, error["loc"])
        )
        lines.append(f"{where}: {_short(error['msg'])}")
    return lines


def sdk_errors(payload: Any, adapter: pydantic.TypeAdapter[Any] | None = None) -> list[str]:
    """Every error an SDK's TypedDict (the openai one by default) finds, lazy lists forced."""
    try:
        validated = (adapter or openai_sdk_adapter()).validate_python(payload)
    except pydantic.ValidationError as exc:
        return _sdk_lines(exc, "")
    errors: list[str] = []
    _force(validated, "", errors)
    return errors


def validate_openai_request(payload: Any) -> None:
    """Fail (AssertionError) unless the payload passes both the JSON Schema and the SDK check."""
    raise_problems(
        "OpenAI chat completion request",
        [("JSON Schema", schema_errors(payload)), ("openai SDK", sdk_errors(payload))],
    )


def raise_problems(what: str, checks: list[tuple[str, list[str]]]) -> None:
    """Fail (AssertionError) listing the errors of every (source, errors) check that has some."""
    problems: list[str] = []
    for source, errors in checks:
        if errors:
            shown = "\n  ".join(errors[:_MAX_SHOWN])
            more = (
                f"\n  ... and {len(errors) - _MAX_SHOWN} more" if len(errors) > _MAX_SHOWN else ""
            )
            problems.append(f"{source}: {len(errors)} error(s)\n  {shown}{more}")
    if problems:
        raise AssertionError(f"invalid {what}:\n" + "\n".join(problems))


def assert_tool_pairing(messages: list[dict[str, Any]]) -> None:
    """SPEC §3.4: each tool result answers an earlier call of the payload; calls are answered
    before any other message (an assistant's calls may stay open only at the very end)."""
    open_calls: set[str] = set()
    for index, message in enumerate(messages):
        if message["role"] == "tool":
            assert message["tool_call_id"] in open_calls, (index, message["tool_call_id"])
            open_calls.discard(message["tool_call_id"])
            continue
        assert not open_calls, (index, open_calls)
        if message["role"] == "assistant":
            open_calls = {call["id"] for call in message.get("tool_calls") or ()}
