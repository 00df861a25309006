"""Compaction: the budget policy (the engine itself arrives with the compaction issue)."""
