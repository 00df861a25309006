"""Journals: a task's small append-only record files (tools.jsonl, planning.jsonl)."""
