"""Elision: the middle of a message cut (its content, or the longest string of a tool call's
arguments), with a note that says what went and, for a message as posted, a handle to read it
again (GET /tasks/{uuid}/messages/{seq}); and which messages an elision, or the message cap,
should cut. Pure, but for reading the records from messages.jsonl."""

import copy
from collections.abc import Callable, Iterable
from typing import Any, BinaryIO, cast

import orjson

from app.compaction import plans
from app.compaction.masking import placeholder_errors
from app.compaction.plans import Entry
from app.context.effective import is_marker, marker_kind, position
from app.context.files import record_at, visible_records
from app.context.records import ANCHOR, openai_message, record_tokens
from app.context.shapes import Marker
from app.formats.costs import FormatTokens, TokenCosts, in_format
from app.formats.parts import content_text, stand_in
from app.storage.jsonl import iter_lines, offset_after_seq
from app.summaries.excerpts import ELISION_HANDLE, ELISION_TEXT, normalize
from app.tokens.accounting import content_tokens
from app.tokens.counters import TextCounter

CUT_MARGIN, CUT_SLACK = 1.1, 64  # an elision cuts 10% and 64 tokens more than it must
MIN_ELISION_GAIN = 16  # tokens; less is not worth a marker (re-eliding saves about one)
MIN_ELIDED_TOKENS = 64  # a smaller message is not worth cutting


def pick_elision(
    f: BinaryIO,
    end: int,
    entries: list[Entry],
    costs: TokenCosts,
    excess: int,
    fmt: str,
    *,
    cap: int,
    only: int | None = None,
    relaxed: bool = False,
) -> tuple[int, Marker, tuple[int, FormatTokens]] | None:
    """The entry to elide (``only`` that one), its elision marker and the marker's cost; None
    if none gains. A message is cut by ``excess`` and at least down to ``cap`` (one deep cut,
    not a shave at every turn, each moving the payload's prefix); a summary by ``excess``.

    Group by group of ``plans.elision_order``: contents first, a tool call's arguments (a file
    written, say) only when no content of the group can give way. A cut tool output keeps the
    error lines it lost, after the cut; without them it is tried only when no message of any
    group gives way (an error is what an agent most needs again).
    """
    shown = ShownRecords(f, end, entries)
    # Small messages and gains are not worth a marker, unless nothing else can make room.
    least = 1 if relaxed else MIN_ELISION_GAIN
    minimum = 0 if relaxed else MIN_ELIDED_TOKENS
    groups = plans.elision_order(entries, minimum=minimum) if only is None else ([only], [])
    attempts = []
    for group in groups:  # contents, with a cut output's lost error lines; then arguments
        attempts += [(i, True, False) for i in group]
        attempts += [(i, False, True) for i in group if entries[i].role == "assistant"]
    # Only when no message anywhere gives way with them: cut outputs without their error lines.
    attempts += [(i, False, False) for group in groups for i in group if _keeps_errors(entries[i])]
    for index, keep_errors, arguments in attempts:
        entry, original = entries[index], shown.read(index)
        if ANCHOR in original:  # counted as the most its rendering may cost, not its text
            continue
        keeps = keep_errors and _keeps_errors(entry)
        # Cut from the message as posted: what an earlier elision already took, and the
        # excess.
        deep = excess
        if entry.marker not in plans.MEMORY_KINDS:
            deep = max(excess, _excess_to_keep(entry.tokens, cap))
        cut = deep + max(0, record_tokens(original, fmt) - entry.tokens)
        # The handle costs a few tokens: a window so small that nothing else can give way
        # goes without it (the seq is still in the history).
        handle = not entry.masked and not relaxed
        message = _shortened(costs.counter, original, cut, arguments, keeps, as_posted=handle)
        if message is None:
            continue
        cost = costs.message(message)
        if entry.tokens - in_format(*cost, fmt) < least:
            continue
        # A summary or truncation marker cut to fit stays one (the newest summary is still
        # the newest summary; a later condense folds it as such).
        kind = entry.marker if entry.marker in plans.MEMORY_KINDS else "elision"
        # The elided message's own fields (as posted) with the marker's kind.
        marker = cast(Marker, {**message, "marker": kind})
        if original.get("tool_name"):
            marker["tool_name"] = original["tool_name"]
        return index, marker, cost
    return None


def _keeps_errors(entry: Entry) -> bool:
    """Whether a cut of this entry lists the error lines it lost: a tool output, unmasked (a
    placeholder lists its own)."""
    return entry.role == "tool" and not entry.masked


class ShownRecords:
    """The records of a context's entries as elision cuts them, read when first asked for: a
    message as posted (or as an earlier elision left it), a masked result as its placeholder
    (the original must not come back)."""

    def __init__(self, f: BinaryIO, end: int, entries: list[Entry]) -> None:
        self.f, self.end, self.entries = f, end, entries
        self.cache: dict[int, dict[str, Any]] = {}

    def read(self, index: int) -> dict[str, Any]:
        if index not in self.cache:
            entry = self.entries[index]
            if entry.masked:  # every placeholder in one pass: they come together
                masked = {e.position: i for i, e in enumerate(self.entries) if e.masked}
                for record in visible_records(self.f, self.end):
                    if position(record) in masked:
                        self.cache[masked[position(record)]] = record
            else:
                found = record_at(self.f, entry.seq, self.end)
                assert found is not None
                self.cache[index] = found
        return self.cache[index]


def _shortened(
    counter: TextCounter,
    original: dict[str, Any],
    cut: int,
    arguments: bool,
    keep_errors: bool,
    *,
    as_posted: bool,
) -> dict[str, Any] | None:
    """The message cut by about ``cut`` tokens: its tool calls' arguments (None without any),
    or its content, followed with ``keep_errors`` by the error lines the cut took (the cut
    deeper by what they cost). ``as_posted``: ``original`` is the record of its seq as
    messages.jsonl holds it (not a placeholder), so a cut of its content has a handle."""
    message = openai_message(original)
    if arguments:
        calls = message.get("tool_calls")
        return message | {"tool_calls": _elided_calls(counter, calls, cut)} if calls else None
    errors = placeholder_errors(original) if keep_errors else []
    cut += sum(content_tokens(counter, line) + 1 for line in errors)
    content = elided(counter, message.get("content"), cut, original["seq"] if as_posted else None)
    shown = normalize(content)
    lost = "".join(f"\nerror: {line}" for line in errors if line not in shown)
    return message | {"content": content + lost}


def _elided_calls(
    counter: TextCounter, calls: list[dict[str, Any]], excess: int
) -> list[dict[str, Any]]:
    """The calls with the longest string in the largest one's arguments cut in the middle.
    Arguments that parse stay valid JSON (a file's content written by a tool call, say)."""
    calls = copy.deepcopy(calls)
    function = max(calls, key=lambda c: len(c["function"].get("arguments") or ""))["function"]
    raw = function.get("arguments") or ""
    try:
        arguments = orjson.loads(raw)
    except orjson.JSONDecodeError:
        function["arguments"] = elided(counter, raw, excess)
        return calls
    if isinstance(arguments, str):
        arguments = elided(counter, arguments, excess)
    else:
        _cut_longest_string(arguments, lambda text: elided(counter, text, excess))
    function["arguments"] = orjson.dumps(arguments).decode()
    return calls


def _cut_longest_string(value: Any, cut: Callable[[str], str]) -> None:
    """Replace, in place, the longest string inside a parsed JSON value with ``cut(it)``."""
    longest: tuple[int, Any, Any] | None = None
    stack = [value]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in items:
            if isinstance(child, str) and (longest is None or len(child) > longest[0]):
                longest = (len(child), node, key)
            elif isinstance(child, dict | list):
                stack.append(child)
    if longest is not None:
        _, node, key = longest
        node[key] = cut(node[key])


def elided(counter: TextCounter, content: Any, excess: int, seq: int | None = None) -> str:
    """The content with its middle cut so that about ``excess`` (+10%, +64) tokens go, keeping
    at least ``ELIDED_TEXT_TOKENS`` of its start and end (the margin: characters per token
    vary along a text).

    With ``seq`` (the content is that message's as posted) the note carries a handle: the seq
    and the characters cut, which GET /tasks/{uuid}/messages/{seq} shows again. The handle's
    cost is cut too, so the note's length does not eat into the excess."""
    text = content_text(content, non_text=stand_in)
    tokens = max(1, content_tokens(counter, text))
    chars_per_token = len(text) / tokens
    kept = int(plans.ELIDED_TEXT_TOKENS * chars_per_token)
    longest = "" if seq is None else ELISION_HANDLE.format(seq=seq, start=len(text), end=len(text))
    want = excess * CUT_MARGIN + CUT_SLACK + content_tokens(counter, longest)
    cut = min(len(text) - kept, int(want * chars_per_token))
    if cut <= 0:
        return text
    start = (len(text) - cut) * 2 // 3  # a message's start says most of what it is
    end = len(text) - cut - start
    handle = "" if seq is None else ELISION_HANDLE.format(seq=seq, start=start, end=start + cut)
    note = ELISION_TEXT.format(cut=f"{cut:,}", handle=handle)
    return text[:start] + note + text[len(text) - end :]


def seqs_over(f: BinaryIO, start: int, end: int, fmt: str, cap: int) -> list[int]:
    """The seqs of the messages in bytes [start, end) of messages.jsonl that cost more than
    ``cap`` as ``fmt`` renders them, the largest first."""
    return _largest_over((orjson.loads(line) for _, line in iter_lines(f, start, end)), fmt, cap)


def over_cap_shown_again(
    f: BinaryIO, rewind: tuple[int, int], end: int, fmt: str, cap: int
) -> list[int]:
    """The messages a rewind to ``rewind[0]`` keeps (up to seq ``rewind[1]``) that an elision
    after it cut and that cost more than ``cap`` as ``fmt`` renders them: the rewind drops
    those elisions. Largest first."""
    to_seq, last_kept = rewind
    cut: set[int] = set()
    for _, line in iter_lines(f, offset_after_seq(f, "seq", to_seq, end), end):
        if b'"elision"' not in line:  # most records are messages: not parsed
            continue
        record = orjson.loads(line)
        if marker_kind(record) == "elision":
            low, high = record["hides"]  # positions: a message's is its seq
            if low == high <= last_kept:
                cut.add(low)
    kept = (record_at(f, seq, end) for seq in cut)
    return _largest_over((record for record in kept if record is not None), fmt, cap)


def _largest_over(records: Iterable[dict[str, Any]], fmt: str, cap: int) -> list[int]:
    """The seqs of the messages among ``records`` that cost more than ``cap`` as ``fmt``
    renders them, the largest first."""
    costs = [
        (tokens, record["seq"])
        for record in records
        if not is_marker(record) and (tokens := record_tokens(record, fmt)) > cap
    ]
    return [seq for _, seq in sorted(costs, reverse=True)]


def _excess_to_keep(tokens: int, kept: int) -> int:
    """The excess for which ``elided`` leaves a little under ``kept`` of ``tokens`` (its
    margin, meant to free at least an excess, would cut a deep cut far below ``kept``)."""
    return max(0, int((tokens - kept) / CUT_MARGIN))
