"""Compaction: the tiers that keep a context within its budget (mask, condense, truncate,
elide), each a marker plus a summaries.jsonl record, and the trigger that queues a condense."""
