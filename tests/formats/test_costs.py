"""Each task is counted by the counter of its model's family, chosen once at creation."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from uuid import uuid4

import httpx
import pytest
from asgi_lifespan import LifespanManager

from app.config import Settings
from app.formats import FORMATS
from app.formats.costs import TokenCounting
from app.main import create_app
from app.tokens.counters import counter_for
from tests.support.tasks import task_body

TEXT = "Special tokens are text here: <|endoftext|> and <|endofprompt|>. Fix src/app.py!"


@pytest.mark.parametrize(
    ("model", "counter"),
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-5-mini", "o200k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("llama3.1:8b", "o200k_base"),
        ("claude-sonnet-4-5", "o200k_base"),
    ],
)
async def test_the_models_family_picks_the_counter(
    client: httpx.AsyncClient, model: str, counter: str
) -> None:
    response = await client.post("/tasks", json=task_body(model=model))
    assert response.status_code == 201, response.text
    task = response.json()
    assert task["context"]["token_counter"] == counter
    assert task["context"]["calibration"] == 1.0
    message = {"role": "user", "content": TEXT}
    response = await client.post(f"/tasks/{task['uuid']}/messages", json=message)
    assert response.status_code == 201, response.text
    exact = FORMATS["openai"].message_tokens(counter_for(model, counter), message)
    assert response.json()["tokens"] == [exact]
    response = await client.get(f"/tasks/{task['uuid']}/request")
    assert response.headers["X-Token-Counter"] == counter


@asynccontextmanager
async def service(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with LifespanManager(
        create_app(settings), startup_timeout=60, shutdown_timeout=60
    ) as manager:
        transport = httpx.ASGITransport(app=manager.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client


async def test_a_task_keeps_its_counter_when_the_setting_changes(context_dir: Path) -> None:
    """Stored counts must agree with each other: the counter is the task's, not the server's."""
    heuristic = Settings(context_dir=context_dir, token_counter="heuristic")
    async with service(heuristic) as client:
        uuid = (await client.post("/tasks", json=task_body())).json()["uuid"]
    message = {"role": "user", "content": TEXT}
    async with service(heuristic.model_copy(update={"token_counter": "auto"})) as client:
        response = await client.post(f"/tasks/{uuid}/messages", json=message)
        assert response.status_code == 201, response.text
        context = (await client.get(f"/tasks/{uuid}/context")).json()
        created = await client.post("/tasks", json=task_body(uuid=str(uuid4())))
    assert context["token_counter"] == "heuristic"
    heuristic_count = FORMATS["openai"].message_tokens(counter_for("", "heuristic"), message)
    assert context["messages"][0]["tokens"] == heuristic_count
    assert created.json()["context"]["token_counter"] == "o200k_base"


def test_a_counter_is_at_hand_once_its_costs_were_asked_for() -> None:
    """What lets an append count its tokens on the event loop: loading a counter blocks."""
    counting = TokenCounting("auto")
    assert not counting.loaded("cl100k_base")
    counting.costs("cl100k_base")
    assert counting.loaded("cl100k_base")
    assert not counting.loaded("o200k_base")
