"""Heads acknowledged but not yet in the database: the write-behind of appends.

An append is committed when its records are in ``messages.jsonl`` (written and fsynced): the
files are the record of truth, and whatever lies past a context's database head is adopted by
the next access (:func:`app.context.files.recover`). So an append need not move the head row
in its own transaction. This process keeps the new head here, with the statistics and
idempotency keys of the records between the database head (``base``) and it, and the store
writes them in batches (:class:`app.context.write_behind.WriteBehind`).

Every write of a pending head is a compare-and-set on ``base``: if another process moved the
head meanwhile, it adopted records from the files and counted them itself. It adopted what the
files held when it took the task's lock: the records of this process's first group commits
since ``base``, up to one of their heads (``steps``). Those are dropped, never counted twice;
the steps after that head are still this process's to write. A head none of the steps reaches
drops them all.
"""

from dataclasses import dataclass, field
from datetime import datetime

from app.context.records import HeadState, IdempotentResult, StatsDelta

ContextKey = tuple[str, int]  # (task uuid, thread id)


# The most group commits a pending head tells apart; past it the oldest two are merged (a
# round that keeps failing must not let them grow without end). Should another process adopt
# the records up to the head that merging took out, no step ends there: all are dropped, as
# when the database's head is none of theirs, and the records past it are counted by the next
# access that reads the task's files.
MAX_STEPS = 64


@dataclass(frozen=True)
class PendingStep:
    """One group commit's records: the head after them, their statistics and keys."""

    head: HeadState
    stats: StatsDelta
    keys: tuple[IdempotentResult, ...] = ()


@dataclass
class PendingHead:
    base: HeadState  # the head as the database holds it
    steps: list[PendingStep] = field(default_factory=list)  # the group commits since, in order
    keys: dict[str, IdempotentResult] = field(default_factory=dict)  # theirs, by key
    updated_at: datetime | None = None

    @property
    def head(self) -> HeadState:
        """The head as the files hold it, acknowledged."""
        return self.steps[-1].head if self.steps else self.base

    @property
    def stats(self) -> StatsDelta:
        total = StatsDelta()
        for step in self.steps:
            total = total.add(step.stats)
        return total

    def over(self, committed: tuple[int, int, int]) -> "PendingHead | None":
        """What is pending over the database's head (its :attr:`HeadState.extent`): all of it
        when that is the base; the steps after it when another process adopted the first
        ones; None when it adopted them all, or the database's head is none of theirs."""
        if committed == self.base.extent:
            return self
        for index, step in enumerate(self.steps[:-1]):
            if step.head.extent == committed:
                rest = self.steps[index + 1 :]
                keys = {result.key: result for step in rest for result in step.keys}
                return PendingHead(step.head, rest, keys, self.updated_at)
        return None


class PendingHeads:
    """This process's pending heads, one per context at most."""

    def __init__(self) -> None:
        self._entries: dict[ContextKey, PendingHead] = {}
        # The counted tokens of the payload served last, per task, for the next reported usage.
        self.served: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._entries) + len(self.served)

    def view(self, key: ContextKey, committed: HeadState) -> PendingHead | None:
        """The pending head of a context whose database head is ``committed``: what is left
        of it over that head (:meth:`PendingHead.over`), kept; None (and the entry dropped)
        when nothing is."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        left = entry.over(committed.extent)
        if left is None:
            del self._entries[key]
        else:
            self._entries[key] = left
        return left

    def over(self, key: ContextKey, committed: HeadState) -> PendingHead | None:
        """:meth:`view`, changing nothing: for a database head read without the task's lock,
        which may be older than what is pending here."""
        entry = self._entries.get(key)
        return None if entry is None else entry.over(committed.extent)

    def add(
        self,
        key: ContextKey,
        base: HeadState,
        head: HeadState,
        stats: StatsDelta,
        keys: list[IdempotentResult],
        now: datetime,
    ) -> None:
        """Records written after ``base`` (the pending head, or the database's if none) up to
        ``head``."""
        entry = self._entries.setdefault(key, PendingHead(base=base))
        entry.steps.append(PendingStep(head, stats, tuple(keys)))
        if len(entry.steps) > MAX_STEPS:
            first, second = entry.steps[:2]
            merged = PendingStep(
                second.head, first.stats.add(second.stats), first.keys + second.keys
            )
            entry.steps[:2] = [merged]
        entry.keys.update((k.key, k) for k in keys)
        entry.updated_at = now

    def get(self, key: ContextKey) -> PendingHead | None:
        """The pending head of a context whose view was taken under the task lock still held."""
        return self._entries.get(key)

    def take(self, key: ContextKey) -> PendingHead | None:
        return self._entries.pop(key, None)

    def of_tasks(self, task_uuids: set[str]) -> list[tuple[ContextKey, PendingHead]]:
        """The pending heads of these tasks' contexts."""
        return [(key, e) for key, e in self._entries.items() if key[0] in task_uuids]

    def take_tasks(self, task_uuids: set[str]) -> None:
        """Drop what is pending of these tasks."""
        for key, _ in self.of_tasks(task_uuids):
            del self._entries[key]
        for task_uuid in task_uuids:
            self.served.pop(task_uuid, None)

    def has_threads(self, task_uuid: str) -> bool:
        """Whether a thread of the task (not its root) has a pending head."""
        return any(task == task_uuid and thread for task, thread in self._entries)

    def tasks(self) -> set[str]:
        return {task for task, _ in self._entries} | set(self.served)
