"""Excerpts of text as summaries and markers quote them: whitespace collapsed, cuts marked. Pure."""

ELLIPSIS = "…"


def normalize(text: str) -> str:
    """Collapse runs of whitespace to one space: the form in which excerpts are quoted."""
    return " ".join(text.split())


def cut_end(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters, its end cut and marked."""
    if len(text) <= limit:
        return text
    return text[: limit - 1].rstrip() + ELLIPSIS if limit > 0 else ""
