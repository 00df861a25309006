"""kill -9 under mixed load (issue 7): workers die again and again while agents append, compact,
read payloads and stop/resume their tasks; afterwards nothing acknowledged is lost.

Two servers share one CONTEXT_DIR and database: A runs two uvicorn workers (uvicorn replaces one
killed with SIGKILL), B one process (killed as a whole, then started again). Clients retry a
request whose answer was lost on the other server, the same request with the same
Idempotency-Key, until one answers; only a 201 counts as acknowledged.

And the job runner's side of a kill: a job whose worker died is run again by a live worker once
its lease runs out, without any restart.
"""

import asyncio
import itertools
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import psutil
import pytest

from tests.fakes.llm_server import FakeLLM, running_fake_llm
from tests.support.load import Answer, Failover, Ledger, message_body, settled_jobs
from tests.support.schemas import validate_openai_request
from tests.support.server import (
    Server,
    ServerPool,
    assert_seqs_contiguous,
    client_limits,
    jsonl_records,
    task_dirs,
)
from tests.support.tasks import SYSTEM_PROMPT, all_messages, task_body

pytestmark = pytest.mark.e2e

TASKS = 8
AGENTS_PER_TASK = 2  # the first of them also stops and resumes the task
KILLS = 6  # alternately one worker of A and the whole of B
KILL_EVERY_S = 1.0
LEASE_S = 2.0
LLM_DELAY_S = 0.3  # a condense takes this long: kills catch jobs in the middle
SETTLE_S = 30.0  # every job reaches a terminal status within this, servers up
REQUEST_DEADLINE_S = 45.0  # a request unanswered by every server for this long fails
RECOVERY_S = 30.0
PICKUP_S = 5.0  # a job whose lease ran out is running again within this, its summary quick
FILLER = "the build fails in the parser module after the last refactor; " * 2
MARKERS = frozenset({"condense", "truncation", "elision"})


def server_env(fake: FakeLLM) -> dict[str, str]:
    return {
        # kill -9 ends a process, not the kernel: what it wrote is in the page cache and
        # survives it, so fsync changes nothing here (it guards against power loss) but costs
        # the 2 cores time that the load needs.
        "FSYNC": "never",
        "JOB_POLL_S": "0.05",
        "JOB_LEASE_S": str(LEASE_S),  # a killed worker's job is free again soon after
        "JOB_BACKOFF_S": "0.2",
        # Each kill may cut a job's attempt, and on a loaded machine a lease this short can run
        # out under a live worker: a job must outlast them all to show a real failure.
        "JOB_MAX_ATTEMPTS": str(KILLS + 1),
        # The characters/4 counter: no encoding to load, so a killed worker is back sooner.
        "TOKEN_COUNTER": "heuristic",
        # Condensing through a slow (fake) LLM: jobs last long enough to be cut by a kill.
        "LLM_BACKEND": "openai",
        "LLM_BASE_URL": fake.base_url,
        "LLM_MODEL": "fake-model",
    }


@dataclass
class Task:
    index: int
    uuid: str
    ledger: Ledger = field(default_factory=Ledger)
    compress_summaries: list[int] = field(default_factory=list)  # acknowledged condenses
    pausing: bool = False  # its owner is between stop and resume
    stops: int = 0  # stops its owner began


@dataclass(frozen=True)
class Kill:
    target: str  # "A": one of its workers; "B": the whole process
    acked_before: int  # acknowledged messages (all tasks) at the moment of the kill


@dataclass
class Load:
    failover: Failover
    tasks: list[Task]
    done: asyncio.Event = field(default_factory=asyncio.Event)
    kills: list[Kill] = field(default_factory=list)
    while_paused: int = 0  # refusals by a paused task (409, or 413 for its payload)
    moves: int = 0  # stop+resume pairs
    payloads: int = 0  # valid GET /request answers

    @property
    def acked(self) -> int:
        return sum(len(t.ledger.acked) for t in self.tasks)

    async def until_running(self, task: Task, answer: Answer) -> bool:
        """Whether the answer is the 409 of a task its owner paused: wait a little then."""
        response = answer.response
        if response.status_code != 409 or response.json()["error"]["code"] != "task_not_writable":
            return False
        assert response.json()["error"]["details"]["status"] == "paused", response.text
        self.while_paused += 1
        await asyncio.sleep(0.05)
        return True

    async def append(self, task: Task, agent: int, step: int) -> None:
        size = (1, 1, 2, 3)[step % 4]
        contents = [
            f"task {task.index} agent {agent} step {step}.{k}: {FILLER}" for k in range(size)
        ]
        path = f"/tasks/{task.uuid}/messages"
        headers = {"Idempotency-Key": f"agent-{agent}-step-{step}"}
        delivered = False
        while True:
            answer = await self.failover.send(
                "POST", path, start=agent, json=message_body(contents), headers=headers
            )
            delivered |= answer.maybe_delivered
            if not await self.until_running(task, answer):
                break
        response = answer.response
        assert response.status_code == 201, response.text
        replayed = response.headers.get("Idempotent-Replayed") == "true"
        assert delivered or not replayed, "a replay of a request that never reached a server"
        self.failover.faults.replays += replayed
        task.ledger.ack(response.json()["seqs"], contents)

    async def compress(self, task: Task, agent: int) -> None:
        answer = await self.failover.send(
            "POST", f"/tasks/{task.uuid}/compress", start=agent, json={}
        )
        if await self.until_running(task, answer):
            return
        assert answer.response.status_code == 200, answer.response.text
        result = answer.response.json()
        if result["kind"] == "condense":
            task.compress_summaries.append(result["summary_id"])

    async def read_request(self, task: Task, agent: int) -> None:
        before = (task.pausing, task.stops)
        answer = await self.failover.send("GET", f"/tasks/{task.uuid}/request", start=agent)
        response = answer.response
        if response.status_code == 413 and before != (False, task.stops):
            # The task was paused at some point meanwhile: a paused task is not compacted, so
            # over its budget its payload is refused.
            assert response.json()["error"]["code"] == "context_over_budget", response.text
            self.while_paused += 1
            return
        assert response.status_code == 200, response.text
        validate_openai_request(response.json())
        assert int(response.headers["X-Context-Tokens"]) <= int(
            response.headers["X-Context-Budget"]
        )
        self.payloads += 1

    async def move(self, task: Task, action: str, target: str) -> None:
        answer = await self.failover.send("POST", f"/tasks/{task.uuid}/{action}")
        response = answer.response
        if response.status_code == 409 and answer.maybe_delivered:
            # The attempt whose answer was lost did it.
            assert response.json()["error"]["details"]["status"] == target, response.text
            return
        assert response.status_code == 200, response.text
        assert response.json()["status"] == target

    async def agent(self, task: Task, agent: int) -> None:
        owner = agent % AGENTS_PER_TASK == 0
        for step in itertools.count():
            if self.done.is_set():
                return
            if owner and step % 12 == 11:
                task.pausing = True
                task.stops += 1
                await self.move(task, "stop", "paused")
                await asyncio.sleep(0.1)
                await self.move(task, "resume", "running")
                task.pausing = False
                self.moves += 1
            elif step % 16 == 15:
                await self.compress(task, agent)
            elif step % 7 == 6:
                await self.read_request(task, agent)
            else:
                await self.append(task, agent, step)


# -- the killer ---------------------------------------------------------------------------------


def _startups(srv: Server) -> int:
    return srv.log_text().count("Application startup complete")


async def _worker_replaced(srv: Server, victim: int, startups: int) -> None:
    """Wait until uvicorn has replaced the killed worker by a new process that serves."""
    deadline = time.monotonic() + RECOVERY_S
    while True:
        try:
            pids = srv.worker_pids()
        except psutil.Error:  # the dead worker, not reaped yet
            pids = []
        if len(pids) == srv.workers and victim not in pids and _startups(srv) > startups:
            return
        assert time.monotonic() < deadline, f"worker {victim} was not replaced:\n{srv.log_tail()}"
        await asyncio.sleep(0.1)


async def _kill_worker(load: Load, srv: Server, n: int) -> None:
    """SIGKILL one worker of a --workers server; uvicorn starts another (a new pid)."""
    victim = srv.worker_pids()[n % srv.workers]
    startups = _startups(srv)
    os.kill(victim, signal.SIGKILL)
    load.kills.append(Kill("A", load.acked))
    await _worker_replaced(srv, victim, startups)


async def _kill_server(load: Load, srv: Server) -> None:
    """SIGKILL a whole server, then start it again on the same CONTEXT_DIR."""
    victim = srv.pid
    await asyncio.to_thread(srv.kill)
    load.kills.append(Kill("B", load.acked))
    await asyncio.to_thread(srv.start)
    assert srv.pid != victim


async def _killer(load: Load, a: Server, b: Server) -> None:
    """SIGKILL one worker of A or the whole of B about every KILL_EVERY_S, in turn; each is
    back (A's worker replaced by uvicorn, B restarted) KILL_EVERY_S before it is killed again,
    and A always has a worker left, so the load never stops."""

    async def kill_a() -> None:
        for n in range(KILLS // 2):
            await asyncio.sleep(KILL_EVERY_S)
            await _kill_worker(load, a, n)

    async def kill_b() -> None:
        await asyncio.sleep(KILL_EVERY_S / 2)
        for _ in range(KILLS - KILLS // 2):
            await asyncio.sleep(KILL_EVERY_S)
            await _kill_server(load, b)

    await asyncio.gather(kill_a(), kill_b())


# -- the checks afterwards ----------------------------------------------------------------------


def _condensed(job: dict[str, Any]) -> bool:
    return bool(job["result"].get("kind") == "condense")


async def _settle_and_check(
    failover: Failover, http: httpx.AsyncClient, task: Task, pool: ServerPool
) -> list[dict[str, Any]]:
    """Every job of the task reaches a terminal status (none stuck); every acknowledged write
    is where its answer said, once; the rest are compaction markers, each with its summary
    in force; the task reads cleanly. Returns its jobs."""
    jobs = await settled_jobs(failover, task.uuid, SETTLE_S)
    history = await all_messages(http, task.uuid, limit=250)
    assert_seqs_contiguous(history)
    stored = {r["seq"]: r["content"] for r in history}
    lost = {seq: c for seq, c in task.ledger.acked.items() if stored.get(seq) != c}
    assert lost == {}, f"acknowledged writes lost or moved: {lost}"
    markers = {r["seq"]: r for r in history if r.get("marker") in MARKERS}
    written = [r["content"] for r in history if r["seq"] not in markers]
    assert len(set(written)) == len(written), "a message was stored twice"
    unacked = [r for r in history[1:] if r["seq"] not in task.ledger.acked]
    # Keyed retries made every append answered: what no answer claims is a compaction's.
    assert [r["seq"] for r in unacked] == sorted(markers), unacked[:3]
    assert history[0]["content"] == SYSTEM_PROMPT

    # Summaries: the ones in force are those whose marker made it (a kill between writing a
    # summary record and its marker leaves one that never was).
    response = await http.get(f"/tasks/{task.uuid}/summaries", params={"limit": 1000})
    assert response.status_code == 200, response.text
    summaries = response.json()["summaries"]
    assert [s["id"] for s in summaries] == list(range(1, len(summaries) + 1))
    in_force = {
        s["id"]: s
        for s in summaries
        if markers.get(s["marker_seq"], {}).get("summary_id") == s["id"]
    }
    assert sorted(in_force) == sorted(m["summary_id"] for m in markers.values())
    assert all(in_force[m["summary_id"]]["kind"] == m["marker"] for m in markers.values())

    condenses = [job for job in jobs if job["kind"] == "condense"]
    unfinished = [
        {key: job.get(key) for key in ("id", "status", "attempts", "error", "result")}
        for job in condenses
        if job["status"] not in ("succeeded", "skipped")
    ]
    assert unfinished == [], unfinished
    odd = [job for job in condenses if not 1 <= job["attempts"] <= job["max_attempts"]]
    assert odd == [], odd
    condensed = [job for job in condenses if _condensed(job)]
    claimed = [job["result"]["summary_id"] for job in condensed] + task.compress_summaries
    assert len(set(claimed)) == len(claimed), "two answers claim one summary"
    assert set(claimed) <= set(in_force), "an acknowledged condense is not in force"
    assert all(in_force[i]["kind"] == "condense" for i in claimed)

    response = await http.get(f"/tasks/{task.uuid}")
    assert response.status_code == 200, response.text
    view = response.json()
    assert view["status"] == "running"
    assert view["context"]["last_seq"] == len(history)

    directory = pool.context_dir / "running" / task.uuid
    on_disk = jsonl_records(directory / "messages.jsonl")
    assert_seqs_contiguous(on_disk)
    assert [r["content"] for r in on_disk] == [r["content"] for r in history]

    # Last: serving the payload may compact the context once more (a marker after the history).
    response = await http.get(f"/tasks/{task.uuid}/request")
    assert response.status_code == 200, response.text
    validate_openai_request(response.json())
    return jobs


async def _complete(failover: Failover, task: Task, pool: ServerPool) -> None:
    answer = await failover.send("POST", f"/tasks/{task.uuid}/complete")
    assert answer.response.status_code == 200, answer.response.text
    assert answer.response.json()["status"] == "completed"
    assert task_dirs(pool.context_dir, task.uuid) == ["completed"]
    refused = await failover.send(
        "POST", f"/tasks/{task.uuid}/messages", json={"role": "user", "content": "late"}
    )
    assert refused.response.status_code == 409, refused.response.text
    jobs = await settled_jobs(failover, task.uuid, SETTLE_S)
    finals = [job for job in jobs if job["kind"] == "final_summary"]
    assert [job["status"] for job in finals] == ["succeeded"], finals


async def test_kill_9_under_mixed_load_loses_nothing(servers: ServerPool) -> None:
    """8 tasks with a small window, 16 agents appending (keyed singles and batches),
    compressing, reading payloads and stopping/resuming, over two servers while one worker of
    A or the whole of B is SIGKILLed about every second (6 kills). Afterwards: every acknowledged
    write is there once under its seq, seqs run 1..N, every task reads cleanly (history,
    payload, files on disk), every job reached a terminal status, each condense is in force
    once, and every task completes."""
    with running_fake_llm() as fake:
        fake.set("ok", text="Summary: the agent is fixing the parser build.", delay=LLM_DELAY_S)
        env = server_env(fake)
        a = servers.start(workers=2, env=env)
        b = servers.start(env=env)
        limits = client_limits(64)
        async with httpx.AsyncClient(timeout=30, limits=limits) as http:
            failover = Failover(http, [a, b], REQUEST_DEADLINE_S)
            tasks = []
            for i in range(TASKS):
                body = task_body(
                    system_prompt=SYSTEM_PROMPT,
                    context_length=1800,
                    max_output_tokens=200,
                    task_key={**task_body()["task_key"], "task_id": f"fault-{i}"},
                )
                created = await failover.send("POST", "/tasks", json=body)
                assert created.response.status_code == 201, created.response.text
                tasks.append(Task(i, created.response.json()["uuid"]))
                tasks[-1].ledger.ack([1], [SYSTEM_PROMPT])
            load = Load(failover, tasks)
            started = time.monotonic()
            agents = [
                asyncio.create_task(load.agent(task, t * AGENTS_PER_TASK + k))
                for t, task in enumerate(tasks)
                for k in range(AGENTS_PER_TASK)
            ]
            try:
                await _killer(load, a, b)
                await asyncio.sleep(KILL_EVERY_S)  # some load with every server back
                load.done.set()
                await asyncio.gather(*agents)
            finally:
                for agent in agents:
                    agent.cancel()
            loaded = time.monotonic() - started

            # The kills happened mid-load and cut requests; the load went on between them.
            assert len(load.kills) == KILLS
            for target in "AB":
                acked_at_kills = [k.acked_before for k in load.kills if k.target == target]
                assert acked_at_kills == sorted(set(acked_at_kills)), acked_at_kills
            assert load.acked > max(k.acked_before for k in load.kills)
            assert failover.faults.cut > 0, "no kill cut a request short"
            assert load.moves > 0
            assert load.payloads > 0

            async with httpx.AsyncClient(base_url=a.base_url, timeout=30) as reader:
                checked = await asyncio.gather(
                    *(_settle_and_check(failover, reader, task, servers) for task in tasks)
                )
            jobs = [job for task_jobs in checked for job in task_jobs]
            condensed = [job for job in jobs if job["kind"] == "condense" and _condensed(job)]
            assert condensed, "the load made the service condense"
            await asyncio.gather(*(_complete(failover, task, servers) for task in tasks))
    print(
        f"{loaded:.1f}s of load: {load.acked} messages acknowledged on {TASKS} tasks, "
        f"{len(load.kills)} kills, {failover.faults}, {load.while_paused} refusals while paused, "
        f"{load.moves} stop/resume, {load.payloads} payloads, {len(condensed)} condensing jobs, "
        f"{sum(job['attempts'] > 1 for job in jobs)} jobs run more than once"
    )


async def _condense_job(
    http: httpx.AsyncClient, uuid: str, status: str, timeout_s: float
) -> dict[str, Any]:
    """The task's one condense job, once it has this status (within ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        response = await http.get("/jobs", params={"task_uuid": uuid})
        assert response.status_code == 200, response.text
        jobs = [job for job in response.json()["jobs"] if job["kind"] == "condense"]
        assert len(jobs) <= 1, jobs
        if jobs and jobs[0]["status"] == status:
            found: dict[str, Any] = jobs[0]
            return found
        assert time.monotonic() < deadline, f"no condense job {status} in time: {jobs}"
        await asyncio.sleep(0.1)


async def test_a_job_cut_by_kill_9_is_picked_up_by_a_live_worker(servers: ServerPool) -> None:
    """Issue 7: a worker killed mid-job has its job picked up by another. B claims a condense
    job and is SIGKILLed while the summariser works on it; nothing restarts, but A's two
    workers run on: once the job's lease has run out one of them runs it again (attempt 2)
    and the condense is in force, once."""
    with running_fake_llm() as fake:
        fake.set("ok", text="Summary: the parser build.", delay=RECOVERY_S)  # B's run hangs
        env = server_env(fake)
        b = servers.start(env=env)  # the only job runner until the job is claimed
        async with httpx.AsyncClient(base_url=b.base_url, timeout=30) as http:
            body = task_body(
                system_prompt=SYSTEM_PROMPT, context_length=1800, max_output_tokens=200
            )
            created = await http.post("/tasks", json=body)
            assert created.status_code == 201, created.text
            uuid: str = created.json()["uuid"]
            for n in itertools.count():  # until an append crosses the threshold
                assert n < 100, "no append queued a condense"
                response = await http.post(
                    f"/tasks/{uuid}/messages", json=message_body([f"step {n}: {FILLER}"])
                )
                assert response.status_code == 201, response.text
                if response.json()["compaction_scheduled"]:
                    break
            running = await _condense_job(http, uuid, "running", RECOVERY_S)
            deadline = time.monotonic() + RECOVERY_S
            while not fake.requests:  # B's runner is with the summariser
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
        a = servers.start(workers=2, env=env)  # started while B holds the job: nothing expired
        b.kill()
        fake.set("ok", delay=0.0)  # the next run's summary comes at once

        async with httpx.AsyncClient(base_url=a.base_url, timeout=30) as http:
            # The lease runs out LEASE_S after B's last renewal; a poll later a worker has it.
            job = await _condense_job(http, uuid, "succeeded", LEASE_S + PICKUP_S)
            assert (job["id"], job["attempts"]) == (running["id"], 2)
            assert job["result"]["kind"] == "condense", job
            history = await all_messages(http, uuid)
            assert_seqs_contiguous(history)
            markers = [r for r in history if r.get("marker") == "condense"]
            assert [m["summary_id"] for m in markers] == [job["result"]["summary_id"]]
        assert len(fake.requests) == 2  # B's cut-short call and A's
