"""What a process of the service's CPU pool holds: it must start quickly and stay small."""

# What such a process must not load: the web framework, the database, any LLM client.
HEAVY = ("fastapi", "starlette", "sqlalchemy", "httpx", "app.llm", "app.summaries.summarizer")

LOADED = "sorted(__import__('sys').modules)"  # eval'd in a process: the modules it holds


def heavy_modules(loaded: list[str]) -> list[str]:
    return [name for name in loaded if any(name == h or name.startswith(f"{h}.") for h in HEAVY)]
