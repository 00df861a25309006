"""Calibration end to end: an LLM that counts 30% more than we do keeps its real window.

The task runs a model whose tokenizer the service cannot run (Llama behind Ollama). The agent
reports each call's usage.prompt_tokens as 1.3 x what the service counted for the payload it
served. From the first report on, every payload must shrink so that 1.3 x its counted tokens
stays within the real budget, window * 0.9 - max_output.
"""

import math
from typing import Any

import httpx
import pytest

from tests.support.tasks import task_body

WINDOW = 8000
MAX_OUTPUT = 1000
REAL_BUDGET = int(WINDOW * 0.9) - MAX_OUTPUT
RATIO = 1.3
FILLER = "The build log shows a failing assertion in parser_test.py line 212 again. "


async def fetch(client: httpx.AsyncClient, uuid: str) -> tuple[int, int, dict[str, Any]]:
    response = await client.get(f"/tasks/{uuid}/request", params={"format": "ollama"})
    assert response.status_code == 200, response.text[:500]
    headers = response.headers
    return int(headers["X-Context-Tokens"]), int(headers["X-Context-Budget"]), response.json()


async def test_reported_usage_30_percent_above_the_count_shrinks_the_payloads(
    client: httpx.AsyncClient,
) -> None:
    body = task_body(
        llm_provider="ollama",
        model="llama3.1:8b",
        context_length=WINDOW,
        max_output_tokens=MAX_OUTPUT,
        system_prompt="You are a coding agent.",
    )
    response = await client.post("/tasks", json=body)
    assert response.status_code == 201, response.text
    uuid = response.json()["uuid"]
    turn = 0

    async def exchange(report: int | None) -> None:
        nonlocal turn
        turn += 1
        assistant: dict[str, Any] = {"role": "assistant", "content": f"Step {turn}: looking."}
        if report is not None:
            assistant["usage"] = {"prompt_tokens": report, "completion_tokens": 20}
        messages = [assistant, {"role": "user", "content": FILLER * 12}]
        response = await client.post(f"/tasks/{uuid}/messages", json={"messages": messages})
        assert response.status_code == 201, response.text

    await client.post(f"/tasks/{uuid}/messages", json={"role": "user", "content": "Fix it."})
    # Uncalibrated, the service fills its counted budget: 1.3 x that overflows the real one.
    tokens, budget, _ = await fetch(client, uuid)
    assert budget == REAL_BUDGET
    while tokens * RATIO <= REAL_BUDGET:
        await exchange(report=None)
        tokens, budget, _ = await fetch(client, uuid)
    assert tokens <= budget
    overflowing = tokens

    # The LLM reports what it really saw; from now on every payload fits the real window.
    report = math.ceil(tokens * RATIO)
    for _ in range(12):
        await exchange(report)
        tokens, budget, payload = await fetch(client, uuid)
        # ceil() makes each reported ratio a hair above 1.3: the factor follows it.
        assert math.floor(REAL_BUDGET / RATIO) - 5 <= budget <= math.floor(REAL_BUDGET / RATIO)
        assert tokens * RATIO <= REAL_BUDGET, (tokens, budget)
        assert payload["options"]["num_ctx"] == WINDOW
        report = math.ceil(tokens * RATIO)
    assert tokens < overflowing

    context = (await client.get(f"/tasks/{uuid}/context", params={"format": "ollama"})).json()
    assert context["calibration"]["factor"] == pytest.approx(RATIO, abs=0.005)
    assert context["calibration"]["samples"] == 12
    assert context["budget"] == budget
    assert context["token_counter"] == "o200k_base"
    task = (await client.get(f"/tasks/{uuid}")).json()
    assert task["statistics"]["llm_call_count"] == 12


async def test_a_report_without_a_served_payload_does_not_calibrate(
    client: httpx.AsyncClient,
) -> None:
    response = await client.post("/tasks", json=task_body(model="llama3.1:8b"))
    uuid = response.json()["uuid"]
    messages = [
        {"role": "user", "content": "Fix it."},
        {"role": "assistant", "content": "Done.", "usage": {"prompt_tokens": 90_000}},
    ]
    response = await client.post(f"/tasks/{uuid}/messages", json={"messages": messages})
    assert response.status_code == 201, response.text
    context = (await client.get(f"/tasks/{uuid}/context")).json()
    assert context["calibration"] == {
        "factor": 1.0,
        "samples": 0,
        "estimated_real_tokens": context["tokens"],
    }
