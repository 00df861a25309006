"""What the extractive digest keeps while the records stream past: bounded state.

Every list is capped (the first and last items of a stream, distinct paths and error groups up
to a number), so a digest of a huge context costs little memory. Records feed the state one at
a time (``DigestState.add``); an earlier digest met among them (a condense summary condensed
again, a truncation marker's lists) is read back and its items join these lists.
"""

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from app.context.effective import marker_kind
from app.summaries.excerpts import cut_end, cut_middle, normalize
from app.summaries.layout import (
    DIGEST_TITLE,
    EARLIER,
    ERRORS,
    FILES,
    KEPT_TITLE,
    MORE_ITEMS_RE,
    OUTPUT_PATHS,
    USER_REQUESTS,
    digest_sections,
    listed_sections,
    without_plan,
)
from app.summaries.rules import (
    TIER_ACTED,
    TIER_OUTPUT,
    error_shape,
    first_sentences,
    record_errors,
    record_paths,
    record_text,
    salient_argument,
    tool_calls,
    tool_outcome,
)

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
# Error lines that differ only in numbers or ids: one line listing the values, up to this long
# (the values that do not fit are counted: "(3 more)"); at most this many values are kept.
GROUP_MAX = 400
MAX_GROUP_VALUES = 100
LATEST_TEXT_MAX = 500


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


@dataclass
class ToolCall:
    name: str
    salient: str
    outcome: str = "(no result)"

    def render(self) -> str:
        target = f" {self.salient}" if self.salient else ""
        return f"{self.name}{target} -> {self.outcome}"


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
        self.kept = cut_end(normalize(record_text(record)), KEPT_MAX)

    def add(self, record: dict[str, Any]) -> None:
        marker = marker_kind(record)
        if marker == "truncation":  # the facts it listed of what it hid join these lists
            for title, items in listed_sections(record_text(record)).items():
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
        text = record_text(record)
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
        text = without_plan(record_text(record))
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
