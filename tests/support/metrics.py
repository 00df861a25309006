"""GET /metrics parsed, and its samples looked up."""

from collections.abc import Mapping

import httpx
from prometheus_client.parser import text_string_to_metric_families

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


async def file_work_runs(client: httpx.AsyncClient, work: str) -> tuple[float, float]:
    """How many runs of ``work`` ("append", "read") went to the event loop and to worker
    threads so far (the metric ``context_file_work_total``)."""
    samples = await scrape(client)
    name = "context_file_work_total"
    return (
        value(samples, name, work=work, where="event_loop"),
        value(samples, name, work=work, where="worker_thread"),
    )
