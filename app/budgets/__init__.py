"""Budgets: how many counted tokens a context's payload may have, when compaction is due, and
what a payload costs. Pure arithmetic over the task row, its head and its thread tree."""
