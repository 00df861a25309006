"""Payloads: the effective context rendered as an LLM request, streamed from the files."""
