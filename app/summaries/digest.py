"""The extractive digest: a deterministic, honest summary of messages that needs no LLM.

The records are read once, in order, and only bounded state is kept (every list is capped), so a
digest of a huge context costs little memory. The result is plain text of at most ``max_chars``
(or, by ``digest_within``, of at most a number of tokens):

    First user message  given apart (the task, which the context keeps): its start, for reference
    Earlier summaries   what an earlier condense summary said beyond the lists below
    User requests       verbatim; long ones cut in the middle with a marker; with those a
                        truncation marker quoted
    Assistant notes     the first sentence(s) of assistant texts
    Tool calls          name, salient argument, outcome (ok/error and the first meaningful line)
    Errors              error-like lines from tool results and messages, each once; lines that
                        differ only in one number or id as one line listing the values
                        ("ValueError: NULL date at row 5, 28, 51 (3 more)")
    Files               paths from tool arguments and texts, deduplicated, in first-seen order
    Latest state        the last assistant text and the last tool call with its outcome
    Plan                the current plan items as recorded, with their status, and which of
                        them are still next steps (given by the caller, never inferred)

An earlier summary met in the records (a condense summary condensed again) is folded in: when
it is a digest, its paths, errors, user requests and notes join these lists, and the rest of it
is an earlier summary, cut in the middle to fit rather than left out. So a digest of digests
carries the earlier facts forward within the same bound.

Nothing is invented: every excerpt is copied from the input (runs of whitespace collapsed to one
space) and every cut is marked ("…", "[… N chars cut …]", "(+N more)"); a call repeated with the
same outcome is written once with "(xN)". When one directory holds many of the paths, it is named
once as ``$ROOT`` and written ``$ROOT/...`` everywhere. Paths seen only in tool output are listed
apart, after Files. When the text does not fit, files, errors and user requests are kept first.

The digest is built in layers: ``app.summaries.rules`` says what a record shows (paths, error
lines, tool calls and their outcomes), ``app.summaries.collectors`` keeps the bounded state the
records feed, ``app.summaries.layout`` holds the text's titles and reads a digest back; this
module renders the state in ``max_chars`` (or a number of tokens) and is the entry point.
"""

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.planning.items import OPEN_STATUSES, ChecklistItem, item_line, open_items
from app.summaries.collectors import (
    DigestState,
    ErrorGroups,
    HeadTail,
    PathIndex,
    ToolCall,
    digest_state,
)
from app.summaries.excerpts import cut_end, cut_middle_within
from app.summaries.layout import (
    EARLIER,
    ERRORS,
    FILES,
    KEPT_TITLE,
    MORE_ITEMS_RE,
    OUTPUT_PATHS,
    PLAN_TITLE,
    ROOT_TOKEN,
    USER_REQUESTS,
)
from app.summaries.rules import ERROR_MAX, TIER_OUTPUT

DEFAULT_MAX_CHARS = 6000
CHARS_PER_TOKEN = 4  # where a digest sized in tokens starts
MAX_RESIZES = 4
EARLIER_MIN = 80  # an earlier summary cut shorter than this says nothing: it is left out
MIN_ROOT_SAVING = 150
# A user request is cut no shorter than this: its first 200 or so characters (two thirds of
# what a middle cut keeps) say what was asked.
USER_MIN = 360


@dataclass
class Section:
    """A titled list; ``ranks`` says which items to keep first (lowest) when the list is cut."""

    title: str
    items: list[str]
    ranks: list[int]
    dropped: int = 0  # items the bounded state already left out...
    dropped_at: int = 0  # ...and where in ``items`` they were

    def least_cost(self) -> int:
        """What the title and a "(+N more)" line cost in the digest (0 for an empty section)."""
        if not self.items and not self.dropped:
            return 0
        return len(self.title) + len(_more_line(len(self.items) + self.dropped)) + 4

    def fit(self, budget: int) -> list[str]:
        """The section's lines, costing at most ``budget`` characters (newlines included)."""
        room = budget - len(self.title) - 2
        if not (self.items or self.dropped) or room < 0:
            return []
        if not self.dropped and sum(len(item) + 3 for item in self.items) <= room:
            return self._lines(set(range(len(self.items))))
        room -= len(_more_line(len(self.items) + self.dropped)) + 1
        if room < 0:
            return []
        chosen: set[int] = set()
        for index in sorted(range(len(self.items)), key=lambda i: (self.ranks[i], i)):
            if len(self.items[index]) + 3 <= room:
                chosen.add(index)
                room -= len(self.items[index]) + 3
        return self._lines(chosen)

    def _lines(self, chosen: set[int]) -> list[str]:
        """The title, the chosen items in order, and one "(+N more)" at the first gap."""
        omitted = len(self.items) - len(chosen) + self.dropped
        lines = [f"{self.title}:"]
        marked = omitted == 0
        for index, item in enumerate(self.items):
            gap = index not in chosen or (self.dropped > 0 and index == self.dropped_at)
            if gap and not marked:
                lines.append(_more_line(omitted))
                marked = True
            if index in chosen:
                lines.append(f"- {item}")
        if not marked:
            lines.append(_more_line(omitted))
        return lines


@dataclass
class EarlierSection(Section):
    """Earlier summaries: cut in the middle to fit rather than left out (the latest gets the
    most room), since each stands for much of the conversation."""

    @classmethod
    def of(cls, section: Section) -> "EarlierSection":
        return cls(section.title, section.items, section.ranks, section.dropped, section.dropped_at)

    def fit(self, budget: int) -> list[str]:
        room = budget - len(self.title) - 2
        if not self.items or room < 0:
            return super().fit(budget)
        if not self.dropped and sum(len(item) + 3 for item in self.items) <= room:
            return super().fit(budget)
        room -= len(_more_line(len(self.items) + self.dropped)) + 1
        items = list(self.items)
        chosen: set[int] = set()
        for index in reversed(range(len(items))):  # the latest first, each up to an equal share
            share = room // (index + 1) - 3
            if share >= EARLIER_MIN:
                items[index] = cut_middle_within(items[index], share)
                chosen.add(index)
                room -= len(items[index]) + 3
        return Section(self.title, items, self.ranks, self.dropped, self.dropped_at)._lines(chosen)


@dataclass
class RequestsSection(Section):
    """User requests: the longest are cut in the middle, to one length, before any is left
    out (each is an instruction the agent must still follow; its start says what was asked)."""

    @classmethod
    def of(cls, section: Section) -> "RequestsSection":
        return cls(section.title, section.items, section.ranks, section.dropped, section.dropped_at)

    def fit(self, budget: int) -> list[str]:
        room = budget - len(self.title) - 2
        if self.dropped:
            room -= len(_more_line(len(self.items) + self.dropped)) + 1
        lengths = [len(item) for item in self.items]
        if room < 0 or sum(length + 3 for length in lengths) <= room:
            return super().fit(budget)
        # The longest length every item may keep with all of them shown, but not below the
        # floor (then the lowest ranked are left out, as in any section).
        low, high = USER_MIN, max(lengths)
        while low < high:
            middle = (low + high + 1) // 2
            if sum(min(length, middle) + 3 for length in lengths) <= room:
                low = middle
            else:
                high = middle - 1
        items = [cut_middle_within(item, low) if len(item) > low else item for item in self.items]
        return Section(self.title, items, self.ranks, self.dropped, self.dropped_at).fit(budget)


@dataclass
class ErrorsSection(Section):
    """Error lines; when they do not all fit, groups list fewer values ("(N more)") if that
    shows more of the lines."""

    compact: list[str] = field(default_factory=list)

    def fit(self, budget: int) -> list[str]:
        full = super().fit(budget)
        if len(full) - 1 == len(self.items):  # all shown, no "(+N more)"
            return full
        compact = Section(self.title, self.compact, self.ranks, self.dropped, self.dropped_at)
        shorter = compact.fit(budget)
        return shorter if _shown(shorter) > _shown(full) else full


def _shown(lines: list[str]) -> int:
    return sum(1 for line in lines[1:] if not MORE_ITEMS_RE.fullmatch(line[2:]))


def _errors_section(errors: ErrorGroups, shown: Callable[[str], str]) -> Section:
    """Error lines (groups of lines differing in one number or id as one line), first seen
    first; when cut, the latest seen are kept first, alternating with the first ones."""
    groups = errors.in_order()
    by_recency = sorted(range(len(groups)), key=lambda index: -groups[index].latest)
    ranks = [0] * len(groups)
    for rank, index in enumerate(by_recency):
        ranks[index] = 2 * rank
    for index in range(min(errors.head, len(groups))):
        ranks[index] = min(ranks[index], 2 * index + 1)
    return ErrorsSection(
        ERRORS,
        [shown(group.render()) for group in groups],
        ranks,
        dropped=errors.dropped,
        dropped_at=errors.head,
        compact=[shown(group.render(ERROR_MAX)) for group in groups],
    )


def _more_line(count: int) -> str:
    return f"- (+{count} more)"


def recent_first_ranks(count: int, head: int) -> list[int]:
    """Ranks that keep the latest items first, alternating with the first ``head`` ones."""
    return [2 * index + 1 if index < head else 2 * (count - 1 - index) for index in range(count)]


def _stream_section(title: str, collected: HeadTail, shown: Callable[[Any], str]) -> Section:
    """A head-and-tail list; runs of equal items (repeated calls) are shown once with a count."""
    first = collapse_repeats([shown(item) for item in collected.first])
    last = collapse_repeats([shown(item) for item in collected.last])
    return Section(
        title,
        [*first, *last],
        recent_first_ranks(len(first) + len(last), len(first)),
        dropped=collected.dropped,
        dropped_at=len(first),
    )


def _paths_section(title: str, index: PathIndex, tiers: range, root: str | None) -> Section:
    """Paths in first-seen order; when cut, a better tier, then an earlier path, is kept."""
    paths = index.in_order(tiers)
    items = [_abbreviate(path, root) for path, _ in paths]
    by_rank = sorted(range(len(paths)), key=lambda position: (paths[position][1], position))
    ranks = [0] * len(paths)
    for rank, position in enumerate(by_rank):
        ranks[position] = rank
    dropped = index.dropped_in(tiers)
    return Section(title, items, ranks, dropped=dropped, dropped_at=len(items))


def common_root(paths: Iterable[str]) -> str | None:
    """The directory whose abbreviation to ``$ROOT`` saves the most, if it is worth it.

    Candidates are the ancestors (two parts or more) of the absolute paths; a candidate must hold
    at least three of the paths and save at least ``MIN_ROOT_SAVING`` characters.
    """
    under: dict[str, int] = {}
    for path in paths:
        if not path.startswith("/"):
            continue
        parts = path.split("/")
        for end in range(3, len(parts)):
            prefix = "/".join(parts[:end])
            under[prefix] = under.get(prefix, 0) + 1
    best = None
    best_saving = MIN_ROOT_SAVING - 1
    for prefix, count in sorted(under.items()):
        saving = (len(prefix) - len(ROOT_TOKEN)) * count
        if count >= 3 and saving > best_saving:
            best, best_saving = prefix, saving
    return best


def _abbreviate(text: str, root: str | None) -> str:
    if root is None:
        return text
    return re.sub(re.escape(root) + r"(?=/|$|[^\w.@+~-])", ROOT_TOKEN, text)


def _header(state: DigestState, root: str | None) -> str:
    seqs = f" (seq {state.first_seq}-{state.last_seq})" if state.first_seq is not None else ""
    total = sum(state.counts.values())
    roles = ", ".join(f"{count} {role}" for role, count in sorted(state.counts.items()))
    calls = f"; {state.tool_call_count} tool calls" if state.tool_call_count else ""
    header = f"Extractive digest of {total} messages{seqs}" + (
        f": {roles}{calls}." if total else "."
    )
    return f"{header}\n{ROOT_TOKEN} = {root}" if root else header


def _latest_items(state: DigestState) -> list[str]:
    items = []
    if state.last_text:
        items.append(f"Last assistant text: {state.last_text}")
    if state.last_call is not None:
        items.append(f"Last tool call: {state.last_call.render()}")
    return items


def collapse_repeats(items: list[str]) -> list[str]:
    """Runs of equal items as one item with a count: "x (x3)"."""
    collapsed: list[str] = []
    run = 0
    for index, item in enumerate(items):
        run += 1
        if index + 1 == len(items) or items[index + 1] != item:
            collapsed.append(f"{item} (x{run})" if run > 1 else item)
            run = 0
    return collapsed


def _sections(state: DigestState, root: str | None) -> dict[str, Section]:
    def short(item: str) -> str:
        return _abbreviate(item, root)

    def short_call(call: ToolCall | str) -> str:  # a string: an earlier digest's, as shown
        return short(call if isinstance(call, str) else call.render())

    latest = [short(item) for item in _latest_items(state)]
    kept = [short(state.kept)] if state.kept else []
    return {
        KEPT_TITLE: Section(KEPT_TITLE, kept, list(range(len(kept)))),
        EARLIER: EarlierSection.of(_stream_section(EARLIER, state.earlier, short)),
        USER_REQUESTS: RequestsSection.of(_stream_section(USER_REQUESTS, state.users, short)),
        "Assistant notes": _stream_section("Assistant notes", state.notes, short),
        "Tool calls": _stream_section("Tool calls", state.calls, short_call),
        ERRORS: _errors_section(state.errors, short),
        FILES: _paths_section(FILES, state.paths, range(TIER_OUTPUT), root),
        "Latest state": Section("Latest state", latest, list(range(len(latest)))),
        OUTPUT_PATHS: _paths_section(
            OUTPUT_PATHS, state.paths, range(TIER_OUTPUT, TIER_OUTPUT + 1), root
        ),
    }


# Display order; the share of the budget each section gets first; who gets what is left, in turn.
# Paths only seen in tool output come last: they get what no other section wants.
_ORDER = (
    KEPT_TITLE,
    EARLIER,
    USER_REQUESTS,
    "Assistant notes",
    "Tool calls",
    ERRORS,
    FILES,
    OUTPUT_PATHS,
    "Latest state",
)
_SHARES = {
    KEPT_TITLE: 0.05,  # only with a kept message: the shares of the span's sections add to 1
    EARLIER: 0.14,  # an empty section leaves its share to the others
    FILES: 0.18,
    ERRORS: 0.14,
    USER_REQUESTS: 0.24,
    "Latest state": 0.1,
    "Tool calls": 0.12,
    "Assistant notes": 0.08,
    OUTPUT_PATHS: 0.0,
}
_PRIORITY = (
    USER_REQUESTS,  # what the user asked: the one thing an agent may never forget
    EARLIER,
    FILES,
    ERRORS,
    "Latest state",
    "Tool calls",
    "Assistant notes",
    KEPT_TITLE,
    OUTPUT_PATHS,
)


def _cost(lines: list[str]) -> int:
    """Characters a block adds to the digest: its lines and the blank line before it."""
    return sum(len(line) + 1 for line in lines) + 1 if lines else 0


def _pick_root(state: DigestState) -> str | None:
    """The ``$ROOT`` of the paths that tools acted on or texts mentioned (else of all paths)."""
    paths = state.paths.paths
    root = common_root(path for path, (tier, _) in paths.items() if tier < TIER_OUTPUT)
    root = root or common_root(paths)
    errors = [group.render() for group in state.errors.in_order()]
    texts = [*state.users.items(), *state.notes.items(), *errors, state.last_text]
    texts.append(state.kept)
    texts += list(state.paths.paths)
    texts += [call if isinstance(call, str) else call.render() for call in state.calls.items()]
    return None if root is None or any(ROOT_TOKEN in text for text in texts) else root


def render(state: DigestState, max_chars: int) -> str:
    """The digest text: each section fits its share, then what is left goes by priority."""
    root = _pick_root(state)
    header = _header(state, root)
    if len(header) > max_chars:
        return cut_end(_header(state, None), max_chars)
    sections = _sections(state, root)
    budget = max_chars - len(header)
    fitted: dict[str, list[str]] = {}
    for name in _PRIORITY:  # each its share, or at least room to say what it leaves out
        share = max(int(budget * _SHARES[name]), sections[name].least_cost())
        spare = budget - sum(_cost(lines) for lines in fitted.values())
        fitted[name] = sections[name].fit(min(share, spare) - 1)
    for name in _PRIORITY:
        spare = budget - sum(_cost(lines) for lines in fitted.values())
        fitted[name] = sections[name].fit(_cost(fitted[name]) + spare - 1)
    blocks = [header] + ["\n".join(fitted[name]) for name in _ORDER if fitted[name]]
    return "\n\n".join(blocks)


def extractive_digest(
    records: Iterable[dict[str, Any]],
    *,
    max_chars: int = DEFAULT_MAX_CHARS,
    kept: dict[str, Any] | None = None,
    plan: Sequence[ChecklistItem] | None = None,
) -> str:
    """A plain-text digest of message records, at most ``max_chars`` characters.

    ``records`` are ``messages.jsonl`` records (or plain OpenAI messages), consumed once.
    ``kept``, the first user message that the context keeps, is quoted apart, for reference.
    ``plan``, the current plan items, ends the digest as given (at most half of it).
    """
    return with_plan(lambda room: render(digest_state(records, kept), room), max_chars, plan)


def digest_within(
    records: Iterable[dict[str, Any]],
    *,
    max_tokens: int,
    count: Callable[[str], int],
    kept: dict[str, Any] | None = None,
    plan: Sequence[ChecklistItem] | None = None,
) -> str:
    """A digest of at most ``max_tokens`` as ``count`` counts them, as long as it may be.

    Rendered at four characters a token, then smaller in proportion to what it counted until it
    fits (text of fewer characters a token, Japanese say, gets fewer characters); the caller
    cuts what still does not fit after ``MAX_RESIZES`` tries.
    """
    state = digest_state(records, kept)
    max_chars = CHARS_PER_TOKEN * max_tokens
    text = with_plan(lambda room: render(state, room), max_chars, plan)
    for _ in range(MAX_RESIZES):
        tokens = count(text)
        if tokens <= max_tokens:
            break
        max_chars = min(max_chars - 1, max_chars * max_tokens // tokens)
        text = with_plan(lambda room: render(state, room), max_chars, plan)
    return text


def with_plan(
    render_in: Callable[[int], str], max_chars: int, plan: Sequence[ChecklistItem] | None
) -> str:
    """A digest rendered in ``max_chars``, its plan block (at most half of it) at the end."""
    block = plan_block(plan, max_chars // 2) if plan else ""
    if not block:
        return render_in(max_chars)
    return f"{render_in(max_chars - len(block) - 2)}\n\n{block}"


# --- the plan, as the caller gives it ------------------------------------------------------

NEXT_STEPS = "Next steps (open plan items only): "
NO_NEXT_STEPS = "none; every plan item is done or cancelled"


def plan_block(plan: Sequence[ChecklistItem], max_chars: int) -> str:
    """The plan items with their status and the ids of the open ones, in ``max_chars``; when
    it does not fit, open items are kept first and the rest counted."""
    open_ids = [item.id for item in open_items(plan)]
    next_steps = cut_end(NEXT_STEPS + (", ".join(open_ids) or NO_NEXT_STEPS), max_chars // 4)
    lines = [cut_end(item_line(item), max_chars // 4) for item in plan]
    room = max_chars - len(PLAN_TITLE) - len(next_steps) - 2
    order = sorted(range(len(plan)), key=lambda i: (plan[i].status not in OPEN_STATUSES, i))
    chosen: set[int] = set()
    for index in order:
        more = len(plan) - len(chosen) - 1
        reserve = len(_more_plan_line(more)) + 1 if more else 0
        if len(lines[index]) + 1 + reserve > room:
            break
        chosen.add(index)
        room -= len(lines[index]) + 1
    shown = [lines[i] for i in sorted(chosen)]
    if len(chosen) < len(plan):
        shown.append(_more_plan_line(len(plan) - len(chosen)))
    return cut_end("\n".join([PLAN_TITLE, *shown, next_steps]), max_chars)


def _more_plan_line(count: int) -> str:
    return f"(+{count} more plan items)"
