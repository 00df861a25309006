"""Masking: a tool result hidden behind a placeholder that names its call, its size and its
seq (which GET /tasks/{uuid}/messages/{seq} shows again), and keeps its error lines. Pure,
but for reading the results from messages.jsonl."""

from typing import Any, BinaryIO

import orjson

from app.context.files import visible_records
from app.context.records import openai_message
from app.context.shapes import MaskedResult
from app.formats.costs import TokenCosts
from app.formats.parts import content_text, stand_in
from app.summaries.collectors import grouped_errors

# Characters of a masked result's call arguments its placeholder shows: a label (the call
# itself, paired with it, shows them whole), kept short as it is in every payload after.
MAX_PLACEHOLDER_ARGUMENTS = 30
MAX_PLACEHOLDER_ERRORS = 3  # error lines (grouped) a masked result's placeholder keeps
MAX_PLACEHOLDER_ERROR_CHARS = 200


def masked_results(f: BinaryIO, end: int, seqs: list[int], costs: TokenCosts) -> list[MaskedResult]:
    """What replaces each of these tool results (by seq, as posted): a placeholder naming the
    call, the output's size and its seq, with the placeholder's costs."""
    wanted = set(seqs)
    calls: dict[str, dict[str, Any]] = {}
    masks: list[MaskedResult] = []
    for record in visible_records(f, end, as_posted=True):  # a cut result: as posted
        for call in record.get("tool_calls") or ():
            calls[call["id"]] = call["function"]
        if record["seq"] not in wanted:
            continue
        function = calls.get(record["tool_call_id"], {})
        content = mask_placeholder(record, function)
        masked = openai_message(record) | {"content": content}
        tokens, format_tokens = costs.message(masked)
        masks.append(
            {
                "seq": record["seq"],
                "content": content,
                "tokens": tokens,
                "format_tokens": format_tokens,
            }
        )
    return masks


def mask_placeholder(result: dict[str, Any], function: dict[str, Any]) -> str:
    """``[output of read_file(path="src/a.py") hidden: 412 lines, 18.3 KB, seq 57]``, and the
    output's error lines, grouped as a digest groups them (an error is the fact of an output an
    agent most needs again)."""
    text = content_text(result.get("content"), non_text=stand_in)
    name = function.get("name") or result.get("tool_name") or "a tool"
    arguments = _short_arguments(function.get("arguments") or "")
    size = len(text.encode())
    shown = f"{size / 1024:.1f} KB" if size >= 1024 else f"{size} bytes"
    lines = text.count("\n") + 1 if text else 0
    placeholder = (
        f"[output of {name}({arguments}) hidden: {lines} lines, {shown}, seq {result['seq']}]"
    )
    errors, more = grouped_errors(
        result, limit=MAX_PLACEHOLDER_ERRORS, max_chars=MAX_PLACEHOLDER_ERROR_CHARS
    )
    if more:
        errors.append(f"({more} more)")
    return "\n".join([placeholder, *(f"error: {line}" for line in errors)])


def _short_arguments(raw: str) -> str:
    """key="value" pairs of a call's arguments, each value cut to fit one short line."""
    try:
        parsed = orjson.loads(raw) if raw.strip() else {}
    except orjson.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        return _shorten(raw, MAX_PLACEHOLDER_ARGUMENTS)
    pairs = []
    for key, value in parsed.items():
        shown = value if isinstance(value, str) else orjson.dumps(value).decode()
        pairs.append(f"{key}={orjson.dumps(_shorten(shown, 80)).decode()}")
    return _shorten(", ".join(pairs), MAX_PLACEHOLDER_ARGUMENTS)


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def placeholder_errors(result: dict[str, Any]) -> list[str]:
    """A tool result's error lines, grouped as its placeholder shows them (an error is what
    an agent most needs again); those an earlier elision listed, once. An elision that cuts a
    tool output keeps these after its cut."""
    errors, _ = grouped_errors(
        result, limit=MAX_PLACEHOLDER_ERRORS, max_chars=MAX_PLACEHOLDER_ERROR_CHARS
    )
    return list(dict.fromkeys(line.removeprefix("error: ") for line in errors))
