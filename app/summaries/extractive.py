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

The extraction rules (``find_paths``, ``find_error_lines``, ``record_paths``, ``record_errors``) are
public so that callers and tests can measure what a digest kept (``shows_error_line`` tells
whether a listed error line shows a given one).
"""

import json
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from app.context.effective import marker_kind
from app.planning.items import OPEN_STATUSES, ChecklistItem, item_line, open_items
from app.summaries.excerpts import ELISION_LINE_RE, ELLIPSIS, cut_end, normalize

DEFAULT_MAX_CHARS = 6000
CHARS_PER_TOKEN = 4  # where a digest sized in tokens starts
MAX_RESIZES = 4
ROOT_TOKEN = "$ROOT"

# Where a path was found, best first: what a tool acted on (a path argument, a command), what a
# person or the model wrote, what a tool printed. A smaller tier is kept first when Files is cut.
TIER_ACTED = 0
TIER_MENTIONED = 1
TIER_OUTPUT = 2

# Caps on the state kept while streaming.
MAX_PATHS = 600
MAX_DROPPED_PATHS = 10_000
MAX_SEEN_ERRORS = 5_000
MAX_ERRORS_HEAD, MAX_ERRORS_TAIL = 20, 60
MAX_USERS_HEAD, MAX_USERS_TAIL = 5, 95
MAX_NOTES_HEAD, MAX_NOTES_TAIL = 3, 40
MAX_CALLS_HEAD, MAX_CALLS_TAIL = 3, 60
MAX_PENDING_CALLS = 256

# Lengths of excerpts, in characters.
USER_MAX, USER_HEAD, USER_TAIL = 700, 450, 200
# The first user message, which the context keeps: its start, for reference (a digest of a
# short span must stay smaller than the span).
KEPT_MAX = 200
# An earlier condense's summary, met again when the context is condensed once more: kept up
# to a bound on memory here, cut to what the section can spend when rendered.
EARLIER_MAX, EARLIER_HEAD, EARLIER_TAIL = 120_000, 80_000, 40_000
EARLIER_MIN = 80  # an earlier summary cut shorter than this says nothing: it is left out
# Error lines that differ only in numbers or ids: one line listing the values, up to this long
# (the values that do not fit are counted: "(3 more)"); at most this many values are kept.
GROUP_MAX = 400
MAX_GROUP_VALUES = 100
NOTE_MAX = 200
ERROR_MAX = 200
SALIENT_MAX = 100
OUTCOME_MAX = 100
LATEST_TEXT_MAX = 500
PATH_MAX = 300
MIN_ROOT_SAVING = 150
# Only the first and last lines of a tool result are searched for errors: a long middle is a
# file's or a document's body, whose "error" words are contents, not what happened.
TOOL_ERROR_WINDOW = 30

# --- extraction rules ----------------------------------------------------------------------

_PATH_KEYS = ("file_path", "path", "notebook_path", "filename", "file_name")
_COMMAND_KEYS = ("command", "cmd", "code", "input")
_SALIENT_KEYS = ("pattern", "url", "query", "description", "skill", "message", "thought")

_TOKEN_RE = re.compile(r"[A-Za-z0-9_.~@+/-]+")
_EXTENSION_RE = re.compile(r"[A-Za-z0-9_]\.([A-Za-z][A-Za-z0-9]{0,7})$")
_EXTENSION_WORDS = """
    py pyi ipynb ts tsx js jsx mjs cjs json jsonl md markdown rst txt yaml yml toml ini cfg conf
    env lock log csv tsv xml html htm css scss sass vue svelte ex exs heex eex erl hrl c h cc cpp
    cxx hpp go rs java kt kts scala rb php cs swift m mm sh bash zsh fish ps1 sql graphql proto
    tf tfvars hcl j2 jinja gradle pony lua pl pm cgi r dart zig nim ml mli hs clj elm patch diff
    traj pcap
"""
_KNOWN_EXTENSIONS = frozenset(_EXTENSION_WORDS.split())
_FRAMEWORK_NAME_RE = re.compile(r"^[A-Z][A-Za-z]*\.js$")  # Next.js, Node.js: names, not files
_NOT_BEFORE_PATH = frozenset("}])*$")  # "${DIR}/a.txt" is a fragment, not the path /a.txt

_ERROR_RE = re.compile(
    r"Traceback \(most recent call last\)"
    r"|\b(?:[A-Z]\w*)?(?:Error|Exception)\b[:)\]]"
    r"|(?i:\b(?:error|fatal)(?:\[\w+\])?:)"
    r"|\bFAIL(?:ED)?\b|\bERR!"
    r"|(?i:\bexit(?:ed with)? (?:code|status):? ?[1-9])|(?i:non-zero exit)"
    r"|<tool_use_error>|(?i:command not found|no such file or directory|permission denied)"
    r"|エラー|失敗"
)
# Signs that a tool call itself failed (not just that its output mentions an error).
_FAILED_CALL_RE = re.compile(
    r"Traceback \(most recent call last\)|<tool_use_error>|(?i:non-zero exit)"
    r"|(?i:\bexit(?:ed with)? (?:code|status):? ?[1-9])"
)
_LISTING_RE = re.compile(r"^\s*\d+(?:→|\t)")  # a line of a `cat -n` style file view
_SEARCH_HIT_RE = re.compile(r"^\s*(?:[^\s:]+:)?\d+:(?!\d)")  # a `grep -n` hit: "a.py:12:"
_DIAGNOSTIC_RE = re.compile(r"^\s*\S+?:\d+(?::\d+)?:\s*(?:fatal )?error\b")  # "a.c:3:1: error"
_PROSE_RE = re.compile(r"^\s*(?:[-*+] |#{1,6} |\||> )")  # a Markdown item, heading, table row
_LABEL_ONLY_MAX = 12  # "ERROR:", "Exit code 1": such a line is joined with the next one

_BOILERPLATE_RE = re.compile(
    r"^(?:Chunk ID:|Wall time:|Process exited with code 0|Original token count:|Output:"
    r"|Total output lines:)"
)
_MEANINGFUL_RE = re.compile(r"[^\W_]")
_SENTENCE_END_RE = re.compile(r"(?<=[.!?])\s+|(?<=[\u3002\uff01\uff1f])|\n")  # and CJK stops
_SHELL_WRAPPER_RE = re.compile(r"^(?:ba)?sh -lc (['\"])(.*)\1$", re.DOTALL)


def cut_middle(text: str, limit: int, head: int, tail: int) -> str:
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


def _bare_name(name: str) -> str | None:
    extension = _EXTENSION_RE.search(name)
    if extension is None or extension.group(1).lower() not in _KNOWN_EXTENSIONS:
        return None
    return None if _FRAMEWORK_NAME_RE.match(name) else name


def _path_candidate(token: str) -> str | None:
    path = token.lstrip("@").rstrip(".-")
    if not 3 <= len(path) <= PATH_MAX or "//" in path or not re.search(r"[A-Za-z]", path):
        return None
    if "/" not in path:
        return _bare_name(path)
    path = path.rstrip("/")
    if _EXTENSION_RE.search(path):
        return path
    rooted = path.startswith(("/", "~/", "./", "../"))
    parts = [part for part in path.split("/") if part not in ("", ".", "..", "~")]
    return path if rooted and len(parts) >= 2 else None


def find_paths(text: str) -> list[str]:
    """File paths in a text, in order of appearance (with repeats).

    A path is a run of path characters with a directory part that either ends in a name with an
    extension or is rooted (``/``, ``~/``, ``./``, ``../``) with two or more parts; or a bare name
    with a well-known file extension (``README.md``). URLs and calls (``res.json(``) are not.
    """
    found = []
    for match in _TOKEN_RE.finditer(text):
        before = text[match.start() - 1] if match.start() else " "
        after = text[match.end() : match.end() + 1]
        token = match.group()
        if (before == ":" and token.startswith("//")) or after == "(":
            continue  # a URL's rest, a function call
        if before == "*" or (token.startswith("/") and before in _NOT_BEFORE_PATH):
            continue  # a glob, or the tail of "${DIR}/a.txt"
        path = _path_candidate(token)
        if path is not None:
            found.append(path)
    return found


def _is_not_an_event(line: str) -> bool:
    """A numbered file view, a search hit, Markdown prose: contents, not something that happened."""
    if _LISTING_RE.match(line) or _PROSE_RE.match(line):
        return True
    return bool(_SEARCH_HIT_RE.match(line)) and not _DIAGNOSTIC_RE.match(line)


def is_error_line(line: str) -> bool:
    return bool(_ERROR_RE.search(line)) and not _is_not_an_event(line)


def _window(lines: list[str], size: int | None) -> list[str]:
    if size is None or len(lines) <= 2 * size:
        return lines
    return [*lines[:size], *lines[-size:]]


def find_error_lines(text: str, *, window: int | None = None) -> list[str]:
    """Error-like lines of a text, whitespace-collapsed and cut to ``ERROR_MAX`` characters.

    A line is error-like if it shows a traceback, an ``Error:``/``(FooError)``/``Exception:``,
    ``error:``/``fatal:``, FAIL(ED), a non-zero exit code, a tool-use error, "command not found",
    "No such file or directory", "Permission denied", or エラー/失敗. Lines of a numbered file
    view, search hits and Markdown items/headings/table rows are contents or prose, not errors
    (but a compiler diagnostic ``a.c:3:1: error: ...`` is one). A bare label line ("ERROR:") is
    joined with the next non-blank line, which carries the message. With ``window``, only the
    first and last ``window`` lines are searched.
    """
    lines = _window(text.splitlines(), window)
    found = []
    for index, line in enumerate(lines):
        if not is_error_line(line):
            continue
        quoted = normalize(line)
        if len(_MEANINGFUL_RE.findall(quoted)) <= _LABEL_ONLY_MAX:
            following = next((nxt for nxt in lines[index + 1 :] if nxt.strip()), "")
            quoted = normalize(f"{quoted} {following}")
        found.append(cut_end(quoted, ERROR_MAX))
    return found


def content_text(content: Any) -> str:
    """The text of a message content: a string, or the text parts of a parts list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [part.get("text") for part in content if isinstance(part, dict)]
        return "\n".join(text for text in texts if isinstance(text, str) and text)
    return ""


def parse_arguments(arguments: Any) -> dict[str, Any]:
    """A tool call's arguments as a dict; a non-JSON string becomes ``{"input": string}``."""
    if isinstance(arguments, dict):
        return arguments
    if not isinstance(arguments, str):
        return {}
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return {"input": arguments}
    return parsed if isinstance(parsed, dict) else {"input": arguments}


def _string_values(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _string_values(item)
    elif isinstance(value, list):
        for item in value:
            yield from _string_values(item)


def tool_calls(record: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(id, name, arguments) of each tool call of a record."""
    calls = []
    for call in record.get("tool_calls") or []:
        if not isinstance(call, dict):
            continue
        function = call.get("function") or {}
        name = str(function.get("name") or "tool")
        calls.append((str(call.get("id") or ""), name, parse_arguments(function.get("arguments"))))
    return calls


def _argument_paths(arguments: dict[str, Any]) -> Iterator[tuple[str, int]]:
    for key, value in arguments.items():
        if key in _PATH_KEYS and isinstance(value, str):
            path = value.strip()
            if path and "\n" not in path and len(path) <= PATH_MAX:
                yield path, TIER_ACTED
                continue
        tier = TIER_ACTED if key in _COMMAND_KEYS else TIER_MENTIONED
        for text in _string_values(value):
            for path in find_paths(text):
                yield path, tier


def acted_paths(record: dict[str, Any]) -> list[str]:
    """The paths a record's tool calls acted on (path arguments, paths in commands), in order."""
    return [
        path
        for _, _, arguments in tool_calls(record)
        for path, tier in _argument_paths(arguments)
        if tier == TIER_ACTED
    ]


def record_paths(record: dict[str, Any]) -> list[tuple[str, int]]:
    """(path, tier) for every path a record shows, in order (with repeats)."""
    text_tier = TIER_OUTPUT if record.get("role") == "tool" else TIER_MENTIONED
    found = [(path, text_tier) for path in find_paths(content_text(record.get("content")))]
    for _, _, arguments in tool_calls(record):
        found.extend(_argument_paths(arguments))
    return found


def record_errors(record: dict[str, Any]) -> list[str]:
    """The error-like lines of a record's content (tool results: their first and last lines)."""
    role = record.get("role")
    if role == "system":
        return []
    window = TOOL_ERROR_WINDOW if role == "tool" else None
    return find_error_lines(content_text(record.get("content")), window=window)


# --- bounded collectors --------------------------------------------------------------------


@dataclass
class HeadTail:
    """The first ``head`` and the last ``tail`` items of a stream, and how many fell between."""

    head: int
    tail: int
    first: list[Any] = field(default_factory=list)
    last: deque[Any] = field(default_factory=deque)
    dropped: int = 0

    def add(self, item: Any) -> None:
        if len(self.first) < self.head:
            self.first.append(item)
            return
        self.last.append(item)
        if len(self.last) > self.tail:
            self.last.popleft()
            self.dropped += 1

    def items(self) -> list[Any]:
        return [*self.first, *self.last]


@dataclass
class BoundedSet:
    """A set that stops growing at ``cap`` (after which every unknown item counts as new)."""

    cap: int
    members: set[str] = field(default_factory=set)
    full: bool = False

    def add(self, item: str) -> bool:
        """Add an item; True if it is new (or can no longer be told apart)."""
        if item in self.members:
            return False
        if len(self.members) >= self.cap:
            self.full = True
        else:
            self.members.add(item)
        return True


@dataclass
class PathIndex:
    """Distinct paths with their best tier and first-seen order, at most ``cap`` of them.

    When full, a path of a better tier evicts the latest path of the worst tier; a path that finds
    no room is counted, by tier, in ``dropped_counts`` (deduplicated up to ``MAX_DROPPED_PATHS``).
    """

    cap: int = MAX_PATHS
    paths: dict[str, tuple[int, int]] = field(default_factory=dict)
    dropped: BoundedSet = field(default_factory=lambda: BoundedSet(MAX_DROPPED_PATHS))
    dropped_counts: list[int] = field(default_factory=lambda: [0] * (TIER_OUTPUT + 1))
    counter: int = 0

    def add(self, path: str, tier: int) -> None:
        known = self.paths.get(path)
        if known is not None:
            if tier < known[0]:
                self.paths[path] = (tier, known[1])
            return
        self.counter += 1
        if len(self.paths) >= self.cap and not self._evict_worse_than(tier):
            self._drop(path, tier)
            return
        self.paths[path] = (tier, self.counter)

    def _evict_worse_than(self, tier: int) -> bool:
        if tier >= TIER_OUTPUT:
            return False
        victim = max(self.paths, key=lambda path: self.paths[path])
        if self.paths[victim][0] <= tier:
            return False
        victim_tier = self.paths.pop(victim)[0]
        self._drop(victim, victim_tier)
        return True

    def _drop(self, path: str, tier: int) -> None:
        if self.dropped.add(path):
            self.dropped_counts[tier] += 1

    def in_order(self, tiers: range) -> list[tuple[str, int]]:
        """(path, tier) of the kept paths of these tiers in first-seen order, except folded ones."""
        tails = self._tails()
        kept = [
            (path, entry)
            for path, entry in self.paths.items()
            if entry[0] in tiers and tails.get(path, TIER_OUTPUT + 1) > entry[0]
        ]
        return [(path, tier) for path, (tier, _) in sorted(kept, key=lambda item: item[1][1])]

    def _tails(self) -> dict[str, int]:
        """Relative paths that end a longer kept path, with that path's best tier.

        A relative path is folded into a longer one of a tier as good that ends with it
        ("lib/a.ex" and "a.ex" into "/home/u/p/lib/a.ex"): the longer one says more.
        """
        tails: dict[str, int] = {}
        for path, (tier, _) in self.paths.items():
            parts = path.split("/")
            for start in range(1, len(parts)):
                tail = "/".join(parts[start:])
                tails[tail] = min(tier, tails.get(tail, TIER_OUTPUT + 1))
        return tails

    def dropped_in(self, tiers: range) -> int:
        return sum(self.dropped_counts[tier] for tier in tiers)


# Numbers and ids: hexadecimal (with a digit), UUIDs, decimals ("12", "3.5", "1.2.3").
_VALUE_RE = re.compile(
    r"\b(?:0x[0-9a-fA-F]+|[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}"
    r"|(?=[a-f]*\d)[0-9a-f]{7,40}|\d+(?:\.\d+)*)\b"
)
_MORE_VALUES_RE = re.compile(r" \((\d+) more\)")


def error_shape(line: str) -> tuple[list[str], list[str]]:
    """A line's constant pieces and the numbers/ids between them (one more piece than values)."""
    pieces, values, start = [], [], 0
    for match in _VALUE_RE.finditer(line):
        pieces.append(line[start : match.start()])
        values.append(match.group())
        start = match.end()
    pieces.append(line[start:])
    return pieces, values


@dataclass
class ErrorGroup:
    """Error lines that differ only in the value at one place (``slot``): "row 5", "row 28"."""

    pieces: list[str]
    values: list[str]  # the first line's
    order: int  # when it was first seen...
    latest: int  # ...and last seen
    slot: int | None = None  # None while it holds one line
    others: list[str] = field(default_factory=list)  # the other lines' values at the slot
    more: int = 0  # lines whose values no longer fit ``others``

    def differs_at(self, values: list[str]) -> int | None:
        """The one slot where a line of the same pieces differs, if it joins this group."""
        differing = [i for i, (a, b) in enumerate(zip(self.values, values, strict=True)) if a != b]
        if len(differing) != 1 or self.slot not in (None, differing[0]):
            return None
        return differing[0]

    def add(self, slot: int, value: str, seen: int) -> None:
        self.slot, self.latest = slot, seen
        if value in self.others:
            return
        if len(self.others) < MAX_GROUP_VALUES:
            self.others.append(value)
        else:
            self.more += 1

    @classmethod
    def parse(cls, item: str, seen: int) -> "ErrorGroup":
        """The group an item of a digest's Errors shows (a line that lists no values: itself).

        Its list is the one run of values joined by ", ", with its " (N more)" if any. A line
        that had such a run of its own is read as a group that renders as the line again."""
        pieces, values = error_shape(item)
        joined = [k for k in range(1, len(values)) if pieces[k] == ", "]
        firsts = [k for k in joined if k - 1 not in joined]
        if len(firsts) != 1:
            return cls(pieces, values, order=seen, latest=seen)
        slot = last = firsts[0] - 1
        while last + 1 in joined:
            last += 1
        more, after = 0, last + 1  # the piece after the list, then what follows it
        if after < len(values) and pieces[after] == " (" and pieces[after + 1][:6] == " more)":
            more, after = int(values[after]), after + 1
        tail = pieces[after].removeprefix(" more)") if more else pieces[after]
        return cls(
            [*pieces[: slot + 1], tail, *pieces[after + 1 :]],
            [*values[: slot + 1], *values[after:]],
            order=seen,
            latest=seen,
            slot=slot,
            others=values[slot + 1 : last + 1],
            more=more,
        )

    def render(self, max_chars: int = GROUP_MAX) -> str:
        values = list(self.values)
        if self.slot is not None:
            listed, more = [values[self.slot]], self.more
            fixed = sum(map(len, self.pieces)) + sum(map(len, values)) - len(values[self.slot])
            for index, value in enumerate(self.others):
                if fixed + sum(len(v) + 2 for v in listed) + len(value) > max_chars:
                    more += len(self.others) - index
                    break
                listed.append(value)
            values[self.slot] = ", ".join(listed) + (f" ({more} more)" if more else "")
        parts = [self.pieces[0]]
        for value, piece in zip(values, self.pieces[1:], strict=True):
            parts += [value, piece]
        return "".join(parts)


@dataclass
class ErrorGroups:
    """Distinct error lines, those differing only in one number or id grouped, at most ``cap``
    groups: when full, the least recently seen group after the first ``head`` ones goes."""

    head: int = MAX_ERRORS_HEAD
    cap: int = MAX_ERRORS_HEAD + MAX_ERRORS_TAIL
    groups: dict[str, list[ErrorGroup]] = field(default_factory=dict)  # by their pieces
    count: int = 0
    seen: int = 0
    dropped: int = 0

    def add(self, line: str) -> None:
        self.seen += 1
        self._add(*error_shape(line))

    def add_item(self, item: str) -> None:
        """An earlier digest's error item: its lines join the groups as lines would."""
        self.seen += 1
        parsed = ErrorGroup.parse(item, self.seen)
        group = self._add(parsed.pieces, parsed.values)
        if parsed.slot is None:
            return
        for value in parsed.others:
            values = list(parsed.values)
            values[parsed.slot] = value
            self._add(parsed.pieces, values)
        group.more += parsed.more

    def _add(self, pieces: list[str], values: list[str]) -> ErrorGroup:
        """Add a line; the group it is in."""
        same = self.groups.setdefault("\0".join(pieces), [])
        for group in same:
            slot = group.differs_at(values)
            if slot is not None:
                group.add(slot, values[slot], self.seen)
                return group
            if group.values == values:  # met again after its set of seen lines was full
                group.latest = self.seen
                return group
        if self.count >= self.cap:
            self._evict()
        group = ErrorGroup(pieces, values, order=self.seen, latest=self.seen)
        same.append(group)
        self.count += 1
        return group

    def _evict(self) -> None:
        first = sorted(self.in_order(), key=lambda group: group.order)[: self.head]
        kept = {id(group) for group in first}
        victim = min(
            (g for g in self.in_order() if id(g) not in kept), key=lambda group: group.latest
        )
        shape = "\0".join(victim.pieces)
        self.groups[shape].remove(victim)
        if not self.groups[shape]:
            del self.groups[shape]
        self.count -= 1
        self.dropped += 1

    def in_order(self) -> list[ErrorGroup]:
        """The groups in the order their first lines were seen."""
        groups = [group for same in self.groups.values() for group in same]
        return sorted(groups, key=lambda group: group.order)


def grouped_errors(record: dict[str, Any], *, limit: int, max_chars: int) -> tuple[list[str], int]:
    """A record's error lines grouped as a digest groups them: the first ``limit`` groups,
    each rendered in at most ``max_chars``, and how many groups more there were."""
    collected = ErrorGroups()
    for line in record_errors(record):
        collected.add(line)
    groups = collected.in_order()
    return [group.render(max_chars) for group in groups[:limit]], max(0, len(groups) - limit)


def shows_error_line(item: str, line: str) -> bool:
    """Whether a digest's error item shows this error line: the line itself, or the line of a
    group that lists the line's value among others ("row 5, 28, 51 (3 more)")."""
    if item == line:
        return True
    pieces, values = error_shape(line)
    for slot in range(len(values)):
        pattern = "".join(
            re.escape(piece) + ("(.+)" if index == slot else re.escape(values[index]))
            for index, piece in enumerate(pieces[:-1])
        )
        match = re.fullmatch(pattern + re.escape(pieces[-1]), item)
        if match and values[slot] in _MORE_VALUES_RE.sub("", match.group(1)).split(", "):
            return True
    return False


# --- the digest state ----------------------------------------------------------------------


@dataclass
class ToolCall:
    name: str
    salient: str
    outcome: str = "(no result)"

    def render(self) -> str:
        target = f" {self.salient}" if self.salient else ""
        return f"{self.name}{target} -> {self.outcome}"


def _first_string(arguments: dict[str, Any], keys: tuple[str, ...]) -> str:
    return next((str(arguments[key]) for key in keys if isinstance(arguments.get(key), str)), "")


def _first_scalar(arguments: dict[str, Any]) -> str:
    for key, value in arguments.items():
        if isinstance(value, str | int | float) and not isinstance(value, bool) and str(value):
            return f"{key}={value}"
    return ""


def _command_excerpt(command: str) -> str:
    wrapped = _SHELL_WRAPPER_RE.match(command.strip())
    return first_line(wrapped.group(2) if wrapped else command)


def salient_argument(arguments: dict[str, Any]) -> str:
    """The argument that says what a call did: a path, a command, a pattern, a URL..."""
    path = _first_string(arguments, _PATH_KEYS)
    command = _first_string(arguments, _COMMAND_KEYS)
    pattern = arguments.get("pattern")
    if path and re.fullmatch(r"\w+", command):
        value = f"{command} {path}"  # an editor's sub-command: "view /a.py"
    elif path and isinstance(pattern, str):
        value = f"{pattern} in {path}"
    else:
        value = path or _command_excerpt(command)
    value = value or _first_string(arguments, _SALIENT_KEYS) or _first_scalar(arguments)
    return cut_end(normalize(value), SALIENT_MAX)


def first_line(text: str) -> str:
    return next((line for line in text.splitlines() if line.strip()), "")


def meaningful_lines(text: str) -> Iterator[str]:
    """Lines of a tool result that say something (not blank, not a harness header)."""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and _MEANINGFUL_RE.search(stripped) and not _BOILERPLATE_RE.match(stripped):
            yield stripped


def tool_outcome(text: str) -> str:
    """ "error: <first error line>" if the call failed, else "ok: <first meaningful line>".

    A call failed if one of its first three meaningful lines is error-like, or its result shows a
    traceback, a non-zero exit code or a tool-use error.
    """
    head = list(islice(meaningful_lines(text), 3))
    window = "\n".join(_window(text.splitlines(), TOOL_ERROR_WINDOW))
    if any(is_error_line(line) for line in head) or _FAILED_CALL_RE.search(window):
        errors = find_error_lines(text, window=TOOL_ERROR_WINDOW)
        return "error: " + cut_end(errors[0] if errors else normalize(head[0]), OUTCOME_MAX)
    if not head:
        return "ok (empty)"
    if _LISTING_RE.match(head[0]):
        return f"ok: {len(text.splitlines())} lines of a file view"
    return "ok: " + cut_end(normalize(head[0]), OUTCOME_MAX)


def first_sentences(text: str) -> str:
    """The first sentence of a text, and the second too when the first is short."""
    parts = [normalize(part) for part in _SENTENCE_END_RE.split(text.strip())]
    parts = [part for part in parts if part]
    if not parts:
        return ""
    note = parts[0]
    if len(note) < 60 and len(parts) > 1:
        note = f"{note} {parts[1]}"
    return cut_end(note, NOTE_MAX)


@dataclass
class DigestState:
    """What the digest keeps while the records stream past (bounded)."""

    counts: dict[str, int] = field(default_factory=dict)
    first_seq: Any = None
    last_seq: Any = None
    tool_call_count: int = 0
    users: HeadTail = field(default_factory=lambda: HeadTail(MAX_USERS_HEAD, MAX_USERS_TAIL))
    notes: HeadTail = field(default_factory=lambda: HeadTail(MAX_NOTES_HEAD, MAX_NOTES_TAIL))
    calls: HeadTail = field(default_factory=lambda: HeadTail(MAX_CALLS_HEAD, MAX_CALLS_TAIL))
    errors: ErrorGroups = field(default_factory=ErrorGroups)
    seen_errors: BoundedSet = field(default_factory=lambda: BoundedSet(MAX_SEEN_ERRORS))
    paths: PathIndex = field(default_factory=PathIndex)
    pending: dict[str, ToolCall] = field(default_factory=dict)
    earlier: HeadTail = field(default_factory=lambda: HeadTail(1, 2))
    last_text: str = ""
    last_call: ToolCall | None = None
    kept: str = ""  # the first user message, kept in the context: not one of the records

    def keep(self, record: dict[str, Any]) -> None:
        self.kept = cut_end(normalize(content_text(record.get("content"))), KEPT_MAX)

    def add(self, record: dict[str, Any]) -> None:
        marker = marker_kind(record)
        if marker == "truncation":  # the facts it listed of what it hid join these lists
            for title, items in listed_sections(content_text(record.get("content"))).items():
                for item in items:
                    self._fold(title, item)
            return
        if not record.get("role"):
            return  # a rewind marker: nothing said in it
        if marker == "condense":  # an earlier summary: kept as such, not as a user request
            self._add_earlier(record)
            return
        role = str(record["role"])
        self.counts[role] = self.counts.get(role, 0) + 1
        if "seq" in record:
            self.first_seq = record["seq"] if self.first_seq is None else self.first_seq
            self.last_seq = record["seq"]
        for path, tier in record_paths(record):
            self.paths.add(path, tier)
        for error in record_errors(record):
            self._add_error(error)
        text = content_text(record.get("content"))
        if role == "user":
            self._add_user(record, text)
        elif role == "assistant":
            self._add_assistant(record, text)
        elif role == "tool":
            self._add_tool_result(record, text)

    def _add_error(self, line: str) -> None:
        if self.seen_errors.add(line):
            self.errors.add(line)

    def _add_earlier(self, record: dict[str, Any]) -> None:
        """An earlier summary. A digest's paths, errors, requests and notes join this one's
        lists (each listed once); the rest of it, or a chat backend's whole summary, is kept as
        an earlier summary. Its plan block goes: the plan given now supersedes it."""
        text = without_plan(content_text(record.get("content")))
        sections = digest_sections(text)
        if sections is None:
            for path, tier in record_paths(record):
                self.paths.add(path, tier)
            self._add_earlier_text(text)
            return
        rest = sections.pop(DIGEST_TITLE)
        for item in sections.pop(EARLIER, []):
            self._add_earlier_text(item)
        sections.pop(KEPT_TITLE, None)  # the context still shows the message itself
        for title, items in sections.items():
            folded = [item for item in items if self._fold(title, item)]
            if items and not folded:
                rest.append(f"{title}: " + "; ".join(items))
        self._add_earlier_text(" ".join(rest))

    def _add_earlier_text(self, text: str) -> None:
        self.earlier.add(cut_middle(normalize(text), EARLIER_MAX, EARLIER_HEAD, EARLIER_TAIL))

    def _fold(self, title: str, item: str) -> bool:
        """Add an earlier digest's item to this digest's list of that title (its "(+N more)"
        to what the list leaves out); False if this digest keeps no such list."""
        more = MORE_ITEMS_RE.fullmatch(item)
        left_out = int(more.group(1)) if more else 0
        if title in (FILES, OUTPUT_PATHS):
            # A path in Files was acted on or mentioned: it ranks as acted on, kept first.
            tier = TIER_ACTED if title == FILES else TIER_OUTPUT
            if more:
                self.paths.dropped_counts[tier] += left_out
            else:
                self.paths.add(item, tier)
        elif title == ERRORS:
            if more:
                self.errors.dropped += left_out
            else:
                self.errors.add_item(item)
        elif title in (USER_REQUESTS, "Assistant notes", "Tool calls"):
            collected = {USER_REQUESTS: self.users, "Assistant notes": self.notes}.get(
                title, self.calls
            )
            if more:
                collected.dropped += left_out
            else:
                collected.add(item)
        else:
            return False
        return True

    def _add_user(self, record: dict[str, Any], text: str) -> None:
        quoted = cut_middle(normalize(text), USER_MAX, USER_HEAD, USER_TAIL)
        if quoted:
            label = f"[seq {record['seq']}] " if "seq" in record else ""
            self.users.add(label + quoted)

    def _add_assistant(self, record: dict[str, Any], text: str) -> None:
        note = first_sentences(text)
        if note:
            self.notes.add(note)
            self.last_text = cut_end(normalize(text), LATEST_TEXT_MAX)
        for call_id, name, arguments in tool_calls(record):
            call = ToolCall(name, salient_argument(arguments))
            self.tool_call_count += 1
            self.calls.add(call)
            self.last_call = call
            self.pending[call_id] = call
            if len(self.pending) > MAX_PENDING_CALLS:
                del self.pending[next(iter(self.pending))]

    def _add_tool_result(self, record: dict[str, Any], text: str) -> None:
        call = self.pending.pop(str(record.get("tool_call_id") or ""), None)
        if call is None:  # its call is not in view: list the result on its own
            call = ToolCall(str(record.get("tool_name") or record.get("name") or "tool"), "")
            self.calls.add(call)
        call.outcome = tool_outcome(text)
        self.last_call = call


DIGEST_TITLE = "Extractive digest of "
MORE_ITEMS_RE = re.compile(r"\(\+(\d+) more\)")


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


# --- rendering under a budget --------------------------------------------------------------


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
        USER_REQUESTS: _stream_section(USER_REQUESTS, state.users, short),
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
OUTPUT_PATHS = "Other paths seen in tool output"
USER_REQUESTS = "User requests"
FILES = "Files"
ERRORS = "Errors"
EARLIER = "Earlier summaries"
KEPT_TITLE = "First user message (kept in the context, for reference)"
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


def digest_state(
    records: Iterable[dict[str, Any]], kept: dict[str, Any] | None = None
) -> DigestState:
    """What a digest keeps of message records (consumed once) and of the kept message."""
    state = DigestState()
    if kept is not None:
        state.keep(kept)
    for record in records:
        state.add(record)
    return state


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

PLAN_TITLE = "Plan (as recorded, not to be re-derived):"
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


def without_plan(summary: str) -> str:
    """An earlier digest without its plan block: the plan given now supersedes it."""
    return summary.split(f"\n\n{PLAN_TITLE}", 1)[0]
