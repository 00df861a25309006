"""Shared by the observability tests: the real app over ASGI, and /metrics parsed."""

from collections.abc import Mapping
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import running_app as running_app
from tests.conftest import task_body

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(client: httpx.AsyncClient) -> Samples:
    """Every sample of GET /metrics, by name and labels, parsed by prometheus-client."""
    response = await client.get("/metrics")
    assert response.status_code == 200, response.text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value; 0 when the series does not exist (yet)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def series(samples: Samples, name: str) -> list[Mapping[str, str]]:
    """The label sets of every sample called ``name``."""
    return [dict(labels) for sample_name, labels in samples if sample_name == name]


async def new_task(client: httpx.AsyncClient, **overrides: Any) -> str:
    body = task_body(system_prompt="You are a coding agent.", **overrides)
    response = await client.post("/tasks", json=body)
    assert response.status_code == 201, response.text
    uuid: str = response.json()["uuid"]
    return uuid


def turns(count: int, size: int = 200) -> list[dict[str, str]]:
    """Alternating user/assistant messages, each about a file."""
    return [
        {
            "role": "user" if n % 2 == 0 else "assistant",
            "content": f"turn {n} about src/mod_{n}.py " + "w" * size,
        }
        for n in range(count)
    ]
