"""Issue 4's acceptance: every corpus file, every format, within budget at 8k and 32k windows.

Each trajectory is posted in batches into a task counted exactly (o200k_base), with the
default extractive summariser; after every batch the payload is fetched in all four formats.
Each must be valid for its provider (JSON Schema and SDK types), keep tool pairing in the
provider's own terms, and its tokens, counted exactly from the payload served, must be within
the budget and match what the service said in X-Context-Tokens, less the documented
adjustments (tests/support/formats.py).
"""

from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from app.formats import FORMATS
from app.tokens.counters import TextCounter, counter_for
from tests.support.corpus import CORPUS_FILES, corpus_messages
from tests.support.formats import (
    adjustment,
    calls_left_open,
    unanswered_calls,
    validate_payload,
)
from tests.support.tasks import windowed_task

pytestmark = pytest.mark.database_agnostic

WINDOWS = {8000: 1000, 32000: 4000}  # context_length -> max_output_tokens
BATCH = 25
STABLE_TRIES = 20


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    return Settings(context_dir=context_dir, token_counter="auto", storage={"fsync": "never"})


@pytest.fixture(scope="module")
def counter() -> TextCounter:
    counter = counter_for("gpt-4o", "auto")
    assert counter.name == "o200k_base"
    return counter


async def check_formats(
    client: httpx.AsyncClient, uuid: str, counter: TextCounter, budget: int
) -> None:
    context, served_in = await served_with_context(client, uuid)
    for name, response in served_in.items():
        payload_format = FORMATS[name]
        served = int(response.headers["X-Context-Tokens"])
        assert int(response.headers["X-Context-Budget"]) == budget
        assert response.headers["X-Token-Counter"] == "o200k_base"
        assert served <= budget, (name, served, budget)
        payload = response.json()
        validate_payload(name, payload)
        exact = payload_format.payload_tokens(counter, payload)
        # The service counts the stored sum plus, for calls still open, what they may add;
        # the payload differs from the stored sum by the documented adjustments only.
        open_calls = [call["id"] for call in unanswered_calls(context) + calls_left_open(context)]
        bound = payload_format.open_calls_tokens(counter, open_calls)
        assert exact <= served, (name, exact, served)
        gaps = adjustment(name, counter, context, keep_ids=True)
        assert served - bound - gaps == exact, (name, exact, served)


async def served_with_context(
    client: httpx.AsyncClient, uuid: str
) -> tuple[list[dict[str, Any]], dict[str, httpx.Response]]:
    """The context (its OpenAI messages) and the payload in every format rendered from it:
    the context is fetched before and after the payloads, all again when a background
    compaction changed it between them."""
    for _ in range(STABLE_TRIES):
        before = await openai_messages(client, uuid)
        served_in = {}
        for name in FORMATS:
            response = await client.get(f"/tasks/{uuid}/request", params={"format": name})
            assert response.status_code == 200, (name, response.text[:2000])
            served_in[name] = response
        if await openai_messages(client, uuid) == before:
            return before, served_in
    raise AssertionError(f"the context of {uuid} kept changing")


async def openai_messages(client: httpx.AsyncClient, uuid: str) -> list[dict[str, Any]]:
    response = await client.get(f"/tasks/{uuid}/request", params={"format": "openai"})
    assert response.status_code == 200, response.text[:2000]
    messages: list[dict[str, Any]] = response.json()["messages"]
    return messages


@pytest.mark.parametrize("window", sorted(WINDOWS))
@pytest.mark.parametrize("name", CORPUS_FILES)
async def test_every_format_valid_and_within_budget(
    client: httpx.AsyncClient, counter: TextCounter, name: str, window: int
) -> None:
    messages = corpus_messages(name)
    uuid, budget = await windowed_task(client, window, WINDOWS[window])
    for start in range(0, len(messages), BATCH):
        batch = messages[start : start + BATCH]
        response = await client.post(f"/tasks/{uuid}/messages", json={"messages": batch})
        assert response.status_code == 201, response.text[:2000]
        await check_formats(client, uuid, counter, budget)
