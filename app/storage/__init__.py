"""Per-task files on disk: layout, JSONL logs, locks, and which failed writes mean a full or
unwritable disk."""
