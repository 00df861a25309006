"""Proxy: the latency the service adds to an agent's LLM call when the agent's base URL points
at it (POST /v1/chat/completions, POST /v1/messages), against calling the same LLM directly.

The LLM is the test suite's fake server (tests/fakes/llm_server.py) in a process of its own,
answering at once, so what is measured is the proxy's own work: finding the task, matching the
resent history with the stored one and appending what is new (durably: fsync on), assembling
the payload, relaying the answer and recording it. One agent runs a conversation of ``TURNS``
turns, each resending its whole history plus a new ~2 KB user message; every turn is sent
twice, the same body, once straight to the fake and once through the service, side by side.
Each wire is measured streaming and not, with a window large enough that nothing is compacted
(128,000 tokens) and a small one where the proxied payloads are compacted (8,000).
First byte: the answer's first body bytes; total: the whole answer read.
"""

import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.harness import REPO, Report, Service, Table, percentile

TURNS = 60
WINDOWS = (128_000, 8_000)
WIRES = ("openai", "anthropic")
PATHS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}
MODELS = {"openai": "gpt-4o", "anthropic": "claude-sonnet-5-5"}
NOTE = "the parser test fails after the refactor of the tokenizer; see tests/test_parse.py. "
USER_TEXT = NOTE * 24  # ~2 KB

NODELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
REPLY = "Noted; the next step is to read tests/test_parse.py."
# The fake LLM in its own process (not this one's GIL): prints its URL, stops when stdin closes.
FAKE_LLM = f"""
import sys
from tests.fakes.llm_server import running_fake_llm
with running_fake_llm() as fake:
    fake.text = {REPLY!r}
    print(fake.base_url, flush=True)
    sys.stdin.read()
"""


@dataclass
class Timing:
    first_byte_ms: float
    total_ms: float


class FakeLLMProcess:
    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", FAKE_LLM],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.base_url = self.process.stdout.readline().strip()
        if not self.base_url:
            raise RuntimeError("the fake LLM did not start")

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(30)


def timed(client: httpx.Client, url: str, body: bytes, headers: dict[str, str]) -> Timing:
    started = time.perf_counter()
    first = 0.0
    with client.stream("POST", url, content=body, headers=headers) as response:
        for chunk in response.iter_bytes():
            first = first or time.perf_counter() - started
            assert chunk
        response.raise_for_status()
    return Timing(first * 1000, (time.perf_counter() - started) * 1000)


def conversation(
    client: httpx.Client,
    urls: tuple[str, str],
    wire: str,
    stream: bool,
    window: int,
    turns: int,
) -> tuple[list[Timing], list[Timing], int]:
    """One agent's conversation: each turn straight to the fake, then through the service;
    with the compactions the service made of its task."""
    task = str(uuid.uuid4())
    proxy_headers = {
        "content-type": "application/json",
        "x-context-task": task,
        "x-context-window": str(window),
        "anthropic-version": "2023-06-01",
    }
    direct_headers = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
    messages: list[dict[str, Any]] = []
    direct: list[Timing] = []
    proxied: list[Timing] = []
    direct_url, service_url = (url + PATHS[wire] for url in urls)
    for turn in range(turns):
        messages.append({"role": "user", "content": f"Turn {turn}. {USER_TEXT}"})
        body: dict[str, Any] = {"model": MODELS[wire], "max_tokens": 512, "messages": messages}
        if wire == "openai":
            body["messages"] = [{"role": "system", "content": "You are a coding agent."}, *messages]
        else:
            body["system"] = "You are a coding agent."
        if stream:
            body["stream"] = True
        raw = orjson.dumps(body)
        direct.append(timed(client, direct_url, raw, direct_headers))
        proxied.append(timed(client, service_url, raw, proxy_headers))
        messages.append({"role": "assistant", "content": REPLY})  # what the fake answered
    task_row = client.get(f"{urls[1]}/tasks/{task}").raise_for_status().json()
    return direct, proxied, task_row["statistics"]["compression_count"]


def run(quick: bool, scratch: Path) -> Report:
    turns = 3 if quick else TURNS
    fake = FakeLLMProcess()
    backends = {
        "gpt": {"kind": "openai", "base_url": fake.base_url, "model": MODELS["openai"]},
        "claude": {"kind": "anthropic", "base_url": fake.base_url, "model": MODELS["anthropic"]},
    }
    env = {
        "LLM_BACKENDS": orjson.dumps(backends).decode(),
        "PROXY__OPENAI_BACKEND": "gpt",
        "PROXY__ANTHROPIC_BACKEND": "claude",
    }
    rows: list[list[Any]] = []
    data: dict[str, Any] = {"turns": turns, "cases": []}
    try:
        with (
            Service(scratch / "contexts", **env) as service,
            # TCP_NODELAY: a request's headers and body, written apart, are not held by Nagle's
            # algorithm waiting for a delayed ACK (40 ms steps that would swamp the figures).
            httpx.Client(
                timeout=120, transport=httpx.HTTPTransport(socket_options=NODELAY)
            ) as client,
        ):
            for wire in WIRES:
                for stream in (False, True):
                    for window in WINDOWS:
                        direct, proxied, compactions = conversation(
                            client, (fake.base_url, service.url), wire, stream, window, turns
                        )
                        rows.append(row(wire, stream, window, compactions, direct, proxied))
                        data["cases"].append(
                            {
                                "wire": wire,
                                "stream": stream,
                                "window": window,
                                "compactions": compactions,
                                "direct": [vars(t) for t in direct],
                                "proxied": [vars(t) for t in proxied],
                            }
                        )
    finally:
        fake.close()
    table = Table(
        f"proxy: one agent's {turns}-turn conversation, each turn straight to the LLM "
        "and through the service (ms)",
        [
            "wire",
            "stream",
            "window",
            "compactions",
            "direct 1st byte p50",
            "proxy 1st byte p50",
            "added 1st byte p50",
            "added 1st byte p99",
            "direct total p50",
            "proxy total p50",
            "added total p50",
            "added total p99",
        ],
        rows,
        [
            "added: proxy minus direct, turn by turn (the same request body), then its p50/p99.",
            "The LLM is a fake in its own process that answers at once: the figures are the",
            "proxy's own work (match, durable append, payload, relay, durable record); fsync on,",
            "exact token counting. compactions: the proxied task's, by the end of its turns.",
        ],
    )
    return Report([table], data)


def row(
    wire: str,
    stream: bool,
    window: int,
    compactions: int,
    direct: list[Timing],
    proxied: list[Timing],
) -> list[Any]:
    def p(values: list[float], q: float) -> float:
        return round(percentile(values, q), 2)

    added_first = [b.first_byte_ms - a.first_byte_ms for a, b in zip(direct, proxied, strict=True)]
    added_total = [b.total_ms - a.total_ms for a, b in zip(direct, proxied, strict=True)]
    return [
        wire,
        "yes" if stream else "no",
        f"{window:,}",
        compactions,
        p([t.first_byte_ms for t in direct], 50),
        p([t.first_byte_ms for t in proxied], 50),
        p(added_first, 50),
        p(added_first, 99),
        p([t.total_ms for t in direct], 50),
        p([t.total_ms for t in proxied], 50),
        p(added_total, 50),
        p(added_total, 99),
    ]
