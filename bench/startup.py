"""Benchmark: time to ready with 0, 1,000 and 10,000 tasks on disk (quick: 0 and 100).

Time to ready is from spawning ``context-service serve`` until GET /readyz answers 200
(``Service.ready_after_s``). A start imports the app, then its lifespan (app/lifespan.py)
migrates the database, reconciles every task directory against the tasks table
(app/context/reconcile.py: one listing of each status directory, one SELECT of every task),
loads the token encodings and starts the job runner and the periodic cleanup. Each start also
records the server's CPU seconds at ready (less sensitive than wall time to a busy machine),
its RSS just after ready, and, from its log's timestamps, how long the imports took (spawn
until uvicorn's "Started server process") and the lifespan ("Waiting for application startup"
until "context service ready").

The store is built the way agents build it, through the HTTP API of a first service with 32
requests in flight: POST /tasks with a system prompt, one batch of 4 messages (user, an
assistant tool call with usage, its tool result, an assistant answer with usage), then the
mix of a real store: 80% completed, 15% failed, 2% paused, 3% left running. That service runs
with FSYNC=never to keep this short; every measured start uses the defaults (FSYNC=always).
Completing or failing a task queues a final-summary job: the population waits until no job is
queued or running, so no measured start runs leftover jobs.

Only a seed of tasks goes through HTTP: a task costs the server some 40 ms of CPU (three
requests and its final summary), so 10,000 of them would take minutes, not the module's budget.
The rest are copies of the seed tasks made while the service is down: each directory copied
under a new uuid (and task_id) rewritten in its files, and every row that names the task
(tasks, context_heads, jobs, ...) copied in SQLite with the new uuid. A start reads no task's
files, only directory names and rows, so the copies cost it exactly what HTTP-made tasks would.

Cases: an empty store (a new CONTEXT_DIR, then restarts of a migrated one), the store at two
sizes (their ratio shows whether a start grows linearly), and a crash state: a few hundred
completed tasks' directories moved back to running/ while the service is down, which
reconciliation moves back (two directory fsyncs each) before ready.
"""

import asyncio
import os
import shutil
import sqlite3
import statistics
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench.harness import Report, Service, Table, async_http_client, http_client, mib, task_body
from bench.stats_queries import STATUS_WEIGHTS

IN_FLIGHT = 32  # concurrent agents creating tasks
SETTLE_TIMEOUT_S = 600  # for the final summaries of the tasks created
POPULATION_FSYNC = "never"  # the creating service only; measured starts keep "always"
STATUS_FOLDERS = ("running", "paused", "completed")
# Log lines (text format) that bound a start's phases.
STARTED = "Started server process"
LIFESPAN_START = "Waiting for application startup"
LIFESPAN_END = "context service ready"


@dataclass(frozen=True)
class Sizes:
    seed: int  # tasks created over HTTP
    steps: tuple[int, ...]  # tasks on disk at each measured size
    starts: int  # measured starts per case
    new_starts: int  # starts on a new CONTEXT_DIR (a reference; each costs a fresh directory)
    misplaced: int  # directories put back in running/ for the crash case


def sizes(quick: bool) -> Sizes:
    if quick:
        return Sizes(seed=20, steps=(100,), starts=1, new_starts=1, misplaced=10)
    return Sizes(seed=200, steps=(1_000, 10_000), starts=3, new_starts=1, misplaced=300)


# --- building the store over HTTP ---------------------------------------------------------


def target_status(index: int) -> str:
    """Deterministic mix: task i gets the status of its slot among every 100."""
    slot = index % 100
    for status, share in STATUS_WEIGHTS.items():  # hundredths, as in the stats benchmark
        if slot < share:
            return status
        slot -= share
    raise AssertionError("the mix adds up to 100")


def messages(index: int) -> list[dict[str, Any]]:
    """One agent turn: a request, a tool call and its result, an answer (with LLM usage)."""
    call = f"call_{index}"
    return [
        {"role": "user", "content": f"Issue #{index}: the parser drops the last line of a.py."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call,
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
                }
            ],
            "usage": {"prompt_tokens": 1_200, "completion_tokens": 40},
        },
        {"role": "tool", "tool_call_id": call, "content": "def parse(text):\n" * 20},
        {
            "role": "assistant",
            "content": "The loop stops one line early; fixed with range(len(lines)).",
            "usage": {"prompt_tokens": 1_500, "completion_tokens": 60},
        },
    ]


async def make_task(client: httpx.AsyncClient, index: int) -> None:
    response = await client.post("/tasks", json=task_body(128_000))
    response.raise_for_status()
    task = response.json()["uuid"]
    batch = {"messages": messages(index)}
    (await client.post(f"/tasks/{task}/messages", json=batch)).raise_for_status()
    status = target_status(index)
    if status == "completed":
        response = await client.post(f"/tasks/{task}/complete")
    elif status == "failed":
        response = await client.post(f"/tasks/{task}/fail", json={"error_message": "tests fail"})
    elif status == "paused":
        response = await client.post(f"/tasks/{task}/stop")
    response.raise_for_status()


async def create_tasks(service: Service, count: int) -> None:
    async with async_http_client(service, IN_FLIGHT) as client:

        async def agent(lane: int) -> None:
            for index in range(lane, count, IN_FLIGHT):
                await make_task(client, index)

        await asyncio.gather(*(agent(lane) for lane in range(IN_FLIGHT)))


def jobs_pending(client: httpx.Client) -> bool:
    for status in ("queued", "running"):
        response = client.get("/jobs", params={"status": status, "limit": 1})
        response.raise_for_status()
        if response.json()["jobs"]:
            return True
    return False


def settle(service: Service) -> float:
    """Wait until the final-summary jobs are done; returns how long that took."""
    started = time.perf_counter()
    with http_client(service, 30) as client:
        while jobs_pending(client):
            if time.perf_counter() - started > SETTLE_TIMEOUT_S:
                raise RuntimeError(f"jobs still pending after {SETTLE_TIMEOUT_S} s")
            time.sleep(0.2)
    return time.perf_counter() - started


@dataclass
class Seed:
    tasks: int
    create_s: float
    server_cpu_s: float  # the server's CPU during creation (final summaries partly included)
    settle_s: float


def build_seed(context_dir: Path, count: int) -> Seed:
    with Service(context_dir, FSYNC=POPULATION_FSYNC) as service:
        cpu_before, started = service.cpu_seconds(), time.perf_counter()
        asyncio.run(create_tasks(service, count))
        create_s = time.perf_counter() - started
        server_cpu_s = service.cpu_seconds() - cpu_before
        settle_s = settle(service)
    return Seed(count, create_s, server_cpu_s, settle_s)


# --- copying seed tasks, service down -----------------------------------------------------


@dataclass(frozen=True)
class SeedTask:
    uuid: str
    task_id: str
    folder: str


def seed_tasks(db: sqlite3.Connection) -> list[SeedTask]:
    rows = db.execute("SELECT uuid, task_id, status FROM tasks ORDER BY created_at").fetchall()
    folder = {"failed": "completed"}  # failed tasks live in completed/ (app/storage/layout.py)
    return [SeedTask(u, t, folder.get(s, s)) for u, t, s in rows]


def copy_directory(context_dir: Path, seed: SeedTask, new_uuid: str, new_task_id: str) -> None:
    """The seed's directory under the new uuid, its files naming the new uuid and task_id."""
    swaps = ((seed.uuid.encode(), new_uuid.encode()), (seed.task_id.encode(), new_task_id.encode()))

    def copy(source: str, target: str) -> None:
        data = Path(source).read_bytes()
        for old, new in swaps:
            data = data.replace(old, new)
        Path(target).write_bytes(data)

    folder = context_dir / seed.folder
    shutil.copytree(folder / seed.uuid, folder / new_uuid, copy_function=copy)


def copy_rows(db: sqlite3.Connection, mapping: list[tuple[str, str, str]]) -> None:
    """Every row naming a seed task, copied for each (seed uuid, new uuid, new task_id)."""
    db.execute("CREATE TEMP TABLE clone_map (seed TEXT, new TEXT, task_id TEXT)")
    db.executemany("INSERT INTO clone_map VALUES (?, ?, ?)", mapping)
    tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    for table in tables:
        columns = db.execute(f"PRAGMA table_info({table})").fetchall()
        names = [c[1] for c in columns]
        key = "uuid" if table == "tasks" else "task_uuid"
        if key not in names:
            continue
        # A lone INTEGER primary key (jobs.id) is the row's own: SQLite gives the copy a new one.
        keys = [c for c in columns if c[5]]
        rowid = keys[0][1] if len(keys) == 1 and keys[0][2].upper() == "INTEGER" else None
        kept = [n for n in names if n != rowid]
        swapped = {key: "m.new", "task_id": "m.task_id"} if table == "tasks" else {key: "m.new"}
        select = ", ".join(swapped.get(n, f't."{n}"') for n in kept)
        quoted = ", ".join(f'"{n}"' for n in kept)
        db.execute(
            f"INSERT INTO {table} ({quoted}) SELECT {select} "
            f"FROM {table} t JOIN clone_map m ON t.{key} = m.seed"
        )
    db.execute("DROP TABLE clone_map")


def replicate(context_dir: Path, seeds: list[SeedTask], have: int, target: int) -> float:
    """Copies of the seed tasks, round robin, until ``target`` tasks exist; returns seconds."""
    started = time.perf_counter()
    mapping = []
    for n in range(have, target):
        seed = seeds[n % len(seeds)]
        new_uuid, new_task_id = str(uuid.uuid4()), str(uuid.uuid4())
        copy_directory(context_dir, seed, new_uuid, new_task_id)
        mapping.append((seed.uuid, new_uuid, new_task_id))
    with sqlite3.connect(context_dir / "tasks.db") as db:  # commits on leaving
        copy_rows(db, mapping)
    db.close()
    return time.perf_counter() - started


# --- starts ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Start:
    ready_s: float
    cpu_s: float
    rss: int
    imports_s: float | None
    lifespan_s: float | None


def log_times(log: Path) -> dict[str, float]:
    """When each phase-bounding line was logged (epoch seconds, text log format)."""
    marks: dict[str, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        for mark in (STARTED, LIFESPAN_START, LIFESPAN_END):
            if mark in line and mark not in marks:
                stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
                marks[mark] = stamp.timestamp()  # local time, like time.time()
    return marks


def start_once(context_dir: Path) -> Start:
    spawned = time.time()
    with Service(context_dir) as service:
        cpu, rss = service.cpu_seconds(), service.rss()
        ready = service.ready_after_s
    marks = log_times(service.log_path)
    imports = marks[STARTED] - spawned if STARTED in marks else None
    lifespan = None
    if LIFESPAN_START in marks and LIFESPAN_END in marks:
        lifespan = marks[LIFESPAN_END] - marks[LIFESPAN_START]
    return Start(ready, cpu, rss, imports, lifespan)


def misplace(context_dir: Path, count: int) -> list[str]:
    """A crash state: completed tasks whose directory is back in running/ (as if the process
    died between moving the directory and committing the row, then the move was undone)."""
    chosen = sorted(p.name for p in (context_dir / "completed").iterdir())[:count]
    for name in chosen:
        os.replace(context_dir / "completed" / name, context_dir / "running" / name)
    return chosen


def check_reconciled(context_dir: Path, moved: list[str]) -> None:
    left = [name for name in moved if not (context_dir / "completed" / name).is_dir()]
    if left:
        raise RuntimeError(f"reconciliation left {len(left)} directories out of completed/")


def directories(context_dir: Path) -> int:
    return sum(len(os.listdir(context_dir / folder)) for folder in STATUS_FOLDERS)


@dataclass
class Case:
    name: str
    tasks: int
    starts: list[Start]
    misplaced: int = 0  # directories reconciliation has to move back

    def row(self) -> list[Any]:
        ready = [s.ready_s for s in self.starts]
        return [
            self.name,
            self.tasks,
            len(ready),
            statistics.median(ready),
            max(ready),
            statistics.median(s.cpu_s for s in self.starts),
            _median_or_dash([s.imports_s for s in self.starts]),
            _median_or_dash([s.lifespan_s for s in self.starts]),
            mib(max(s.rss for s in self.starts)),
        ]

    def data(self) -> dict[str, Any]:
        return {
            "case": self.name,
            "misplaced": self.misplaced,
            "tasks": self.tasks,
            "ready_s": [round(s.ready_s, 3) for s in self.starts],
            "cpu_s": [round(s.cpu_s, 3) for s in self.starts],
            "imports_s": [_rounded(s.imports_s) for s in self.starts],
            "lifespan_s": [_rounded(s.lifespan_s) for s in self.starts],
            "rss_bytes": [s.rss for s in self.starts],
        }


def _median_or_dash(values: list[float | None]) -> float | str:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else "-"


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


@dataclass
class Stores:
    """A CONTEXT_DIR per size (0 first), and how the populated ones were made."""

    dirs: dict[int, Path]
    seed: Seed
    copied: int
    copy_s: float


def build_stores(scratch: Path, plan: Sizes, empty: Path) -> Stores:
    """The seed over HTTP in the first size's store, copies up to each size; a larger store
    starts as a copy of the one before (``shutil.copytree``, not timed). ``empty`` is a
    migrated CONTEXT_DIR without tasks."""
    dirs = {0: empty}
    previous: Path | None = None
    seed: Seed | None = None
    seeds: list[SeedTask] = []
    have, copy_s = 0, 0.0
    for target in plan.steps:
        context_dir = scratch / f"store-{target}" / "contexts"
        if previous is None:
            seed = build_seed(context_dir, plan.seed)
            with sqlite3.connect(context_dir / "tasks.db") as db:
                seeds = seed_tasks(db)
            db.close()
            have = len(seeds)
        else:
            shutil.copytree(previous, context_dir)
        copy_s += replicate(context_dir, seeds, have, target)
        if directories(context_dir) != target:
            raise RuntimeError(f"expected {target} task directories in {context_dir}")
        dirs[target], previous, have = context_dir, context_dir, target
    assert seed is not None
    return Stores(dirs, seed, have - seed.tasks, copy_s)


def crash_start(context_dir: Path, count: int) -> Start:
    moved = misplace(context_dir, count)
    start = start_once(context_dir)
    check_reconciled(context_dir, moved)
    return start


def new_dirs(scratch: Path, count: int) -> list[Path]:
    return [scratch / f"new-{i}" / "contexts" for i in range(count)]


def measure(plan: Sizes, stores: Stores, fresh: list[Start]) -> list[Case]:
    """Every restart case once per round, rounds in a row: a machine that gets busier or
    quieter during the run weighs on every case alike, so their ratios hold."""
    restarts: dict[int, list[Start]] = {size: [] for size in stores.dirs}
    crashed: list[Start] = []
    largest = max(stores.dirs)
    for _ in range(plan.starts):
        for size, context_dir in stores.dirs.items():
            restarts[size].append(start_once(context_dir))
        crashed.append(crash_start(stores.dirs[largest], plan.misplaced))
    return [
        Case("new CONTEXT_DIR", 0, fresh),
        *(Case("restart", size, starts) for size, starts in restarts.items()),
        Case(f"restart, {plan.misplaced} dirs misplaced", largest, crashed, plan.misplaced),
    ]


# --- the run --------------------------------------------------------------------------------


def run(quick: bool, scratch: Path) -> Report:
    plan = sizes(quick)
    # Each new CONTEXT_DIR start creates the database and migrates; the first one's directory
    # is then the empty store of the restarts.
    dirs = new_dirs(scratch, plan.new_starts)
    fresh = [start_once(context_dir) for context_dir in dirs]
    stores = build_stores(scratch, plan, dirs[0])
    cases = measure(plan, stores, fresh)
    seed = stores.seed
    return Report(
        tables=[startup_table(cases), population_table(seed, stores.copied, stores.copy_s)],
        data={
            "cases": [c.data() for c in cases],
            "population": {
                "seed_tasks": seed.tasks,
                "seed_create_s": round(seed.create_s, 2),
                "seed_server_cpu_s": round(seed.server_cpu_s, 2),
                "seed_settle_s": round(seed.settle_s, 2),
                "copied_tasks": stores.copied,
                "copy_s": round(stores.copy_s, 2),
                "in_flight": IN_FLIGHT,
                "env": {"FSYNC": POPULATION_FSYNC},
                "status_mix_percent": STATUS_WEIGHTS,
            },
        },
    )


def startup_table(cases: list[Case]) -> Table:
    return Table(
        "startup: time to ready (spawn until GET /readyz is 200), FSYNC=always",
        [
            "case",
            "tasks on disk",
            "starts",
            "median s",
            "max s",
            "CPU s (median)",
            "imports s",
            "lifespan s",
            "RSS after ready MiB",
        ],
        [c.row() for c in cases],
        [
            *ratio_notes(cases),
            "CPU s is the server's CPU time at ready: on a busy machine it moves less than the "
            "wall time. Imports is spawn until uvicorn starts (Python and the app's modules); "
            "lifespan is migrations, reconciliation, loading the token encodings, the job runner.",
            "A new CONTEXT_DIR also creates the database and runs every migration.",
        ],
    )


def ratio_notes(cases: list[Case]) -> list[str]:
    """How tasks on disk, and misplaced directories, change a start (medians)."""
    restarts = {c.tasks: c for c in cases if c.name == "restart"}
    empty, largest = restarts[0], restarts[max(restarts)]
    crashed = next(c for c in cases if c.misplaced)

    def median(case: Case, what: str) -> float:
        values = [getattr(s, what) for s in case.starts]
        return float(statistics.median(values)) if None not in values else float("nan")

    moves = crashed.misplaced
    extra = median(crashed, "lifespan_s") - median(largest, "lifespan_s")
    return [
        f"A restart with {largest.tasks:,} tasks takes "
        f"{median(largest, 'ready_s') / median(empty, 'ready_s'):.1f}x the wall time and "
        f"{median(largest, 'cpu_s') / median(empty, 'cpu_s'):.1f}x the CPU of an empty one, "
        f"its lifespan {median(largest, 'lifespan_s') - median(empty, 'lifespan_s'):+.2f} s: "
        "tasks only add reconciliation (a listing of each status directory, one SELECT of "
        "every row); near 1x means a start costs what its imports and encodings cost.",
        f"{moves} misplaced directories add {extra:+.2f} s to the lifespan "
        f"({1000 * extra / moves:.1f} ms each: under the task's lock a SELECT, the move and "
        "two directory fsyncs).",
    ]


def population_table(seed: Seed, copied: int, copy_s: float) -> Table:
    return Table(
        f"startup: building the store ({IN_FLIGHT} requests in flight, FSYNC=never)",
        [
            "tasks over HTTP",
            "create s",
            "tasks/s",
            "server CPU ms/task",
            "final summaries settle s",
            "tasks copied",
            "copy s",
        ],
        [
            [
                seed.tasks,
                seed.create_s,
                seed.tasks / seed.create_s,
                1000 * seed.server_cpu_s / seed.tasks,
                seed.settle_s,
                copied,
                copy_s,
            ]
        ],
        [
            "Over HTTP a task is POST /tasks, a batch of 4 messages, then complete, fail or stop "
            "(3% stay running); the creating service runs with FSYNC=never.",
            "Server CPU per task includes the final summaries that ran during creation; settle "
            "is the wait after it until no job is queued or running.",
            "The other tasks are copies of those (directories and rows under new uuids, made "
            "with the service down): a start reads directory names and rows, not files.",
        ],
    )
