"""A task's files as the service left them under CONTEXT_DIR."""

import json
from pathlib import Path
from typing import Any

from app.storage.layout import LOCATIONS


def locations(context_dir: Path, task_uuid: str) -> list[str]:
    """Every location (running, paused, completed, .staging, .trash) holding the task's dir."""
    return [loc for loc in LOCATIONS if (context_dir / loc / task_uuid).is_dir()]


def paths_naming(context_dir: Path, task_uuid: str) -> list[Path]:
    """Every file or directory under CONTEXT_DIR whose name mentions the task's uuid."""
    return sorted(context_dir.rglob(f"*{task_uuid}*"))


def task_dir(context_dir: Path, task_uuid: str) -> Path:
    """The one directory of a task; fails if it is missing or in several places."""
    found = locations(context_dir, task_uuid)
    assert len(found) == 1, found
    return context_dir / found[0] / task_uuid


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every line of a JSONL file, parsed."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def snapshot_dir(root: Path) -> dict[str, bytes]:
    """Every file under root with its bytes (for 'nothing was written' checks)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.startswith("tasks.db") and p.suffix != ".lock"
    }


def directories(root: Path) -> set[str]:
    """Every directory under root (snapshot_dir sees files only, not an empty new directory)."""
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_dir()}
