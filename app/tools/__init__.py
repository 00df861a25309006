"""Tool execution records (tools.jsonl)."""
