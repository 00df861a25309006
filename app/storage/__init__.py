"""Per-task files on disk: layout, JSONL logs, locks, crash reconciliation."""
