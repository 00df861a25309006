"""Pieces of an OpenAI message that every non-OpenAI format has to translate. Pure."""

import base64
import binascii
from collections.abc import Callable
from typing import Any

import orjson

from app.json_depth import nests_deeper

# The image types Anthropic accepts inline; Ollama is given the same set, so that a picture
# reaches the model in both formats or in neither.
IMAGE_MEDIA_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})

# Where arguments that are not a JSON object go: both Anthropic's tool_use.input and Ollama's
# function.arguments must be objects, and dropping the text would hide what the model said.
RAW_ARGUMENTS_KEY = "_raw_arguments"
# Arguments nested deeper are kept as text too: a payload can nest only so deep before JSON
# encoders (orjson's limit is 255 levels, the whole payload's included) refuse it.
MAX_ARGUMENTS_DEPTH = 64


def data_image(url: str) -> tuple[str, str] | None:
    """(media type, base64 data) of an inline image in an accepted type, else None."""
    if not url.startswith("data:") or "," not in url:
        return None
    header, data = url[5:].split(",", 1)
    media_type, _, encoding = header.partition(";")
    if encoding != "base64" or media_type not in IMAGE_MEDIA_TYPES or not data:
        return None
    return media_type, data


# The accepted types by their first bytes (WebP: "RIFF", a size, then "WEBP").
_IMAGE_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def image_media_type(data: str) -> str | None:
    """The type of bare base64 image data (as Ollama's ``images`` hold it), read from its
    first bytes; None unless it is one of IMAGE_MEDIA_TYPES."""
    start = data[:24]  # 18 bytes: enough for every signature above
    try:
        head = base64.b64decode(start + "=" * (-len(start) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return next((kind for magic, kind in _IMAGE_MAGIC if head.startswith(magic)), None)


def is_web_url(url: str) -> bool:
    return url.startswith(("https://", "http://"))


def placeholder(part: dict[str, Any]) -> str:
    """A short text standing in for a content part a format cannot carry (never its data)."""
    kind = part.get("type")
    if kind == "image_url":
        url = str(part.get("image_url", {}).get("url", ""))
        if is_web_url(url):
            return f"[image: {url}]"
        media_type = url[5:].split(",", 1)[0].split(";", 1)[0] if url.startswith("data:") else ""
        return f"[image omitted: {media_type or 'unsupported source'}]"
    if kind == "file":
        name = part.get("file", {}).get("filename")
        return f"[file omitted: {name}]" if name else "[file omitted]"
    if kind == "input_audio":
        return "[audio omitted]"
    return f"[{kind or 'content'} omitted]"


def part_text(part: dict[str, Any]) -> str | None:
    """The text of a text or refusal part; None for any other part."""
    if part.get("type") == "text":
        return str(part.get("text", ""))
    if part.get("type") == "refusal":
        return str(part.get("refusal", ""))
    return None


def content_text(
    content: Any,
    *,
    non_text: Callable[[dict[str, Any]], str] | None = None,
    keep_empty: bool = True,
    strict: bool = False,
) -> str:
    """A message content as one string: a string as it is, None as "", a list of parts as the
    texts of its text parts joined by newlines.

    A part with no text (an image, a file, a refusal) is left out, or written as what
    ``non_text`` makes of it (``stand_in``: what a format that cannot carry the part says
    instead). ``keep_empty=False`` leaves out the empty texts too (the extractive digest reads
    content so). Any other content is "", or with ``strict`` a ``ValueError`` (a chat backend's
    messages and answers, which nothing validated before).
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        if strict:
            raise ValueError("content must be text or a list of parts")
        return ""
    texts = []
    for part in content:
        if not isinstance(part, dict):
            continue
        text = part.get("text")
        if not isinstance(text, str):
            if non_text is None:
                continue
            text = non_text(part)
        if text or keep_empty:
            texts.append(text)
    return "\n".join(texts)


def stand_in(part: dict[str, Any]) -> str:
    """What a format writes for a part with no text: a refusal's words, else a placeholder."""
    text = part_text(part)
    return placeholder(part) if text is None else text


def parse_arguments(arguments: Any) -> dict[str, Any]:
    """A tool call's arguments as a JSON object.

    OpenAI's arguments string is parsed: blank means no arguments ({}); anything that is not a
    JSON object (invalid JSON, a list, a number, an object nested deeper than
    ``MAX_ARGUMENTS_DEPTH``) is kept verbatim under ``RAW_ARGUMENTS_KEY``. An object (as in
    Ollama's messages) is taken as it is; anything else (None) means no arguments.
    """
    if isinstance(arguments, dict):
        return arguments
    if not isinstance(arguments, str) or not arguments.strip():
        return {}
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {RAW_ARGUMENTS_KEY: arguments}
    if isinstance(parsed, dict) and not nests_deeper(parsed, MAX_ARGUMENTS_DEPTH):
        return parsed
    return {RAW_ARGUMENTS_KEY: arguments}


def output_limit(defaults: dict[str, Any], max_output_tokens: int) -> Any:
    """The answer's token limit: the defaults' max_tokens (or OpenAI's newer name), else the
    output the budget reserves."""
    return defaults.get("max_tokens", defaults.get("max_completion_tokens", max_output_tokens))


def compact_json(value: Any) -> str:
    return orjson.dumps(value).decode()
