"""Planning history (planning.jsonl, seed 000 §11.5)."""
