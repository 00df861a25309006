"""Where a task's files live.

CONTEXT_DIR/
  running/{uuid}/  paused/{uuid}/  completed/{uuid}/   (completed also holds failed tasks)
    threads/{id}/    a thread's own context files (its messages, current, summaries)
  .staging/{uuid}/   a task being created, before its row is committed
  .trash/{uuid}/     a task being deleted, before its row is gone
  .orphans/{uuid}.{location}.{time}/  a directory the service found without a row where a new
                     task of that uuid had to go: set aside intact, never removed by the service
  .locks/{uuid}.lock per-task lock files (stable paths: task directories move), removed with
                     their tasks
"""

import functools
import os
import uuid as uuid_module
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from app.storage.jsonl import fsync_dir

STATUS_DIRS = {
    "running": "running",
    "paused": "paused",
    "completed": "completed",
    "failed": "completed",
}
LOCATIONS = ("running", "paused", "completed", ".staging", ".trash")
ORPHANS = ".orphans"

METADATA = "metadata.json"
MESSAGES = "messages.jsonl"
CURRENT = "current.jsonl"
TOOLS = "tools.jsonl"
PLANNING = "planning.jsonl"
SUMMARIES = "summaries.jsonl"
FINAL_SUMMARY = "final_summary.txt"
THREADS = "threads"


def context_dir(task_dir: Path, thread_id: int) -> Path:
    """Where a context's files live: the task's directory for the root (thread 0)."""
    return task_dir / THREADS / str(int(thread_id)) if thread_id else task_dir


@functools.lru_cache(maxsize=4096)
def canonical_uuid(value: str) -> str:
    """The one spelling of a task uuid used in paths and rows; ValueError for anything else.
    Remembered for the tasks in use: an append asks for it several times."""
    return str(uuid_module.UUID(value))


@functools.lru_cache(maxsize=4096)
def _below(root: Path, folder: str, name: str) -> Path:
    """``root / folder / name``, remembered for the tasks in use (a join of paths costs an
    append a few microseconds each time)."""
    return root / folder / name


@dataclass(frozen=True)
class Layout:
    root: Path

    def ensure(self) -> None:
        for name in (*LOCATIONS, ORPHANS, ".locks"):
            (self.root / name).mkdir(parents=True, exist_ok=True)

    def location_dir(self, location: str, task_uuid: str) -> Path:
        # Paths are only ever built from a canonical uuid: nothing else reaches the filesystem.
        return _below(self.root, location, canonical_uuid(task_uuid))

    def task_dir(self, status: str, task_uuid: str) -> Path:
        return self.location_dir(STATUS_DIRS[status], task_uuid)

    def lock_path(self, task_uuid: str) -> Path:
        return _below(self.root, ".locks", f"{canonical_uuid(task_uuid)}.lock")

    def global_lock_path(self) -> Path:
        return self.root / ".locks" / "startup.lock"

    def find(self, task_uuid: str) -> list[str]:
        """Every location holding a directory for this task (normally exactly one)."""
        return [loc for loc in LOCATIONS if self.location_dir(loc, task_uuid).is_dir()]

    def move(self, task_uuid: str, source: str, target: str) -> None:
        os.replace(self.location_dir(source, task_uuid), self.location_dir(target, task_uuid))
        fsync_dir(self.root / source)
        fsync_dir(self.root / target)

    def set_aside(self, task_uuid: str, location: str) -> Path:
        """Move the task's directory in ``location`` to .orphans/ under a name no other has
        (uuid, location, time to the microsecond); returns where it went."""
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        target = self.root / ORPHANS / f"{canonical_uuid(task_uuid)}.{location}.{stamp}"
        os.rename(self.location_dir(location, task_uuid), target)  # fails rather than replace
        fsync_dir(self.root / location)
        fsync_dir(self.root / ORPHANS)
        return target
