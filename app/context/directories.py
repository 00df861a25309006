"""A task's directory as it is created (staged, then moved into place by the store), a new
thread's empty files, and the way cleared for a task whose directory a crash left behind.
Blocking: run in a worker thread."""

import logging
import shutil
from pathlib import Path
from typing import Any

import orjson

from app.context.files import ContextFiles, write_group
from app.context.records import ContextAccumulator, HeadState, StatsDelta, utc_timestamp
from app.formats.costs import TokenCounting
from app.storage.jsonl import fsync_dir, truncate, write_atomic
from app.storage.layout import CURRENT, MESSAGES, METADATA, ORPHANS, STATUS_DIRS, Layout

log = logging.getLogger(__name__)


def stage_files(
    directory: Path,
    metadata: dict[str, Any],
    initial: list[dict[str, Any]],
    counting: TokenCounting,
    token_counter: str,
    *,
    max_message_bytes: int,
    fsync: bool,
) -> tuple[HeadState, StatsDelta]:
    shutil.rmtree(directory, ignore_errors=True)  # a leftover of a crashed create
    directory.mkdir(parents=True)
    write_atomic(
        directory / METADATA,
        iter([orjson.dumps(metadata, option=orjson.OPT_INDENT_2)]),
        fsync=fsync,
    )
    accumulator = ContextAccumulator(HeadState())
    record_lines, current_lines = [], []
    if initial:
        for record, line in accumulator.prepare(
            initial,
            costs=counting.costs(token_counter),  # here: loading one blocks
            timestamp=utc_timestamp(),
            max_message_bytes=max_message_bytes,
        ):
            record_lines.append(line)
            current_lines.append(accumulator.admit(record, line))
    write_group(ContextFiles(directory), record_lines, current_lines, fsync=fsync)
    if fsync:
        fsync_dir(directory)
    return accumulator.head, accumulator.stats


def clear_the_way(layout: Layout, task_uuid: str) -> None:
    for location in dict.fromkeys(STATUS_DIRS.values()):
        if layout.location_dir(location, task_uuid).is_dir():
            target = layout.set_aside(task_uuid, location)
            log.warning(
                "task %s: %s/ held a directory without a task row; set aside as %s/%s",
                task_uuid,
                location,
                ORPHANS,
                target.name,
                extra={"task_uuid": task_uuid},
            )
    shutil.rmtree(layout.location_dir(".trash", task_uuid), ignore_errors=True)


def create_files(directory: Path, *, fsync: bool) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for path in (directory / MESSAGES, directory / CURRENT):
        path.touch()
        truncate(path, 0, fsync=fsync)
    if fsync:  # the new names, up to threads/ in the task's directory
        for path in (directory, directory.parent, directory.parent.parent):
            fsync_dir(path)
