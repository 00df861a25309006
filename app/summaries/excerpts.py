"""Excerpts of text as summaries and markers quote them: whitespace collapsed, cuts marked. Pure."""

import re

ELLIPSIS = "…"
# The note an elision puts where it cut the middle of a message, on a line of its own; with a
# handle when the cut text is the message's as posted: characters [start, end) of the text of
# that seq, which GET /tasks/{uuid}/messages/{seq} (and the context_expand tool) shows again.
ELISION_TEXT = "\n[... {cut} characters elided to fit the context window{handle} ...]\n"
ELISION_HANDLE = " (seq {seq}, chars {start:,}-{end:,})"
# Notes written before handles had none: both read as a note.
ELISION_LINE_RE = re.compile(
    r"\[\.\.\. [\d,]+ characters elided to fit the context window"
    r"(?: \(seq \d+, chars [\d,]+-[\d,]+\))? \.\.\.\]"
)


def normalize(text: str) -> str:
    """Collapse runs of whitespace to one space: the form in which excerpts are quoted."""
    return " ".join(text.split())


def cut_end(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters, its end cut and marked."""
    if len(text) <= limit:
        return text
    return text[: limit - 1].rstrip() + ELLIPSIS if limit > 0 else ""


def cut_middle(text: str, limit: int, head: int, tail: int) -> str:
    """``text`` if at most ``limit`` long, else its first ``head`` and last ``tail`` characters
    around a marker that counts the characters cut."""
    if len(text) <= limit:
        return text
    omitted = len(text) - head - tail
    return f"{text[:head]} [{ELLIPSIS} {omitted} chars cut {ELLIPSIS}] {text[-tail:]}"


def cut_middle_within(text: str, limit: int) -> str:
    """``cut_middle`` to at most ``limit`` characters, marker included: two thirds kept from
    the start, one from the end."""
    marker = len(f" [{ELLIPSIS} {len(text)} chars cut {ELLIPSIS}] ")  # at least the real one
    if limit - marker < 3:
        return cut_end(text, limit)
    tail = (limit - marker) // 3
    return cut_middle(text, limit, limit - marker - tail, tail)
