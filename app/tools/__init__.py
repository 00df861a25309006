"""Tool execution records (tools.jsonl, seed 001 §3.6)."""
