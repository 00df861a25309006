"""The promises checked after every step of a fuzzed conversation, over the task's real files,
its database row and the payloads served.

- append-only: messages.jsonl's bytes before a step are a prefix of its bytes after;
- acknowledged: every seq a 201 gave is in the history with the message as posted, seqs only
  grow, and a seq is never given twice (restarts included);
- rebuild equal: current.jsonl is what a rebuild from messages.jsonl alone gives (and what an
  independent model of the effective context gives), and the database head agrees;
- markers: every compaction marker has its summaries.jsonl record, counted once;
- budget and pairing: a payload served fits its budget as its own format counts it, and is
  valid for its provider, tool results after their calls;
- refusals: a 4xx leaves the task's files and head as they were.
"""

import itertools
import json
import shutil
import sqlite3
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from app.compaction.plans import MEMORY_KINDS
from app.context.effective import COMPACTION_KINDS, MASK
from app.context.files import ContextFiles, CurrentRender
from app.context.records import RESERVED_FIELDS, HeadState, openai_message
from app.formats import FORMATS
from app.formats.costs import TokenCounting
from app.storage.layout import CURRENT, MESSAGES, SUMMARIES
from tests.support.formats import validate_payload
from tests.support.reference import reference_context


class Broken(AssertionError):
    """An invariant does not hold."""


# The fields of the message schema (a null one is not stored); any other is an extra field.
MESSAGE_FIELDS = frozenset(
    {"role", "content", "name", "tool_calls", "tool_call_id", "tool_name", "usage"}
)


def require(condition: bool, what: str) -> None:
    if not condition:
        raise Broken(what)


def stored_form(message: dict[str, Any]) -> dict[str, Any]:
    """A posted message as its record must hold it: the fields as sent (a null is an absent
    field, but for extra fields, kept as sent), content always present, a tool call's type
    defaulted."""
    stored = {k: v for k, v in message.items() if v is not None or k not in MESSAGE_FIELDS}
    stored["content"] = message.get("content")
    if isinstance(stored["content"], list):
        stored["content"] = [_without_nulls(part) for part in stored["content"]]
    if "tool_calls" in stored:
        stored["tool_calls"] = [{"type": "function", **call} for call in stored["tool_calls"]]
    return stored


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value


def as_posted(record: dict[str, Any], posted: dict[str, Any]) -> dict[str, Any]:
    """A record less what the service adds (its envelope; a result's tool_name, when the
    message had none)."""
    message = {k: v for k, v in record.items() if k not in RESERVED_FIELDS}
    if message.get("role") == "tool" and "tool_name" not in posted:
        message.pop("tool_name", None)
    return message


@dataclass
class Ledger:
    """What the service acknowledged to this conversation, and what the files held last."""

    acknowledged: dict[int, dict[str, Any]] = field(default_factory=dict)  # seq -> stored form
    message_seqs: list[int] = field(default_factory=list)  # acknowledged messages, in order
    issued: int = 0  # the highest seq the history has held
    messages_bytes: bytes = b""

    def acknowledge(self, seqs: list[int], messages: list[dict[str, Any]]) -> None:
        require(len(seqs) == len(messages), f"{len(messages)} messages acknowledged as {seqs}")
        # Consecutive, and after every seq issued so far (a background compaction may have
        # appended markers since this conversation last looked).
        require(
            seqs == list(range(seqs[0], seqs[0] + len(seqs))) and seqs[0] > self.issued,
            f"acknowledged seqs {seqs} are not new consecutive seqs (the last issued: "
            f"{self.issued})",
        )
        for seq, message in zip(seqs, messages, strict=True):
            self.acknowledged[seq] = stored_form(message)
        self.message_seqs += seqs
        self.issued = seqs[-1]


def read_records(directory: Path) -> tuple[bytes, list[dict[str, Any]]]:
    written = (directory / MESSAGES).read_bytes()
    return written, [json.loads(line) for line in written.splitlines()]


def check_history(directory: Path, ledger: Ledger) -> list[dict[str, Any]]:
    """Append-only, and every acknowledged message there as posted; advances the ledger."""
    written, records = read_records(directory)
    require(
        written.startswith(ledger.messages_bytes),
        f"messages.jsonl was rewritten: its first {len(ledger.messages_bytes)} bytes changed",
    )
    if not written:  # a thread's context before its first message
        require(not ledger.issued, f"messages.jsonl is empty, seq {ledger.issued} was issued")
        return records
    require(written.endswith(b"\n"), "messages.jsonl does not end with a newline")
    seqs = [r["seq"] for r in records]
    require(
        all(a < b for a, b in itertools.pairwise(seqs)),
        f"seqs do not strictly increase: {seqs}",
    )
    require(seqs[-1] >= ledger.issued, f"seq {ledger.issued} was issued, the last is {seqs[-1]}")
    by_seq = {r["seq"]: r for r in records}
    for seq, expected in ledger.acknowledged.items():
        record = by_seq.get(seq)
        require(record is not None, f"acknowledged seq {seq} is not in messages.jsonl")
        assert record is not None
        require("marker" not in record, f"acknowledged seq {seq} became a marker: {_short(record)}")
        stored = as_posted(record, expected)
        require(stored == expected, f"seq {seq} is stored as {_short(stored)}, not as posted")
    ledger.messages_bytes = written
    ledger.issued = seqs[-1]
    return records


def check_rebuild(
    directory: Path, records: list[dict[str, Any]], database: Path, task_uuid: str, thread_id: int
) -> HeadState:
    """current.jsonl = a rebuild from messages.jsonl = the reference model; the head agrees."""
    with tempfile.TemporaryDirectory(prefix="fuzz-rebuild-") as scratch:
        copy = Path(scratch)
        shutil.copyfile(directory / MESSAGES, copy / MESSAGES)
        render = CurrentRender(ContextFiles(copy))
        rebuilt = b"".join(render)
    current = (directory / CURRENT).read_bytes()
    require(current == rebuilt, "current.jsonl differs from a rebuild from messages.jsonl")
    expected = [openai_message(r) for r in reference_context(records)]
    require(
        [json.loads(line) for line in current.splitlines()] == expected,
        "current.jsonl differs from the reference model of the effective context",
    )
    row = head_row(database, task_uuid, thread_id)
    rebuilt_head = asdict(render.head)
    require(row == rebuilt_head, f"the database head {row} is not the files' {rebuilt_head}")
    return render.head


def head_row(database: Path, task_uuid: str, thread_id: int) -> dict[str, Any]:
    """A context's context_heads row, read with the database's own client."""
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as connection:
        connection.row_factory = sqlite3.Row
        row = connection.execute(
            "SELECT last_seq, messages_bytes, current_bytes, current_messages, context_tokens, "
            "open_tool_calls, format_tokens FROM context_heads "
            "WHERE task_uuid = ? AND thread_id = ?",
            (task_uuid, thread_id),
        ).fetchone()
    require(row is not None, f"context {thread_id} of the task has no context_heads row")
    head = dict(row)
    head["open_tool_calls"] = json.loads(head["open_tool_calls"])
    head["format_tokens"] = json.loads(head["format_tokens"])
    return head


def jobs_of(database: Path, task_uuid: str) -> list[dict[str, Any]]:
    """The task's background jobs (kind, status, error), from the database."""
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as connection:
        connection.row_factory = sqlite3.Row
        rows = connection.execute(
            "SELECT id, kind, status, error FROM jobs WHERE task_uuid = ?", (task_uuid,)
        ).fetchall()
    return [dict(row) for row in rows]


def check_jobs(jobs: list[dict[str, Any]]) -> None:
    """A background job may be skipped (the task moved on), never fail."""
    failed = [job for job in jobs if job["status"] == "failed"]
    require(not failed, f"background job failed: {_short(failed)}")


def check_markers(directory: Path, records: list[dict[str, Any]]) -> int:
    """Every compaction marker of a context has its summaries.jsonl record; how many there
    are (the task's compression_count counts those of all its contexts)."""
    markers = [r for r in records if r.get("marker") in {*COMPACTION_KINDS, MASK}]
    path = directory / SUMMARIES
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    by_id = {s["id"]: s for s in map(json.loads, lines)}
    require(len(by_id) == len(markers), f"{len(markers)} markers, {len(by_id)} summaries")
    for marker in markers:
        summary = by_id.get(marker.get("summary_id"))
        require(summary is not None, f"marker {marker['seq']} has no summaries.jsonl record")
        assert summary is not None
        covers = (
            summary["masked_seqs"] == [m["seq"] for m in marker["masks"]]
            if marker["marker"] == MASK
            else [summary["start_seq"], summary["end_seq"]] == marker["hides"]
        )
        # A summary or truncation marker cut to fit keeps its kind; its record says elision.
        cut_memory = summary["kind"] == "elision" and marker["marker"] in MEMORY_KINDS
        require(
            summary["marker_seq"] == marker["seq"]
            and (summary["kind"] == marker["marker"] or cut_memory)
            and covers,
            f"marker {marker['seq']} and its summary disagree: {_short(summary)}",
        )
    return len(markers)


def check_payload(
    name: str, payload: dict[str, Any], headers: Mapping[str, str], budget: int
) -> int:
    """A served payload: within the task's budget by its headers and as its format counts it
    afresh, and valid for its provider (schema, SDK types, tool pairing). Its exact count."""
    served = int(headers["x-context-tokens"])
    require(int(headers["x-context-budget"]) == budget, f"{name}: budget header != {budget}")
    require(served <= budget, f"{name}: {served} tokens served over the budget {budget}")
    counter = _COUNTING.counter(headers["x-token-counter"])
    exact = FORMATS[name].payload_tokens(counter, payload)
    require(exact <= budget, f"{name}: the payload counts {exact} tokens, over {budget}")
    try:
        validate_payload(name, payload)
    except AssertionError as exc:
        raise Broken(f"{name}: payload invalid: {_short(str(exc))}") from exc
    return exact


_COUNTING = TokenCounting("auto")


def files_of(directory: Path) -> dict[str, bytes]:
    """The task's files, its threads' included (locks aside), for 'a refusal wrote nothing'."""
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.suffix != ".lock"
    }


def check_unchanged(
    before: tuple[dict[str, bytes], dict[int, dict[str, Any]]],
    after: tuple[dict[str, bytes], dict[int, dict[str, Any]]],
    what: str,
) -> None:
    files_before, head_before = before
    files_after, head_after = after
    changed = sorted(
        name
        for name in files_before.keys() | files_after.keys()
        if files_before.get(name) != files_after.get(name)
    )
    require(not changed, f"{what} was refused but wrote {changed}")
    require(head_before == head_after, f"{what} was refused but moved the head")


def _short(value: Any, limit: int = 600) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=True)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"
