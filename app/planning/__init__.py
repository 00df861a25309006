"""Planning history (planning.jsonl): plan entries, their items, and the plan pinned in every
payload."""
