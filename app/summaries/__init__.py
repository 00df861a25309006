"""Summaries of a span of a context: the extractive digest (no LLM) or a chat backend's, sized
to a limit. Used by condensing, final summaries and thread chronicles."""
