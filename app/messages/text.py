"""A history record as plain text, and a snippet of it around a match: what searching the
history shows an agent. Pure."""

from typing import Any

# How parts that are not text read in the plain text of a message.
_PART_TEXT = {"image_url": "[image]", "input_audio": "[audio]", "file": "[file]"}


def message_text(record: dict[str, Any]) -> str:
    """The record's content as text (text parts joined by line breaks, other parts named),
    then one line per tool call it makes. A rewind marker has none: ""."""
    lines: list[str] = []
    content = record.get("content")
    if isinstance(content, str):
        lines.append(content)
    elif isinstance(content, list):
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                lines.append(str(part.get("text", "")))
            elif kind == "refusal":
                lines.append(str(part.get("refusal", "")))
            else:
                lines.append(_PART_TEXT.get(str(kind), f"[{kind} part]"))
    for call in record.get("tool_calls") or ():
        function = call.get("function") or {}
        lines.append(
            f"[tool call {call.get('id', '')}: {function.get('name', '')}"
            f"({function.get('arguments', '')})]"
        )
    return "\n".join(lines)


def snippet(text: str, at: int, length: int, width: int) -> str:
    """About ``width`` characters of ``text`` around [at, at + length), on one line, with "..."
    where text was left out."""
    room = max(width - length, 0)
    begin = max(at - room // 2, 0)
    end = min(max(at + length + room - (at - begin), at + length), len(text))
    piece = " ".join(text[begin:end].split())
    return ("..." if begin > 0 else "") + piece + ("..." if end < len(text) else "")
