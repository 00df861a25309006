"""The context service: durable, compacted LLM conversation context for coding agents."""
