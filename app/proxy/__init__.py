"""The OpenAI and Anthropic wire endpoints in front of the task contexts (docs/proxy.md)."""
