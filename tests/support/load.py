"""Load against real servers that are being killed: requests that fail over to a live server,
and a ledger of what the servers acknowledged.

A request whose answer is lost (the connection broke, or a dying server answered 502/503/504)
is sent again, the same request with the same headers and body, to the next server, until one
answers. With an Idempotency-Key that makes every append happen exactly once, whether or not the
lost attempt had been written.
"""

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.support.server import Server

RETRIED_STATUSES = frozenset({502, 503, 504})
BACKOFF_S = 0.05
MAX_BACKOFF_S = 0.5


@dataclass
class Faults:
    """What the clients went through."""

    refused: int = 0  # connections refused: the server was down
    cut: int = 0  # requests whose connection broke before the answer: maybe delivered
    retried_statuses: int = 0  # 502/503/504 answers
    replays: int = 0  # keyed retries answered as replays of a write that had survived


@dataclass(frozen=True)
class Answer:
    response: httpx.Response
    # An earlier attempt may have reached a server (its answer was lost): a keyed retry of it
    # may be a replay. A refused connection never reached one.
    maybe_delivered: bool


class Failover:
    """Sends each request to the servers in turn, starting at ``start``, until one answers;
    a server's address is read at each attempt (a restart may move it to another port)."""

    def __init__(self, http: httpx.AsyncClient, servers: list[Server], deadline_s: float) -> None:
        self.http = http
        self.servers = servers
        self.deadline_s = deadline_s
        self.faults = Faults()

    async def send(self, method: str, path: str, *, start: int = 0, **kwargs: Any) -> Answer:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.deadline_s
        maybe_delivered = False
        for attempt in itertools.count():
            target = self.servers[(start + attempt) % len(self.servers)]
            try:
                response = await self.http.request(method, target.base_url + path, **kwargs)
            except httpx.ConnectError:
                self.faults.refused += 1
            except httpx.TransportError:
                self.faults.cut += 1
                maybe_delivered = True
            else:
                if response.status_code not in RETRIED_STATUSES:
                    return Answer(response, maybe_delivered)
                self.faults.retried_statuses += 1
            assert loop.time() < deadline, f"no server answered {method} {path} in time"
            await asyncio.sleep(min(BACKOFF_S * attempt, MAX_BACKOFF_S))
        raise AssertionError("unreachable")


@dataclass
class Ledger:
    """One task's acknowledged writes: seq -> content, from 201 answers only."""

    acked: dict[int, str] = field(default_factory=dict)

    def ack(self, seqs: list[int], contents: list[str]) -> None:
        assert len(seqs) == len(contents)
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "a batch's seqs are consecutive"
        for seq, content in zip(seqs, contents, strict=True):
            assert self.acked.setdefault(seq, content) == content, f"seq {seq} acked twice"


def message_body(contents: list[str]) -> dict[str, Any]:
    """A single message, or a batch: users and assistants taking turns."""
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": c}
        for i, c in enumerate(contents)
    ]
    return messages[0] if len(messages) == 1 else {"messages": messages}


TERMINAL = frozenset({"succeeded", "failed", "skipped"})


async def settled_jobs(failover: Failover, uuid: str, timeout_s: float) -> list[dict[str, Any]]:
    """The task's jobs once every one is in a terminal status; fails after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        answer = await failover.send("GET", "/jobs", params={"task_uuid": uuid, "limit": 1000})
        assert answer.response.status_code == 200, answer.response.text
        jobs: list[dict[str, Any]] = answer.response.json()["jobs"]
        pending = [job for job in jobs if job["status"] not in TERMINAL]
        if not pending:
            return jobs
        assert loop.time() < deadline, f"jobs stuck after {timeout_s}s: {pending}"
        await asyncio.sleep(0.1)
