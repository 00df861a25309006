"""schemathesis against the live app (issue 7): no 5xx, and every response matches what
openapi.yaml documents (status code, content type, headers, body schema), with schemathesis's
authentication checks (see OUT_OF_SCOPE for the checks left out, and why).

The cases come from the committed openapi.yaml, which tests/test_openapi.py keeps identical to
the app's own schema: schemathesis's fixture-based loader (``from_fixture``) does not run under
pytest 9.2 (it sets ``Function._nodeid``, which pytest removed), and a schema loaded when the
module is collected cannot come from a server that only a fixture starts. That frees the server
to run as deployed, with an API key, so the authentication checks are meaningful too.

One real uvicorn process serves the module, on a database of its own. Before the run, real
tasks are built: a running one (history with a tool call, planning, tool records, a tree of
threads), a paused, a completed and a failed one. Four cases in five whose generated task uuid
is valid go to one of them instead (and to their threads; job ids to real jobs), so that the
fuzzing reaches the handlers rather than the 404 of an unknown uuid; invalid and random uuids
are still sent. Fuzzing cases draw that choice (a `flatmap_case` hook); the examples and
coverage phases' fixed cases take it from a digest of the case. A case that may have changed
one of the tasks (a transition, a delete, a thread's end, a cleanup) is followed by a repair
that rebuilds it, so every operation sees the same world.
"""

import hashlib
import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import strategies as st
from requests.structures import CaseInsensitiveDict
from schemathesis import Case
from schemathesis.checks import CheckFunction
from schemathesis.config import SchemathesisConfig
from schemathesis.generation.meta import TestPhase
from schemathesis.hooks import HookContext
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tests.fakes.llm_server import running_fake_llm
from tests.support.paths import REPO
from tests.support.postgres import PostgresDatabases
from tests.support.server import Server, server_of_its_own
from tests.support.tasks import task_body

pytestmark = pytest.mark.e2e
ApiCase = Case[Any]

MAX_EXAMPLES = 40  # fuzzing cases per operation, besides the examples and coverage phases
SEED = 20240707  # with no example database: the same cases on every run
ADMIN_KEY = "schemathesis-admin-key-0001"  # an admin may call every operation

RUNNING = uuid.UUID("5c0e1a57-0000-4000-8000-000000000001")
PAUSED = uuid.UUID("5c0e1a57-0000-4000-8000-000000000002")
COMPLETED = uuid.UUID("5c0e1a57-0000-4000-8000-000000000003")
FAILED = uuid.UUID("5c0e1a57-0000-4000-8000-000000000004")
STATUSES = {RUNNING: "running", PAUSED: "paused", COMPLETED: "completed", FAILED: "failed"}
# Where a case with a valid task uuid goes: None keeps the generated uuid (a 404, mostly).
TARGETS: list[uuid.UUID | None] = [None, *STATUSES]
PICKS = 12  # thread and job choices are `pick` modulo the number of candidates
# The operations that change a task's status or end its threads.
TRANSITIONS = {
    ("DELETE", "/tasks/{uuid}"),
    *(("POST", f"/tasks/{{uuid}}/{verb}") for verb in ("stop", "resume", "complete", "fail")),
    *(("POST", f"/tasks/{{uuid}}/threads/{{thread_id}}/{verb}") for verb in ("end", "abort")),
    ("POST", "/maintenance/cleanup"),
}
IDEMPOTENCY_KEY = "idempotency-key"
CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

HISTORY = [
    {"role": "user", "content": "Fix the failing test in a.py."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "def main():\n    return 1\n"},
    {"role": "assistant", "content": "main() returns 1; the test expects 2."},
]


@dataclass
class World:
    """The real tasks the cases are steered to; rebuilt when a case changed one of them."""

    client: httpx.Client | None = None  # set by the `world` fixture once the server runs
    threads: dict[uuid.UUID, list[int]] = field(default_factory=dict)  # the active ones
    jobs: list[int] = field(default_factory=list)
    cursor: str = ""  # a next_cursor of GET /tasks

    @property
    def http(self) -> httpx.Client:
        assert self.client is not None, "the world fixture has not run"
        return self.client

    def post(self, path: str, body: Any, expected: int = 201) -> dict[str, Any]:
        response = self.http.post(path, json=body)
        assert response.status_code == expected, f"{path}: {response.text}"
        answer: dict[str, Any] = response.json()
        return answer

    def build(self, task: uuid.UUID) -> None:
        """Create the task (its fixed uuid) with a history, then bring it to its status."""
        base = f"/tasks/{task}"
        key = task_body()["task_key"] | {"task_id": STATUSES[task]}  # none inherits another
        self.post("/tasks", task_body(uuid=str(task), task_key=key, system_prompt="You code."))
        self.post(f"{base}/messages", {"messages": HISTORY})
        self.post(f"{base}/planning", {"plan_type": "initial", "plan_content": "1. Fix a.py"})
        self.post(f"{base}/tools", {"tool": "read_file", "args": {"path": "a.py"}, "result": "ok"})
        self.threads[task] = []
        if task == RUNNING:
            outer = self.post(f"{base}/threads", {"label": "autonomous run"})["thread_id"]
            inner_body = {"label": "coder", "parent_thread_id": outer}
            inner = self.post(f"{base}/threads", inner_body)["thread_id"]
            self.post(f"{base}/messages?thread_id={inner}", {"role": "user", "content": "Go."})
            ended = self.post(f"{base}/threads", {"label": "survey"})["thread_id"]
            self.post(f"{base}/threads/{ended}/end", {}, expected=200)  # a chronicle job
            self.threads[task] = [outer, inner]
        elif task == PAUSED:
            self.post(f"{base}/stop", None, expected=200)
        elif task == COMPLETED:
            self.post(f"{base}/complete", None, expected=200)  # a final_summary job
        elif task == FAILED:
            self.post(f"{base}/fail", {"error_message": "tests still fail"}, expected=200)
        self.jobs = [job["id"] for job in self.http.get("/jobs").json()["jobs"]]
        self.cursor = self.http.get("/tasks", params={"limit": 1}).json()["next_cursor"] or ""

    def intact(self, task: uuid.UUID) -> bool:
        response = self.http.get(f"/tasks/{task}")
        if response.status_code != 200 or response.json()["status"] != STATUSES[task]:
            return False
        if not self.threads[task]:
            return True
        tree = self.http.get(f"/tasks/{task}/threads").json()
        active = {node["thread_id"] for node in _nodes(tree) if node["status"] == "active"}
        return set(self.threads[task]) <= active

    def repair(self, case: ApiCase) -> None:
        """Rebuild the real tasks this case may have changed (their status, their threads),
        if it did. Other writes (messages, rewinds, compactions...) leave a task usable."""
        if (case.method.upper(), case.path) not in TRANSITIONS:
            return
        target = (case.path_parameters or {}).get("uuid")
        for task in STATUSES:
            touched = case.path == "/maintenance/cleanup" or str(task) == target
            if touched and not self.intact(task):
                deleted = self.http.delete(f"/tasks/{task}").status_code
                assert deleted in (204, 404), f"{task} cannot be deleted to rebuild it"
                self.build(task)

    # -- steering ---------------------------------------------------------------------------

    def steer(self, case: ApiCase) -> st.SearchStrategy[ApiCase]:
        """Fuzzing: the target and the thread or job are drawn, so they shrink like the rest."""
        choices = st.tuples(st.sampled_from(TARGETS), st.integers(0, PICKS - 1))
        return choices.map(lambda choice: self.retarget(case, *choice))

    def place(self, case: ApiCase) -> None:
        """Examples and coverage phases (explicit cases, nothing to draw from): the same choice
        made from a digest of the case, so that it is stable from run to run."""
        text = repr((case.method, case.path_parameters, case.query, case.body))
        digest = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
        self.retarget(case, TARGETS[digest % len(TARGETS)], digest // len(TARGETS))

    def retarget(self, case: ApiCase, task: uuid.UUID | None, pick: int) -> ApiCase:
        """Send the case to `task` (None: where it was generated for), and put in the values
        that only the server can know: real threads and jobs, an issued cursor, configured
        names, and an idempotency key never reused for another request."""
        path = dict(case.path_parameters or {})
        query = dict(case.query or {})
        if isinstance(path.get("job_id"), int):
            path["job_id"] = _pick([path["job_id"], *self.jobs], pick)
        if task is not None and _is_canonical_uuid(path.get("uuid")):
            path["uuid"] = str(task)
            threads = self.threads[task]
            if isinstance(path.get("thread_id"), int):
                path["thread_id"] = _pick([path["thread_id"], *threads], pick)
            if isinstance(query.get("thread_id"), int):
                query["thread_id"] = _pick([query["thread_id"], 0, *threads], pick)
        if isinstance(query.get("cursor"), str):
            query["cursor"] = self.cursor  # opaque: only a cursor the service issued is valid
        body = _configured_names(case, case.body)
        headers = CaseInsensitiveDict(case.headers or {})
        if _is_idempotency_key(headers.get(IDEMPOTENCY_KEY)):
            # Reusing a key for another request is refused (422, as the IETF draft says): a key
            # derived from the request makes a reuse a true retry.
            request = repr((case.method, case.path, path, query, body)).encode()
            headers[IDEMPOTENCY_KEY] = f"key-{hashlib.sha256(request).hexdigest()[:32]}"
        # Containers are assigned, not edited in place, and only when changed: schemathesis then
        # revalidates the case's metadata, so a negative case stays labelled by what is still
        # invalid in it.
        if path != (case.path_parameters or {}):
            case.path_parameters = path
        if query != (case.query or {}):
            case.query = query
        if body != case.body:
            case.body = body
        if headers != (case.headers or {}):
            case.headers = headers
        return case


def _configured_names(case: ApiCase, body: Any) -> Any:
    """The server names one summary backend (`extractive`, built in) and no webhook: any
    other name is a 422 that says nothing about the request's shape."""
    if case.method.upper() != "POST" or not isinstance(body, dict):
        return body
    body = dict(body)
    if case.path == "/tasks":
        if isinstance(body.get("summary_backend"), str) and len(body["summary_backend"]) <= 64:
            body["summary_backend"] = "extractive"
        hooks = body.get("hooks")
        if isinstance(hooks, list) and len(hooks) <= 32 and all(isinstance(h, str) for h in hooks):
            body["hooks"] = []
    elif case.path == "/tasks/{uuid}/compress" and isinstance(body.get("backend"), str):
        body["backend"] = "extractive"
    return body


def _is_idempotency_key(value: object) -> bool:
    return isinstance(value, str) and re.fullmatch(r"[\x20-\x7e]{1,200}", value) is not None


def _pick(candidates: list[int], pick: int) -> int:
    return candidates[pick % len(candidates)]


def _is_canonical_uuid(value: object) -> bool:
    return isinstance(value, str) and CANONICAL_UUID.fullmatch(value) is not None


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node["children"]:
        yield from _nodes(child)


# The schema is loaded at collection, and its hook registered then; the hook reads the real
# tasks from WORLD, which the `world` fixture fills before the first case is drawn. The examples
# and coverage phases' cases are made at collection, before any task exists: the test places them.
WORLD = World()
CONFIG = SchemathesisConfig.from_dict(
    {
        "seed": SEED,
        # A live server with a database answers slower than Hypothesis's in-process budget.
        "suppress-health-check": ["too_slow", "filter_too_much"],
        "generation": {"max-examples": MAX_EXAMPLES, "database": "none"},
        "auth": {"openapi": {"HTTPBearer": {"bearer": ADMIN_KEY}}},
        # Reproductions show the values sent (e.g. max_output_tokens, task_key), not [Filtered];
        # the one secret is this test's own key.
        "output": {"sanitization": {"enabled": False}},
    }
)
schema = schemathesis.openapi.from_path(REPO / "openapi.yaml", config=CONFIG)


@schema.hook
def flatmap_case(context: HookContext, case: ApiCase) -> st.SearchStrategy[ApiCase]:
    if case.meta is not None and case.meta.phase.name == TestPhase.FUZZING:
        return WORLD.steer(case)
    return st.just(case)


@pytest.fixture(scope="module")
def live(
    tmp_path_factory: pytest.TempPathFactory, postgres: PostgresDatabases | None
) -> Iterator[Server]:
    """The module's server on its own database, its proxy endpoints forwarding to a fake LLM
    (which answers what it can and refuses the rest with a 400, as a real one would)."""
    with running_fake_llm() as fake:
        backends = {
            "gpt": {"kind": "openai", "base_url": fake.base_url, "model": "gpt-4o"},
            "claude": {"kind": "anthropic", "base_url": fake.base_url, "model": "claude-x"},
        }
        env = {
            "API_KEYS": "",
            "ADMIN_API_KEYS": ADMIN_KEY,
            "LLM_BACKENDS": json.dumps(backends),
            "PROXY__OPENAI_BACKEND": "gpt",
            "PROXY__ANTHROPIC_BACKEND": "claude",
        }
        root = tmp_path_factory.mktemp("schemathesis")
        with server_of_its_own(root, postgres, env) as server:
            yield server


@pytest.fixture(scope="module")
def world(live: Server) -> Iterator[World]:
    auth = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with httpx.Client(base_url=live.base_url, headers=auth, timeout=30) as http:
        WORLD.client = http
        for task in STATUSES:
            WORLD.build(task)
        yield WORLD
        WORLD.client = None


# Checks beyond issue 7's bar (no 5xx; every response as documented), left out with a reason:
# - positive_data_acceptance: rules the schema does not express are 422s (a message's fields by
#   role, a rewind target past the history, a window with no room after max_output_tokens).
OUT_OF_SCOPE: list[CheckFunction] = [positive_data_acceptance]


@schema.parametrize()
def test_operation_conforms(case: ApiCase, live: Server, world: World) -> None:
    if case.meta is None or case.meta.phase.name != TestPhase.FUZZING:
        world.place(case)
    try:
        case.call_and_validate(base_url=live.base_url, excluded_checks=OUT_OF_SCOPE)
    finally:
        world.repair(case)
