"""Serving a large context from a real server costs little memory (SPEC §3.7): the payload in
every format, the context overview and the history are streamed from the files, not held
whole."""

import json
from dataclasses import dataclass

import httpx
import pytest

from app.formats import FORMATS
from tests.support.server import Server, ServerPool
from tests.support.tasks import task_body

pytestmark = [pytest.mark.e2e, pytest.mark.database_agnostic]

MiB = 1024 * 1024
TOOL_OUTPUTS = 100  # each about 1 MiB: a ~100 MiB context
WARM_UP_OUTPUTS = 4
PAGE_LIMIT = 2  # history records per page (each ~1 MiB)
GROWTH_BOUND = 0.25  # RSS may grow by at most this share of the bytes served
SAMPLE_EVERY = 256 * 1024  # bytes received between RSS samples


def _tool_output(i: int) -> str:
    """About 1 MiB of distinct, file-like text."""
    line = "    value = compute(value, step)  # keep going until the tests pass\n"
    lines = [f"{i:03d}:{k:05d} {line}" for k in range(MiB // (len(line) + 10))]
    return "".join(lines)


def _exchange(i: int) -> dict[str, list[dict[str, object]]]:
    call_id = f"call_{i}"
    arguments = json.dumps({"path": f"src/module_{i}.py"})
    return {
        "messages": [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "read_file", "arguments": arguments},
                    }
                ],
                "usage": {"prompt_tokens": 1000 + i, "completion_tokens": 20},
            },
            {"role": "tool", "tool_call_id": call_id, "content": _tool_output(i)},
        ]
    }


@dataclass
class Measured:
    received: int  # response bytes
    rss_before: int
    rss_peak: int  # highest RSS sampled while streaming (and right after)
    body: bytes = b""  # only when asked to keep it (small answers)

    @property
    def growth(self) -> int:
        return max(self.rss_peak - self.rss_before, 0)


async def _stream(
    http: httpx.AsyncClient,
    srv: Server,
    url: str,
    params: dict[str, int | str] | None = None,
    *,
    keep: bool = False,
) -> Measured:
    """GET url, counting the bytes as they arrive (kept only if asked) and sampling the
    server's RSS."""
    before = peak = srv.rss()
    received = next_sample = 0
    kept: list[bytes] = []
    async with http.stream("GET", url, params=params) as response:
        assert response.status_code == 200
        async for chunk in response.aiter_raw():
            received += len(chunk)
            if keep:
                kept.append(chunk)
            if received >= next_sample:
                peak = max(peak, srv.rss())
                next_sample = received + SAMPLE_EVERY
    peak = max(peak, srv.rss())
    return Measured(received, before, peak, b"".join(kept))


def _report(name: str, measured: Measured) -> None:
    print(
        f"{name}: {measured.received / MiB:.1f} MiB served; server RSS "
        f"{measured.rss_before / MiB:.1f} -> peak {measured.rss_peak / MiB:.1f} MiB "
        f"(+{measured.growth / MiB:.1f} MiB, {measured.growth / measured.received:.1%})"
    )


async def _build_task(http: httpx.AsyncClient, exchanges: int) -> str:
    body = task_body(system_prompt="You are a coding agent.", context_length=60_000_000)
    created = await http.post("/tasks", json=body)
    assert created.status_code == 201, created.text
    uuid: str = created.json()["uuid"]
    for i in range(exchanges):
        response = await http.post(f"/tasks/{uuid}/messages", json=_exchange(i))
        assert response.status_code == 201, response.text
    return uuid


async def _serve_all(http: httpx.AsyncClient, srv: Server, uuid: str) -> dict[str, Measured]:
    """Stream GET /request, GET /context and every GET /messages page of a task."""
    measured = {
        f"request?format={name}": await _stream(
            http, srv, f"/tasks/{uuid}/request", {"format": name}
        )
        for name in FORMATS
    }
    measured["context"] = await _stream(http, srv, f"/tasks/{uuid}/context")
    pages: list[Measured] = []
    after_seq: int | None = 0
    while after_seq is not None:
        params: dict[str, int | str] = {"after_seq": after_seq, "limit": PAGE_LIMIT}
        pages.append(await _stream(http, srv, f"/tasks/{uuid}/messages", params, keep=True))
        page = json.loads(pages[-1].body)
        assert len(page["messages"]) <= PAGE_LIMIT
        after_seq = page["next_after_seq"]
    measured["messages"] = Measured(
        sum(p.received for p in pages), pages[0].rss_before, max(p.rss_peak for p in pages)
    )
    return measured


async def test_large_context_is_served_in_bounded_memory(servers: ServerPool) -> None:
    """A ~100 MiB context (100 tool outputs of ~1 MiB) is served as GET /request in each
    format, GET /context and GET /messages pages while the server's RSS grows by well under a
    quarter of the bytes served. The process is fresh and warmed up on a ~4 MiB context of
    the same shape first: that takes the one-off costs that do not depend on the context's
    size (allocator arenas of the I/O threads, 1 MiB read buffers), so what is left is what
    size would cost."""
    srv = servers.start()
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=120) as http:
        warm_uuid = await _build_task(http, WARM_UP_OUTPUTS)
        uuid = await _build_task(http, TOOL_OUTPUTS)
    directory = servers.context_dir / "running" / uuid
    current_bytes = (directory / "current.jsonl").stat().st_size
    history_bytes = (directory / "messages.jsonl").stat().st_size
    assert current_bytes > TOOL_OUTPUTS * MiB

    srv.restart()
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=120) as http:
        baseline = srv.rss()
        for name, measured in (await _serve_all(http, srv, warm_uuid)).items():
            _report(f"warm-up, GET {name}", measured)
        warmed = srv.rss()
        served = await _serve_all(http, srv, uuid)
        for name, measured in served.items():
            _report(f"GET {name}", measured)
    peak = max(m.rss_peak for m in served.values())
    print(
        f"RSS: fresh {baseline / MiB:.1f} MiB, after warm-up {warmed / MiB:.1f} MiB, "
        f"peak serving the large context {peak / MiB:.1f} MiB"
    )

    for name in FORMATS:  # the whole context was served
        assert served[f"request?format={name}"].received >= current_bytes * 0.95, name
    assert served["context"].received >= current_bytes
    assert served["messages"].received >= history_bytes
    for name, measured in served.items():
        assert measured.growth < GROWTH_BOUND * measured.received, name
    assert peak - warmed < GROWTH_BOUND * current_bytes
