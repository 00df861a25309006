"""What the LLM backend tests share with their fixtures (tests/llm/conftest.py): the backend
kinds, the API key the fake server expects, and the type of the ``make`` fixture."""

from collections.abc import Callable

from app.llm import HTTPBackend

KINDS = ("openai", "ollama", "anthropic")
API_KEY = "sk-test-5ecret-a1b2c3d4e5f6"

MakeBackend = Callable[..., HTTPBackend]
