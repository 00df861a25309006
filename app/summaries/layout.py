"""The extractive digest's text as both its writer and its readers know it: the header, the
section titles, the "(+N more)" count, ``$ROOT``, the plan block's title; and reading a digest
(or a truncation marker, which lists its facts in the same sections) back into its items. Pure.
"""

import re

from app.summaries.excerpts import ELISION_LINE_RE, ELLIPSIS

ROOT_TOKEN = "$ROOT"  # stands for the directory that holds many of the paths
DIGEST_TITLE = "Extractive digest of "  # how a digest's header line starts
MORE_ITEMS_RE = re.compile(r"\(\+(\d+) more\)")  # what a list says of the items it leaves out
# The titles of the sections that are read back.
OUTPUT_PATHS = "Other paths seen in tool output"
USER_REQUESTS = "User requests"
FILES = "Files"
ERRORS = "Errors"
EARLIER = "Earlier summaries"
KEPT_TITLE = "First user message (kept in the context, for reference)"
PLAN_TITLE = "Plan (as recorded, not to be re-derived):"


def digest_sections(text: str) -> dict[str, list[str]] | None:
    """A digest's items by section title, ``$ROOT`` written out, its header line as the one item
    of ``DIGEST_TITLE``; None if the text is no digest. The text may start with a one-line
    heading (a condense summary's "[Summary of the earlier conversation ...]")."""
    lines = text.strip().split("\n")
    if not lines[0].startswith(DIGEST_TITLE):
        lines = lines[1:]
    if not lines or not lines[0].startswith(DIGEST_TITLE):
        return None
    root_line = f"{ROOT_TOKEN} = "
    root = lines[1].removeprefix(root_line) if lines[1:2] and lines[1].startswith(root_line) else ""
    sections = {DIGEST_TITLE: [lines[0]], **listed_sections("\n".join(lines[2 if root else 1 :]))}
    if root:
        for items in sections.values():
            items[:] = [item.replace(ROOT_TOKEN, root) for item in items]
    return sections


def listed_sections(text: str) -> dict[str, list[str]]:
    """The "- " items of each "Title:" block of a text (a digest's body, a truncation marker)."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    after_cut = False  # the line after an elision's note: the rest of an item cut in two
    for line in text.split("\n"):
        if ELISION_LINE_RE.fullmatch(line):
            if current:
                current[-1] += ELLIPSIS  # the item the cut began in, marked as cut
            after_cut = True
            continue
        if line.startswith("- ") and current is not None:
            current.append(line[2:])
        elif line.endswith(":") and not line.startswith("- "):
            current = sections.setdefault(line[:-1], [])
        elif not after_cut:
            current = None
        after_cut = False
    return sections


def without_plan(summary: str) -> str:
    """An earlier digest without its plan block: the plan given now supersedes it."""
    return summary.split(f"\n\n{PLAN_TITLE}", 1)[0]
