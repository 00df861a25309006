"""Compaction and rewind of a task's context (the design: docs/compaction.md).

Every operation appends a marker to messages.jsonl (and, for compactions, a record to
summaries.jsonl), rebuilds current.jsonl and moves the committed head. A condense (the
background compaction of a long context) holds the task lock only for moments, so appends go
on meanwhile: it indexes the context and asks the summariser *outside* the lock (the committed
bytes of messages.jsonl never change), renders its new current.jsonl outside it too, and under
the lock adds the records appended since, appends its marker and moves the head. A marker
appended meanwhile (a payload's fit, a rewind) sends it back to indexing under the lock, where
it is skipped if the span it summarised is no longer what the context shows.
"""

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, BinaryIO, Literal

from app.budgets.policy import Budget
from app.budgets.service import Budgets
from app.compaction import plans
from app.compaction.elision import over_cap_shown_again, pick_elision, seqs_over
from app.compaction.indexing import PickledEntries, ToIndex, entries_at, entries_of, unpickled
from app.compaction.masking import masked_results
from app.compaction.plans import HIDDEN_MESSAGES, Entry, Skip, Span
from app.compaction.truncation import HiddenFacts, hidden_facts, truncation_text
from app.config import Settings
from app.context.effective import MASK, is_marker
from app.context.files import RecordSpan, record_at, span_records
from app.context.processes import CpuProcesses, in_a_process
from app.context.records import HeadState, openai_message, utc_timestamp
from app.context.shapes import Marker, SummaryRecord
from app.context.store import ContextStore, LockedTask
from app.db.models import Task
from app.errors import AppError, ErrorCode, InvalidInput, TaskNotWritable, ThreadNotActive, TooLarge
from app.formats import native_format
from app.formats.costs import FormatTokens, in_format
from app.llm.errors import LLMError
from app.observability.metrics import Metrics, compaction_ms, timed_compaction
from app.planning.items import latest_items
from app.storage.layout import PLANNING
from app.storage.locks import NamedLocks
from app.summaries.limited import SummaryLimit
from app.summaries.processes import SummaryProcessLost
from app.summaries.summarizer import Summarizer

log = logging.getLogger(__name__)

Strategy = Literal["auto", "mask", "condense", "truncate"]
# With the seqs of the history it stands for: each can be read again (GET /messages/{seq}).
SUMMARY_HEADER = "[Summary of the earlier conversation ({count} messages, seq {first}-{last})]\n"
# A fit ends when a whole pass of the tiers changes nothing; this only bounds one whose steps
# each free a few tokens (small messages behind a long marker, messages cut to the bone).
MAX_FIT_ROUNDS = 64
# A step freeing less than this share of what is over the budget has stalled: the messages
# left to cut are cut to their bones already, or those left to hide are small.
STALLED_SHARE = 0.1
# The most messages of one append cut to the message cap (a batch of large tool results).
MAX_CAPS_PER_APPEND = 16


# Tiers that run once per fit (each does all it can at once) and those that never hide a
# message (the background compaction's).
ONCE_PER_FIT = frozenset({MASK, "condense"})
BACKGROUND_TIERS = frozenset({MASK, "condense"})


@dataclass(frozen=True)
class Measure:
    tokens: int
    budget: Budget
    fmt: str
    tiers: tuple[str, ...]


class CompactionFailed(AppError):
    status_code = 502
    default_code = ErrorCode.COMPACTION_FAILED


@dataclass(frozen=True)
class Outcome:
    """What one compaction did."""

    kind: str  # condense | truncation | elision | skipped
    tokens_before: int
    tokens_after: int
    reason: str | None = None
    summary_id: int | None = None
    hidden_messages: int = 0
    # The context's tokens after a compaction that committed a marker (OpenAI's rendering, as
    # an append's answer counts them); None for a mask or a skip.
    context_tokens: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "reason": self.reason,
            "summary_id": self.summary_id,
            "hidden_messages": self.hidden_messages,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
        }


class CompactionService:
    def __init__(
        self,
        store: ContextStore,
        budgets: Budgets,
        summarizer: Summarizer,
        settings: Settings,
        *,
        metrics: Metrics | None = None,
        processes: CpuProcesses | None = None,
    ) -> None:
        self.metrics = metrics  # each outcome counted and timed (@timed_compaction)
        self._processes = processes  # where a long context is indexed, if any
        self.store = store
        self.budgets = budgets
        self.summarizer = summarizer
        self.settings = settings
        self._busy = NamedLocks()

    @asynccontextmanager
    async def _one_at_a_time(self, task_uuid: str, thread_id: int) -> AsyncIterator[None]:
        """At most one compaction per context in this process (the commit re-checks anyway)."""
        async with self._busy((task_uuid, thread_id)):
            yield

    # -- what the context looks like ------------------------------------------------------

    async def _index(self, locked: LockedTask, fmt: str) -> tuple[HeadState, list[Entry]]:
        head = await self.store.recovered_head(locked)
        async with self.store.reading_messages(locked) as f:
            entries = await asyncio.to_thread(entries_of, f, head.messages_bytes, fmt)
        return head, entries

    def _too_little(self, gain: int, context_tokens: int, *, explicit: bool) -> bool:
        """Whether a compaction would free too little to be worth its marker (and the prompt
        cache it breaks): it moves on to the next tier instead. One asked for through the API
        (``explicit``) only has to free something."""
        if explicit:
            return gain <= 0
        return gain < self.settings.compaction.min_gain_share * context_tokens

    def _cost(self, task: Task, message: Mapping[str, Any]) -> tuple[int, FormatTokens]:
        return self.store.costs(task).message(openai_message(message))

    # -- the operations -------------------------------------------------------------------

    async def compact(
        self,
        task_uuid: str,
        strategy: Strategy = "auto",
        backend: str | None = None,
        thread_id: int = 0,
    ) -> Outcome:
        """One compaction step: mask, condense (auto, condense) or truncate."""
        if strategy == "truncate":
            return await self.truncate(task_uuid, thread_id=thread_id, explicit=True)
        if strategy == MASK:
            return await self.mask(task_uuid, thread_id=thread_id, explicit=True)
        return await self.condense(task_uuid, backend, thread_id=thread_id, explicit=True)

    @timed_compaction
    async def condense(
        self,
        task_uuid: str,
        backend: str | None = None,
        fmt: str | None = None,
        *,
        thread_id: int = 0,
        explicit: bool = False,
    ) -> Outcome:
        """Summarise the middle of a context; tokens are weighed as ``fmt`` renders them
        (default: the task's own provider format). ``explicit``: asked for through the API."""
        async with self._one_at_a_time(task_uuid, thread_id):
            # Under the lock: the head and an open messages.jsonl. Indexing the context (it
            # may hold thousands of records) and summarising read the committed bytes after.
            async with self.store.locked(task_uuid, thread_id) as locked:
                self._require_running(locked)
                fmt = fmt or native_format(locked.task.llm_provider)
                head = await self.store.recovered_head(locked)
                backend = backend or await self.store.summary_backend(locked)
                # The task's plan items, for its own context (a thread's work is not the plan).
                checklist = None
                if thread_id == 0:
                    planning = self.store.task_dir(locked.task) / PLANNING
                    checklist = await asyncio.to_thread(latest_items, planning)
                handle = await self.store.open_messages(locked)
            try:
                # Out of the service's interpreter, like the digest: tens of milliseconds of
                # Python on a long context, which appends would otherwise wait behind.
                end = head.messages_bytes
                job = ToIndex(self.store.files(locked).messages, end, fmt)
                here = partial(entries_of, handle, end, fmt)
                found: list[Entry] | PickledEntries = await in_a_process(
                    self._processes, entries_at, job, here
                )
                entries = await unpickled(found)
                before = self.budgets.context_tokens(locked, head, fmt)
                plan = self._plan_condense(locked, entries, before, fmt, explicit=explicit)
                if isinstance(plan, Skip):
                    return Outcome("skipped", before, before, reason=plan.reason)
                instruction = plans.kept_instruction(entries)
                kept = None
                if instruction is not None:
                    kept = await asyncio.to_thread(
                        _read_entry, handle, instruction, head.messages_bytes
                    )
                summary = await self.summarizer.summarize(
                    RecordSpan(
                        handle,
                        self.store.files(locked).messages,
                        head.messages_bytes,
                        entries[plan.start].position,
                        entries[plan.end - 1].position,
                    ),
                    backend,
                    kept=kept,
                    limit=self._summary_limit(
                        locked, fmt, plan.messages(entries), plan.hides(entries)
                    ),
                    plan=checklist.items if checklist else None,
                )
            except LLMError as exc:
                raise CompactionFailed(str(exc), details={"backend": exc.backend}) from exc
            except SummaryProcessLost as exc:
                raise CompactionFailed(str(exc)) from exc
            finally:
                handle.close()
            if not summary.strip():
                raise CompactionFailed(
                    "the summariser returned an empty summary", code=ErrorCode.EMPTY
                )
            hidden = Span(plan.start, plan.end)
            first, last = hidden.hides(entries)
            heading = SUMMARY_HEADER.format(count=hidden.messages(entries), first=first, last=last)
            content = heading + summary.strip()
            marker: Marker = {"role": "user", "content": content, "marker": "condense"}
            cost = self._cost(locked.task, marker)
            if in_format(*cost, fmt) >= hidden.tokens(entries):  # e.g. a digest of a few
                return Outcome("skipped", before, before, reason="context_grew")  # short ones
            record = self._summary_record("condense", entries, hidden, content, fmt, cost)
            record["summarizer"] = self.summarizer.describe(backend)
            marker = _marker_over(marker, record, hidden, entries, cost)
            return await self._commit_condense(
                locked, head, entries, hidden, marker, record, explicit=explicit
            )

    def _plan_condense(
        self, locked: LockedTask, entries: list[Entry], tokens: int, fmt: str, *, explicit: bool
    ) -> Span | Skip:
        """The condense to do: the newest messages kept are those that fit, beside the head
        and a summary as large as it may be, under ``relief_share`` of the threshold (room for
        several turns before the next compaction: each one moves the payload's prefix). One
        asked for through the API keeps ``keep_recent``, as asked."""
        settings = self.settings.compaction
        if explicit:
            return plans.plan_condense(
                entries, keep_recent=settings.keep_recent, min_to_compress=settings.min_to_compress
            )
        relief = int(self.budgets.context_budget(locked).threshold * settings.relief_share)
        head = plans.head_length(entries)
        # What the context costs beside its entries (a pinned plan, tools), and its head.
        fixed = tokens - sum(e.tokens for e in entries[head:])
        newest = max(e.seq for e in entries)  # the longest seqs a heading may name
        summary = self._summary_limit(locked, fmt, 0, (newest, newest)).tokens
        return plans.plan_condense(
            entries,
            keep_recent=settings.keep_recent,
            min_to_compress=settings.min_to_compress,
            room=relief - fixed - summary,
        )

    def _summary_limit(
        self, locked: LockedTask, fmt: str, messages: int, seqs: tuple[int, int]
    ) -> SummaryLimit:
        """What the summary may cost: ``summary_max_share`` of the budget, less its heading
        (the summary's own share of the message is counted with the task's counter)."""
        allowed = self.budgets.context_budget(locked).allowed
        heading = SUMMARY_HEADER.format(count=messages, first=seqs[0], last=seqs[1])
        overhead = in_format(*self._cost(locked.task, {"role": "user", "content": heading}), fmt)
        counter = self.store.costs(locked.task).counter
        share = int(allowed * self.settings.compaction.summary_max_share)
        return SummaryLimit(max(1, share - overhead), counter)

    async def _commit_condense(
        self,
        indexed: LockedTask,
        base: HeadState,
        entries: list[Entry],
        hidden: Span,
        marker: Marker,
        summary: SummaryRecord,
        *,
        explicit: bool,
    ) -> Outcome:
        """Commit a condense of ``hidden`` (``entries`` as the context was at ``base``).

        Its new current.jsonl is rendered before the lock is taken; under the lock only what
        was appended since is added to it. A marker appended since (another compaction, a
        rewind) may have changed the span: the context is then indexed again, under the lock,
        and the condense is skipped if its span is no longer what the context shows."""
        fmt = summary["counted_as"]
        prepared = await self.store.prepare_marker(indexed, base, marker)
        try:
            async with self.store.locked(indexed.task.uuid, indexed.thread_id) as locked:
                head = await self.store.recovered_head(locked)
                before = self.budgets.context_tokens(locked, head, fmt)
                if locked.task.status != "running":  # finished while the summariser worked
                    return Outcome("skipped", before, before, reason="task_not_running")
                if locked.thread is not None and locked.thread.status != "active":
                    return Outcome("skipped", before, before, reason="thread_not_active")
                gain = summary["original_tokens"] - summary["summary_tokens"]
                if self._too_little(gain, before, explicit=explicit):
                    return Outcome("skipped", before, before, reason="too_little_gain")
                done = None
                if prepared is not None:
                    done = await self.store.commit_prepared(
                        locked, head, prepared, marker, summary, compactions=1
                    )
                if done is None:
                    positions = [e.position for e in entries[hidden.start : hidden.end]]
                    return await self._condense_indexed(
                        locked, fmt, positions, marker["content"], summary, explicit=explicit
                    )
                new_head, record = done
                hidden_messages = hidden.messages(entries)
                return self._committed(locked, before, new_head, record, summary, hidden_messages)
        finally:
            if prepared is not None:
                prepared.discard()

    async def _condense_indexed(
        self,
        locked: LockedTask,
        fmt: str,
        positions: list[int],
        content: str,
        summarized: SummaryRecord,
        *,
        explicit: bool,
    ) -> Outcome:
        """Commit a condense whose span may have changed since it was summarised, the context
        indexed again under the lock (held)."""
        head, entries = await self._index(locked, fmt)
        before = self.budgets.context_tokens(locked, head, fmt)
        found = [i for i, e in enumerate(entries) if positions[0] <= e.position <= positions[-1]]
        if [entries[i].position for i in found] != positions:
            return Outcome("skipped", before, before, reason="context_changed")
        hidden = Span(found[0], found[-1] + 1)
        marker: Marker = {"role": "user", "content": content, "marker": "condense"}
        cost = self._cost(locked.task, marker)
        if in_format(*cost, fmt) >= hidden.tokens(entries):
            return Outcome("skipped", before, before, reason="context_grew")
        gain = hidden.tokens(entries) - in_format(*cost, fmt)
        if self._too_little(gain, before, explicit=explicit):
            return Outcome("skipped", before, before, reason="too_little_gain")
        record = self._summary_record("condense", entries, hidden, content, fmt, cost)
        record["summarizer"] = summarized["summarizer"]
        return await self._commit(locked, head, marker, record, hidden, entries, cost)

    @timed_compaction
    async def mask(
        self,
        task_uuid: str,
        fmt: str | None = None,
        *,
        thread_id: int = 0,
        explicit: bool = False,
    ) -> Outcome:
        """Replace every older tool result (all but the newest ``keep_tool_results``) with a
        one-line placeholder, in one batch, if that frees at least ``mask_min_tokens`` (any
        gain when ``explicit``, asked for through the API)."""
        async with (
            self._one_at_a_time(task_uuid, thread_id),
            self.store.locked(task_uuid, thread_id) as locked,
        ):
            self._require_running(locked)
            fmt = fmt or native_format(locked.task.llm_provider)
            head, entries = await self._index(locked, fmt)
            before = self.budgets.context_tokens(locked, head, fmt)
            tiers = self.budgets.compaction_options(locked.task)
            chosen = plans.plan_mask(entries, keep_tool_results=tiers.keep_tool_results)
            if not chosen:
                return Outcome("skipped", before, before, reason="nothing_to_mask")
            costs = self.store.costs(locked.task)
            shown = {entries[i].position: entries[i].tokens for i in chosen}
            async with self.store.reading_messages(locked) as f:
                masks = await asyncio.to_thread(
                    masked_results, f, head.messages_bytes, list(shown), costs
                )
            # A result cut to less than its placeholder would cost stays as it is.
            masks = [
                m
                for m in masks
                if in_format(m["tokens"], m["format_tokens"], fmt) < shown[m["seq"]]
            ]
            if not masks:
                return Outcome("skipped", before, before, reason="nothing_to_mask")
            original = sum(shown[m["seq"]] for m in masks)
            placeholders = sum(in_format(m["tokens"], m["format_tokens"], fmt) for m in masks)
            gain = original - placeholders
            floor = 1 if explicit else self.settings.compaction.mask_min_tokens
            if gain < floor or self._too_little(gain, before, explicit=explicit):
                return Outcome("skipped", before, before, reason="too_little_gain")
            seqs = [m["seq"] for m in masks]
            summary = summary_fields(
                MASK, (seqs[0], seqs[-1]), original, placeholders, len(masks), fmt
            )
            summary["masked_seqs"] = seqs
            marker: Marker = {
                "marker": MASK,
                "masks": masks,
                "timestamp": summary["timestamp"],
                "tokens": 0,
            }
            new_head, record = await self.store.commit_marker(
                locked, head, marker, summary, compactions=1
            )
            after = self.budgets.context_tokens(locked, new_head, fmt)
            log.info(
                "task %s thread %d: masked %d tool results, %d -> %d tokens",
                task_uuid,
                thread_id,
                len(masks),
                before,
                after,
            )
            return Outcome(
                MASK, before, after, summary_id=record["summary_id"], hidden_messages=len(masks)
            )

    @timed_compaction
    async def truncate(
        self,
        task_uuid: str,
        fmt: str | None = None,
        *,
        thread_id: int = 0,
        explicit: bool = False,
    ) -> Outcome:
        async with (
            self._one_at_a_time(task_uuid, thread_id),
            self.store.locked(task_uuid, thread_id) as locked,
        ):
            self._require_running(locked)
            fmt = fmt or native_format(locked.task.llm_provider)
            head, entries = await self._index(locked, fmt)
            before = self.budgets.context_tokens(locked, head, fmt)
            plan = plans.plan_truncate(entries)
            if isinstance(plan, Skip):
                return Outcome("skipped", before, before, reason=plan.reason)
            async with self.store.reading_messages(locked) as f:
                facts = await asyncio.to_thread(_hidden_facts, f, head, plan.hides(entries))
            content = truncation_text(
                plan.messages(entries),
                plan.hides(entries),
                facts,
                self.store.costs(locked.task).counter,
                self.budgets.context_budget(locked).allowed,
            )
            marker: Marker = {"role": "user", "content": content, "marker": "truncation"}
            cost = self._cost(locked.task, marker)
            if in_format(*cost, fmt) >= plan.tokens(entries):  # e.g. only an older marker
                return Outcome("skipped", before, before, reason="context_grew")
            gain = plan.tokens(entries) - in_format(*cost, fmt)
            if self._too_little(gain, before, explicit=explicit):
                return Outcome("skipped", before, before, reason="too_little_gain")
            record = self._summary_record("truncation", entries, plan, content, fmt, cost)
            return await self._commit(locked, head, marker, record, plan, entries, cost)

    @timed_compaction
    async def elide(
        self,
        task_uuid: str,
        excess: int,
        fmt: str | None = None,
        *,
        thread_id: int = 0,
        relaxed: bool = False,
    ) -> Outcome:
        """Cut the middle out of one message, to lose ``excess`` tokens (a last resort): the
        first, in elision order, that can shrink (see ``pick_elision``); ``relaxed``: any message
        and any gain will do.
        """
        async with (
            self._one_at_a_time(task_uuid, thread_id),
            self.store.locked(task_uuid, thread_id) as locked,
        ):
            fmt = fmt or native_format(locked.task.llm_provider)
            head, entries = await self._index(locked, fmt)
            before = self.budgets.context_tokens(locked, head, fmt)
            return await self._cut(locked, head, entries, before, excess, fmt, relaxed=relaxed)

    async def cap(
        self, context: LockedTask, before: HeadState, after: HeadState
    ) -> list[tuple[int, Outcome]]:
        """Cut each message of the append ``before`` -> ``after`` (the context's lock held
        then, released now) that costs more than the context's message cap down to it, the
        largest first; return each cut made, with the seq it cut. A cut that fails is logged
        and ends the cutting: those made stand.

        Done as the append commits, so the first payload that shows such a message shows it
        cut, at its end, where cutting moves no prefix a provider has cached (cut later, from
        the middle of the payload, it would). Only the task lock is taken: an append may wait
        for this, never for a condense's summariser. The head (system messages, the task
        instruction) is left as it is: it gives way only when a payload needs it to."""
        fmt = native_format(context.task.llm_provider)
        cap = self.budgets.message_cap(context)
        async with self.store.reading_messages(context) as f:  # the appended bytes never change
            over = await asyncio.to_thread(
                seqs_over, f, before.messages_bytes, after.messages_bytes, fmt, cap
            )
        return await self._cap_each(context.task.uuid, context.thread_id, over)

    async def _cap_each(
        self, task_uuid: str, thread_id: int, seqs: list[int]
    ) -> list[tuple[int, Outcome]]:
        """:meth:`_cap_one` for each of (the first few of) these seqs; the cuts made, with
        their seqs. Called once a change is committed, which must be answered as such: a cut
        that fails is logged and ends the cutting (the message stays whole until a payload
        needs it cut)."""
        cuts = []
        for seq in seqs[:MAX_CAPS_PER_APPEND]:
            try:
                step = await self._cap_one(task_uuid, thread_id, seq)
            except Exception:
                log.exception("task %s: cutting seq %d over the cap failed", task_uuid, seq)
                break
            if step.kind != "skipped":
                cuts.append((seq, step))
        return cuts

    @timed_compaction
    async def _cap_one(self, task_uuid: str, thread_id: int, seq: int) -> Outcome:
        """Cut the message ``seq`` down to the message cap, if it is still there, whole and
        after the head."""
        async with self.store.locked(task_uuid, thread_id) as locked:
            fmt = native_format(locked.task.llm_provider)
            head, entries = await self._index(locked, fmt)
            before = self.budgets.context_tokens(locked, head, fmt)
            try:
                self._require_running(locked)
            except (TaskNotWritable, ThreadNotActive):  # ended since: the append stands as is
                return Outcome("skipped", before, before, reason="not_running")
            found_at = [i for i, e in enumerate(entries) if e.seq == seq and e.marker is None]
            if not found_at or found_at[0] < plans.head_length(entries):
                return Outcome("skipped", before, before, reason="nothing_to_cap")
            return await self._cut(locked, head, entries, before, 0, fmt, only=found_at[0])

    async def _cut(
        self,
        locked: LockedTask,
        head: HeadState,
        entries: list[Entry],
        before: int,
        excess: int,
        fmt: str,
        *,
        only: int | None = None,
        relaxed: bool = False,
    ) -> Outcome:
        """Elide one message (``only`` that one; else the first in elision order that gives
        way) by ``excess`` and at least down to the message cap, and commit its marker.
        ``relaxed``: any message and any gain will do (nothing else can change the context)."""
        costs = self.store.costs(locked.task)
        async with self.store.reading_messages(locked) as f:
            # Reading and counting large messages: off the event loop.
            found = await asyncio.to_thread(
                partial(
                    pick_elision, cap=self.budgets.message_cap(locked), only=only, relaxed=relaxed
                ),
                f,
                head.messages_bytes,
                entries,
                costs,
                excess,
                fmt,
            )
        if found is None:
            return Outcome("skipped", before, before, reason="nothing_to_elide")
        index, marker, cost = found
        span = Span(index, index + 1)
        record = self._summary_record("elision", entries, span, "", fmt, cost)
        return await self._commit(locked, head, marker, record, span, entries, cost)

    async def fit(
        self, task_uuid: str, fmt: str | None = None, *, thread_id: int = 0
    ) -> Outcome | None:
        """Compact a context until its payload in ``fmt`` is within its budget (a payload is
        never served over it), or raise TooLarge; return the last step that changed it.

        Each round tries the task's tiers in order (masking and condensing once per call) and
        measures again after the step that changed something: one that waited for another
        condense (a background job's) may find the context under budget already."""
        last: Outcome | None = None
        done: set[str] = set()
        # Once every tier has been skipped, or elisions stall: any gain will do, the payload
        # must fit (elisions of a few tokens each would spend the rounds while a truncation
        # waits for a gain it cannot reach).
        relaxed = False
        stalled: set[str] = set()  # truncation set aside while elisions free more
        for _ in range(MAX_FIT_ROUNDS):
            measure = await self._measure(task_uuid, thread_id, fmt)
            fmt = measure.fmt
            # Under the budget but still at the threshold: the background tiers not tried yet
            # go on now (a mask that made it fit, then a condense), so that their changes
            # reach the prompt together rather than a turn apart, and the context has room
            # for the next turns. Truncation and elision only make a payload fit.
            fits = measure.tokens <= measure.budget.allowed
            if fits and (
                measure.tokens < measure.budget.threshold
                or not any(t in BACKGROUND_TIERS and t not in done for t in measure.tiers)
            ):
                return last
            for tier in measure.tiers:
                if tier in done or tier in stalled or (fits and tier not in BACKGROUND_TIERS):
                    continue
                if tier in ONCE_PER_FIT:
                    done.add(tier)
                # An elision frees at least MIN_GAIN_SHARE of the context, as any compaction
                # must: one just big enough would come back at the next turn and move the
                # payload's prefix each time (the provider's prompt cache lost).
                excess = max(
                    measure.tokens - measure.budget.allowed,
                    int(measure.tokens * self.settings.compaction.min_gain_share),
                )
                # Once the payload fits, a background tier takes only a gain worth its marker.
                step = await self._step(
                    tier, task_uuid, fmt, thread_id, excess, relaxed and not fits
                )
                # Measure again after a change, and after any condense: a skipped one may have
                # waited for another (a background job's) that changed the context.
                if step.kind != "skipped" or tier == "condense":
                    break
            else:
                if fits:
                    return last
                if stalled:
                    stalled.clear()  # elision is spent: small truncations it is
                    continue
                if relaxed:
                    break  # every tier is spent: nothing more can change
                relaxed = True
                done.discard(MASK)
                continue
            if step.kind != "skipped":
                last = step
                over = measure.tokens - measure.budget.allowed
                small = step.tokens_before - step.tokens_after < over * STALLED_SHARE
                if tier == "elide" and small:
                    relaxed = True
                    done.discard(MASK)
                elif tier == "truncate" and small and relaxed:
                    # Truncations freeing a few tokens each (small messages behind a marker
                    # listing their facts) would spend the rounds: elision's turn, until it
                    # has nothing left to cut.
                    stalled.add(tier)
        measure = await self._measure(task_uuid, thread_id, fmt)
        if measure.tokens > measure.budget.allowed:
            raise TooLarge(
                f"the context has {measure.tokens} tokens and cannot be compacted under "
                f"{measure.budget.allowed}",
                code=ErrorCode.CONTEXT_OVER_BUDGET,
                details={"tokens": measure.tokens, "budget": measure.budget.allowed},
            )
        return last

    async def relieve(self, task_uuid: str, *, thread_id: int = 0) -> Outcome:
        """The background compaction after an append crossed the threshold: the task's tiers
        that keep every message (mask, condense), in its order, until the context is under
        ``relief_share`` of its threshold (room for several turns before the next one).
        Truncation and elision wait for a payload that needs them."""
        last = None
        measure = await self._measure(task_uuid, thread_id, None)
        for tier in measure.tiers:
            if tier not in BACKGROUND_TIERS:
                continue
            if tier == MASK:
                step = await self.mask(task_uuid, measure.fmt, thread_id=thread_id)
            else:
                step = await self.condense(task_uuid, fmt=measure.fmt, thread_id=thread_id)
            if step.kind != "skipped":
                last = step
                measure = await self._measure(task_uuid, thread_id, measure.fmt)
                if (
                    measure.tokens
                    < measure.budget.threshold * self.settings.compaction.relief_share
                ):
                    break
            elif last is None:
                last = step
        return last or Outcome("skipped", measure.tokens, measure.tokens, reason="no_tier")

    async def _step(
        self, tier: str, task_uuid: str, fmt: str, thread_id: int, excess: int, relaxed: bool
    ) -> Outcome:
        """One compaction of this tier ("skipped" when it changed nothing); ``relaxed``: any
        gain will do."""
        if tier == MASK:
            return await self.mask(task_uuid, fmt, thread_id=thread_id, explicit=relaxed)
        if tier == "condense":
            step = await self._condense_in_time(task_uuid, fmt, thread_id)
            return step or Outcome("skipped", 0, 0, reason="condense_failed")
        if tier == "truncate":
            return await self.truncate(task_uuid, fmt, thread_id=thread_id, explicit=relaxed)
        return await self.elide(task_uuid, excess, fmt, thread_id=thread_id, relaxed=relaxed)

    async def _measure(self, task_uuid: str, thread_id: int, fmt: str | None) -> "Measure":
        """The context's payload tokens, its budget, the format they are counted in and the
        task's tiers."""
        context = await self.store.head(task_uuid, thread_id)
        fmt = fmt or native_format(context.task.llm_provider)
        return Measure(
            tokens=self.budgets.context_tokens(context, context.head, fmt),
            budget=self.budgets.context_budget(context),
            fmt=fmt,
            tiers=self.budgets.compaction_options(context.task).tiers,
        )

    async def _condense_in_time(self, task_uuid: str, fmt: str, thread_id: int) -> Outcome | None:
        # A deadline that comes while the condense commits lets its file work end first
        # (finish_in_thread): the marker may then be in the context, which the fit measures
        # again after any condense.
        try:
            async with asyncio.timeout(self.settings.compaction.request_condense_timeout_s):
                return await self.condense(task_uuid, fmt=fmt, thread_id=thread_id)
        except (TimeoutError, CompactionFailed) as exc:
            log.warning(
                "task %s: condense failed before the deadline (%s); truncating", task_uuid, exc
            )
            return None

    async def dry_run(
        self, task_uuid: str, fmt: str | None = None, *, thread_id: int = 0
    ) -> dict[str, Any]:
        """What compaction would do next for a payload in ``fmt``, without doing it."""
        async with self.store.locked(task_uuid, thread_id) as locked:
            head = await self.store.recovered_head(locked)
            fmt = fmt or native_format(locked.task.llm_provider)
            tokens = self.budgets.context_tokens(locked, head, fmt)
            budget = self.budgets.context_budget(locked)
            if tokens < budget.threshold:  # the usual case: no need to index the context
                return {"action": "none"}
            _, entries = await self._index(locked, fmt)
            condense = self._plan_condense(locked, entries, tokens, fmt, explicit=False)
        if isinstance(condense, Span):
            return {"action": "condense", **_describe(condense, entries)}
        if tokens <= budget.allowed:
            return {"action": "none", "condense_skipped": condense.reason}
        truncate = plans.plan_truncate(entries)
        if isinstance(truncate, Span):
            return {
                "action": "truncate",
                "condense_skipped": condense.reason,
                **_describe(truncate, entries),
            }
        return {"action": "elide", "condense_skipped": condense.reason}

    async def rewind(
        self, task_uuid: str, to_seq: int, include_target: bool, *, thread_id: int = 0
    ) -> HeadState:
        """Rewind, as Roo Code does it: later history leaves the context, and so do later
        compactions. A kept message over the message cap whose elision the rewind drops is cut
        again before it answers."""
        async with (
            self._one_at_a_time(task_uuid, thread_id),
            self.store.locked(task_uuid, thread_id) as locked,
        ):
            self._require_running(locked)
            head = await self.store.recovered_head(locked)
            async with self.store.reading_messages(locked) as f:
                target = await asyncio.to_thread(record_at, f, to_seq, head.messages_bytes)
                if target is None or is_marker(target):
                    raise InvalidInput(
                        f"seq {to_seq} is not a message of this task",
                        code=ErrorCode.INVALID_REWIND_TARGET,
                        details={"to_seq": to_seq, "last_seq": head.last_seq},
                    )
                uncut = await asyncio.to_thread(
                    over_cap_shown_again,
                    f,
                    (to_seq, to_seq if include_target else to_seq - 1),
                    head.messages_bytes,
                    native_format(locked.task.llm_provider),
                    self.budgets.message_cap(locked),
                )
            marker: Marker = {
                "marker": "rewind",
                "to_seq": to_seq,
                "include_target": include_target,
                "timestamp": utc_timestamp(),
                "tokens": 0,
            }
            new_head, _ = await self.store.commit_marker(locked, head, marker, None, compactions=0)
            log.info("task %s thread %d: rewound to seq %d", task_uuid, thread_id, to_seq)
        if not await self._cap_each(task_uuid, thread_id, uncut):
            return new_head
        async with self.store.locked(task_uuid, thread_id) as locked:
            return await self.store.recovered_head(locked)

    # -- shared ---------------------------------------------------------------------------

    def _require_running(self, locked: LockedTask) -> None:
        if locked.task.status != "running":
            raise TaskNotWritable(locked.task.uuid, locked.task.status, "change")
        thread = locked.thread
        if thread is not None and thread.status != "active":
            raise ThreadNotActive(locked.task.uuid, thread.thread_id, thread.status)

    def _summary_record(
        self,
        kind: str,
        entries: list[Entry],
        span: Span,
        summary: str,
        fmt: str,
        cost: tuple[int, FormatTokens],
    ) -> SummaryRecord:
        """The summaries.jsonl record of a compaction over ``span``."""
        record = summary_fields(
            kind,
            span.hides(entries),
            span.tokens(entries),
            in_format(*cost, fmt),
            span.messages(entries),
            fmt,
        )
        record["summary"] = summary
        return record

    async def _commit(
        self,
        locked: LockedTask,
        head: HeadState,
        marker: Marker,
        summary: SummaryRecord,
        span: Span,
        entries: list[Entry],
        cost: tuple[int, FormatTokens],
    ) -> Outcome:
        before = self.budgets.context_tokens(locked, head, summary["counted_as"])
        new_head, record = await self.store.commit_marker(
            locked, head, _marker_over(marker, summary, span, entries, cost), summary, compactions=1
        )
        return self._committed(locked, before, new_head, record, summary, span.messages(entries))

    def _committed(
        self,
        locked: LockedTask,
        before: int,
        new_head: HeadState,
        record: Marker,
        summary: SummaryRecord,
        hidden: int,
    ) -> Outcome:
        after = self.budgets.context_tokens(locked, new_head, summary["counted_as"])
        log.info(
            "task %s thread %d: %s of %d messages, %d -> %d tokens",
            locked.task.uuid,
            locked.thread_id,
            summary["kind"],
            hidden,
            before,
            after,
        )
        return Outcome(
            summary["kind"],
            before,
            after,
            summary_id=record.get("summary_id"),
            hidden_messages=hidden,
            context_tokens=new_head.context_tokens,
        )


def _marker_over(
    marker: Marker,
    summary: SummaryRecord,
    span: Span,
    entries: list[Entry],
    cost: tuple[int, FormatTokens],
) -> Marker:
    """A compaction's marker with what it hides and what it costs."""
    return {
        **marker,
        "hides": list(span.hides(entries)),
        HIDDEN_MESSAGES: span.messages(entries),
        "timestamp": summary["timestamp"],
        "tokens": cost[0],
        "format_tokens": cost[1],
    }


def summary_fields(
    kind: str, seqs: tuple[int, int], original: int, tokens: int, messages: int, fmt: str
) -> SummaryRecord:
    """A summaries.jsonl record: what a compaction of ``kind`` did over ``seqs``, its token
    figures as ``fmt`` renders the context (``counted_as``)."""
    now = utc_timestamp()
    record: SummaryRecord = {
        "kind": kind,
        "start_seq": seqs[0],
        "end_seq": seqs[1],
        "summary": "",
        "original_tokens": original,
        "summary_tokens": tokens,
        "ratio": round(tokens / original, 4) if original else 0.0,
        "compressed_message_count": messages,
        "tokens_saved": original - tokens,
        "summarizer": None,
        "counted_as": fmt,
        "created_at": now,
        "timestamp": now,
    }
    took = compaction_ms()
    if took is not None:  # the summariser's call included; the files' final write not
        record["duration_ms"] = took
    return record


def _describe(span: Span, entries: list[Entry]) -> dict[str, Any]:
    return {
        "hides": list(span.hides(entries)),
        "messages": span.messages(entries),
        "tokens": span.tokens(entries),
    }


def _hidden_facts(f: BinaryIO, head: HeadState, hides: tuple[int, int]) -> HiddenFacts:
    return hidden_facts(span_records(f, head.messages_bytes, *hides))


def _read_entry(f: BinaryIO, entry: Entry, end: int) -> dict[str, Any]:
    record = record_at(f, entry.seq, end)
    assert record is not None
    return record
