"""Heads acknowledged but not yet in the database: the write-behind of appends.

An append is committed when its records are in ``messages.jsonl`` (written and fsynced): the
files are the record of truth, and whatever lies past a context's database head is adopted by
the next access (:func:`app.context.files.recover`). So an append need not move the head row
in its own transaction. This process keeps the new head here, with the statistics and
idempotency keys of the records between the database head (``base``) and it, and the store
writes them in batches (:class:`app.context.write_behind.WriteBehind`).

Every write of a pending head is a compare-and-set on ``base``: if another process moved the
head meanwhile, it adopted these records from the files and counted them itself, so what is
pending here is dropped, never counted twice.
"""

from dataclasses import dataclass, field
from datetime import datetime

from app.context.records import HeadState, IdempotentResult, StatsDelta

ContextKey = tuple[str, int]  # (task uuid, thread id)


@dataclass
class PendingHead:
    base: HeadState  # the head as the database holds it
    head: HeadState  # the head as the files hold it, acknowledged
    stats: StatsDelta = field(default_factory=StatsDelta)
    keys: dict[str, IdempotentResult] = field(default_factory=dict)
    updated_at: datetime | None = None


class PendingHeads:
    """This process's pending heads, one per context at most."""

    def __init__(self) -> None:
        self._entries: dict[ContextKey, PendingHead] = {}
        # The counted tokens of the payload served last, per task, for the next reported usage.
        self.served: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._entries) + len(self.served)

    def view(self, key: ContextKey, committed: HeadState) -> PendingHead | None:
        """The pending head of a context whose database head is ``committed``; None (and the
        entry dropped) when the database moved without it: another process adopted it."""
        entry = self._entries.get(key)
        if entry is not None and entry.base != committed:
            del self._entries[key]
            return None
        return entry

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
        entry = self._entries.setdefault(key, PendingHead(base=base, head=base))
        entry.head = head
        entry.stats = entry.stats.add(stats)
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
