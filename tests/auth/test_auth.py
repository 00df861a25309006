"""Bearer API keys (SPEC §12): who may call what, and what a key limited to some tenants sees.

The routes swept here come from the app's own OpenAPI schema, so a route added later without
authentication (or without a tenant check) fails these tests instead of slipping past a
hand-written list. Every refusal is also checked to change nothing: files, tasks, threads, jobs.
"""

import base64
import json
import logging
import uuid as uuid_module
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr, ValidationError

from app.auth.keys import OPEN, Principal, identify
from app.config import ApiKeyConfig, Settings
from app.observability.logs import configure_logging
from tests.support.app import logged_service, running_app
from tests.support.errors import assert_error
from tests.support.files import directories, paths_naming, snapshot_dir
from tests.support.routes import BODIES, Route, outcome, schema_routes, task_routes
from tests.support.settings import fast_settings
from tests.support.tasks import DEFAULT_KEY, key, task_body
from tests.support.waits import settled_jobs

KEYS: dict[str, dict[str, Any]] = {
    "agent": {"key": "agent-7Qm2vX9pL4sK8wR1", "role": "agent"},
    "admin": {"key": "admin-3Nf6bT1yH8cJ5zD0", "role": "admin"},
    "alice": {"key": "alice-9Kd4rW2mQ7xP1vB6", "users": ["alice"]},
    "gitlab": {"key": "gitlab-5Hs8nC3jF0tL6yE2", "task_sources": ["gitlab"]},
    "alice-gitlab": {
        "key": "algl-1Zp7gV4kM9wS2aX5",
        "role": "admin",
        "users": ["alice"],
        "task_sources": ["gitlab"],
    },
}
SCOPED = ("alice", "gitlab", "alice-gitlab")
TENANTS: dict[str, tuple[str, str]] = {  # tenant -> (user, task_source)
    "alice@github": ("alice", "github"),
    "alice@gitlab": ("alice", "gitlab"),
    "bob@gitlab": ("bob", "gitlab"),
    "bob@github": ("bob", "github"),
}
# Written out, not computed with Principal.allows: the code under test is no oracle for itself.
VISIBLE: dict[str, set[str]] = {
    "alice": {"alice@github", "alice@gitlab"},
    "gitlab": {"alice@gitlab", "bob@gitlab"},
    "alice-gitlab": {"alice@gitlab"},
}
AGENT_KEY = KEYS["agent"]["key"]
UNKNOWN_KEY = "guess-8Yt2bN6vC1xZ4mQ9"
BASIC = base64.b64encode(f"agent:{AGENT_KEY}".encode()).decode()
BAD_AUTH: dict[str, str | None] = {
    "none": None,
    "unknown_key": f"Bearer {UNKNOWN_KEY}",
    "basic_with_a_valid_key": f"Basic {BASIC}",
    "key_without_scheme": AGENT_KEY,
    "scheme_only": "Bearer",
    "empty_bearer": "Bearer ",
    "blank_bearer": "Bearer     ",
    "truncated_key": f"Bearer {AGENT_KEY[:-1]}",
    "extended_key": f"Bearer {AGENT_KEY}0",
    "key_in_other_case": f"Bearer {AGENT_KEY.swapcase()}",
    "two_keys": f"Bearer {AGENT_KEY} {KEYS['admin']['key']}",
}
OPEN_ROUTES = {("GET", "/"), ("GET", "/healthz"), ("GET", "/readyz")}
# Views across tenants: no key limited to some tenants may see them.
CROSS_TENANT = {
    ("GET", "/stats"),
    ("GET", "/jobs"),
    ("GET", "/inheritance/candidates"),
    ("GET", "/metrics"),
}
PARAMS: dict[tuple[str, str], dict[str, str]] = {
    ("GET", "/inheritance/candidates"): DEFAULT_KEY | {"user": "notfolder"}
}


def bearer(name: str) -> str:
    return f"Bearer {KEYS[name]['key']}"


def keyed_settings(context_dir: Path, **extra: Any) -> Settings:
    return fast_settings(context_dir, auth={"api_keys": KEYS}, **extra)


async def send(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    auth: str | None,
    body: Any = None,
    params: dict[str, str] | None = None,
) -> httpx.Response:
    """One request with exactly this Authorization header (none when ``auth`` is None), whatever
    the client's default."""
    request = client.build_request(method, url, json=body, params=params)
    request.headers.pop("Authorization", None)
    if auth is not None:
        request.headers["Authorization"] = auth
    return await client.send(request)


async def call(
    client: httpx.AsyncClient, route: Route, url: str, auth: str | None
) -> httpx.Response:
    """The route at ``url`` with the body and query it would accept."""
    return await send(client, route[0], url, auth, BODIES.get(route), PARAMS.get(route))


UNAUTHORIZED = "401 unauthorized [Bearer]"


@dataclass(frozen=True)
class World:
    """One task per tenant, each with an active thread, and a finished task with a settled
    final-summary job."""

    tasks: dict[str, str]  # tenant -> uuid
    threads: dict[str, int]  # tenant -> thread id
    job_id: int

    def url(self, path: str, tenant: str = "bob@github", uuid: str | None = None) -> str:
        """The path template filled for this tenant's task (or ``uuid``), thread, the job and
        the first message."""
        return path.format(
            uuid=uuid or self.tasks[tenant],
            thread_id=self.threads[tenant],
            job_id=self.job_id,
            seq=1,
        )


def tenant_body(tenant: str, **overrides: Any) -> dict[str, Any]:
    user, source = TENANTS[tenant]
    return task_body(user=user, task_key=key(task_source=source, task_id=tenant), **overrides)


async def populate(client: httpx.AsyncClient) -> World:
    """The world, made with the admin key (set as the client's default)."""
    client.headers["Authorization"] = bearer("admin")
    tasks: dict[str, str] = {}
    threads: dict[str, int] = {}
    for tenant in TENANTS:
        body = tenant_body(tenant, system_prompt="You are a coding agent.")
        created = await client.post("/tasks", json=body)
        assert created.status_code == 201, created.text
        uuid = tasks[tenant] = created.json()["uuid"]
        message = {"role": "user", "content": f"Fix the bug of {tenant}"}
        assert (await client.post(f"/tasks/{uuid}/messages", json=message)).status_code == 201
        thread = await client.post(f"/tasks/{uuid}/threads", json={"label": "sub-agent"})
        assert thread.status_code == 201, thread.text
        threads[tenant] = thread.json()["thread_id"]
    finished = task_body(user="bob", task_key=key(task_source="github", task_id="done"))
    done = (await client.post("/tasks", json=finished)).json()
    assert (await client.post(f"/tasks/{done['uuid']}/complete")).status_code == 200
    jobs = await settled_jobs(client, done["uuid"], "final_summary")
    return World(tasks=tasks, threads=threads, job_id=jobs[0]["id"])


async def state(client: httpx.AsyncClient, context_dir: Path, world: World) -> dict[str, Any]:
    """What a refused call must leave alone: every file and directory, every task (with its
    statistics and timestamps), every thread tree, every job."""
    admin = bearer("admin")
    trees = {
        tenant: (await send(client, "GET", f"/tasks/{uuid}/threads", admin)).json()
        for tenant, uuid in world.tasks.items()
    }
    return {
        "files": snapshot_dir(context_dir),
        "directories": directories(context_dir),
        "tasks": (await send(client, "GET", "/tasks", admin)).json(),
        "threads": trees,
        "jobs": (await send(client, "GET", "/jobs", admin)).json(),
    }


# -- no key, or a key the service does not know ---------------------------------------------------


def test_the_sweep_covers_the_app() -> None:
    """The schema the sweeps walk is the whole API, task routes, threads and admin ones alike."""
    routes = schema_routes()
    assert set(routes) >= OPEN_ROUTES | CROSS_TENANT
    assert {("DELETE", "/tasks/{uuid}"), ("POST", "/maintenance/cleanup")} <= set(routes)
    assert ("POST", "/tasks/{uuid}/threads/{thread_id}/abort") in routes
    assert len(task_routes()) >= 20
    assert set(BODIES) <= set(routes)  # no stale entry: each names a route that exists


@pytest.mark.parametrize("auth", list(BAD_AUTH.values()), ids=list(BAD_AUTH))
async def test_every_route_but_health_needs_a_known_key(
    context_dir: Path, auth: str | None
) -> None:
    async with running_app(keyed_settings(context_dir)) as client:
        world = await populate(client)
        before = await state(client, context_dir, world)
        answers = {
            f"{method} {path}": outcome(await call(client, (method, path), world.url(path), auth))
            for method, path in schema_routes()
        }
        expected = {
            f"{method} {path}": "200" if (method, path) in OPEN_ROUTES else UNAUTHORIZED
            for method, path in schema_routes()
        }
        assert answers == expected
        assert await state(client, context_dir, world) == before


async def test_a_caller_without_a_key_is_refused_before_its_body_is_read(
    context_dir: Path,
) -> None:
    """401, not 422: without a key the service says nothing about what it would accept (nor
    parses up to MAX_BODY_BYTES for an unknown caller)."""
    async with running_app(keyed_settings(context_dir)) as client:
        world = await populate(client)
        before = await state(client, context_dir, world)
        answers: dict[str, str] = {}
        for method, path in schema_routes():
            if method in ("POST", "PUT", "PATCH"):
                request = client.build_request(
                    method,
                    world.url(path),
                    content=b'{"not json',
                    headers={"content-type": "application/json"},
                )
                request.headers.pop("Authorization")
                answers[f"{method} {path}"] = outcome(await client.send(request))
        assert answers
        assert answers == dict.fromkeys(answers, UNAUTHORIZED)
        assert await state(client, context_dir, world) == before


@pytest.mark.parametrize(
    ("auth", "status", "code"),
    [(None, 401, "unauthorized"), (bearer("admin"), 404, "not_found")],
    ids=["no_key", "admin_key"],
)
async def test_with_keys_the_schema_and_docs_are_not_served(
    context_dir: Path, auth: str | None, status: int, code: str
) -> None:
    """Without a key nothing but health answers (the key is checked before routing); with
    one, the pages do not exist."""
    async with running_app(keyed_settings(context_dir)) as client:
        for path in ("/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"):
            assert_error(await send(client, "GET", path, auth), status, code)


# -- roles ----------------------------------------------------------------------------------------


async def test_an_agent_key_does_an_agents_work_but_not_an_admins(context_dir: Path) -> None:
    async with running_app(keyed_settings(context_dir)) as client:
        client.headers["Authorization"] = bearer("admin")  # for settled_jobs and state
        agent = bearer("agent")
        body = task_body(system_prompt="You are a coding agent.")
        created = await send(client, "POST", "/tasks", agent, body)
        assert created.status_code == 201, created.text
        uuid = created.json()["uuid"]
        for message in (
            {"role": "user", "content": "Fix the bug in a.py"},
            {"role": "assistant", "content": "Reading a.py first."},
        ):
            appended = await send(client, "POST", f"/tasks/{uuid}/messages", agent, message)
            assert appended.status_code == 201, appended.text
        payload = await send(client, "GET", f"/tasks/{uuid}/request", agent)
        assert payload.status_code == 200, payload.text
        assert [m["content"] for m in payload.json()["messages"]] == [
            "You are a coding agent.",
            "Fix the bug in a.py",
            "Reading a.py first.",
        ]
        for route in (("POST", "/tasks/{uuid}/tools"), ("POST", "/tasks/{uuid}/planning")):
            assert outcome(await call(client, route, route[1].format(uuid=uuid), agent)) == "201"
        listed = await send(client, "GET", "/tasks", agent)
        assert [t["uuid"] for t in listed.json()["tasks"]] == [uuid]
        completed = await send(client, "POST", f"/tasks/{uuid}/complete", agent)
        assert completed.json()["status"] == "completed", completed.text
        job_id = (await settled_jobs(client, uuid, "final_summary"))[0]["id"]
        for path in ("/stats", "/jobs", f"/jobs/{job_id}", "/metrics"):
            assert outcome(await send(client, "GET", path, agent)) == "200", path
        candidates = await call(
            client, ("GET", "/inheritance/candidates"), "/inheritance/candidates", agent
        )
        assert [c["uuid"] for c in candidates.json()["candidates"]] == [uuid]

        world = World(tasks={"t": uuid}, threads={"t": 0}, job_id=job_id)
        before = await state(client, context_dir, world)
        refused = await send(client, "DELETE", f"/tasks/{uuid}", agent)
        assert_error(refused, 403, "admin_key_required")
        cleanup = {"older_than_days": 0}
        refused = await send(client, "POST", "/maintenance/cleanup", agent, cleanup)
        assert_error(refused, 403, "admin_key_required")
        assert await state(client, context_dir, world) == before

        admin = bearer("admin")
        report = await send(
            client, "POST", "/maintenance/cleanup", admin, cleanup | {"dry_run": True}
        )
        assert report.status_code == 200, report.text
        assert report.json()["matched"] == 1
        assert (await send(client, "DELETE", f"/tasks/{uuid}", admin)).status_code == 204
        assert_error(await send(client, "GET", f"/tasks/{uuid}", admin), 404, "task_not_found")


# -- keys limited to some tenants -----------------------------------------------------------------


@pytest.mark.parametrize("name", SCOPED)
async def test_a_scoped_key_does_not_see_other_tenants_tasks(context_dir: Path, name: str) -> None:
    """Every route about one task answers for another tenant's task exactly as for a task that
    does not exist (its existence does not show), and changes nothing."""
    async with running_app(keyed_settings(context_dir)) as client:
        world = await populate(client)
        before = await state(client, context_dir, world)
        own = bearer(name)
        unknown = str(uuid_module.uuid4())
        answers: dict[str, str] = {}
        expected: dict[str, str] = {}
        for tenant in TENANTS.keys() - VISIBLE[name]:
            foreign = world.tasks[tenant]
            for route in task_routes():
                label = f"{tenant}: {route[0]} {route[1]}"
                hidden = await call(client, route, world.url(route[1], tenant), own)
                missing = await call(client, route, world.url(route[1], tenant, unknown), own)
                answers[label] = outcome(hidden)
                if route == ("DELETE", "/tasks/{uuid}") and KEYS[name].get("role") != "admin":
                    expected[label] = "403 admin_key_required"
                else:
                    expected[label] = "404 task_not_found"
                assert hidden.text == missing.text.replace(unknown, foreign), label
        assert answers == expected
        assert await state(client, context_dir, world) == before

        for tenant in VISIBLE[name]:  # its own tenants' tasks work
            uuid = world.tasks[tenant]
            for route in (
                ("GET", "/tasks/{uuid}"),
                ("GET", "/tasks/{uuid}/threads/{thread_id}"),
                ("POST", "/tasks/{uuid}/messages"),
                ("GET", "/tasks/{uuid}/request"),
            ):
                assert (
                    outcome(await call(client, route, world.url(route[1], tenant), own))[0] == "2"
                )
            deleted = await send(client, "DELETE", f"/tasks/{uuid}", own)
            if KEYS[name].get("role") == "admin":
                assert deleted.status_code == 204, deleted.text
            else:
                assert_error(deleted, 403, "admin_key_required")


@pytest.mark.parametrize("name", SCOPED)
async def test_a_scoped_key_is_refused_views_across_tenants(context_dir: Path, name: str) -> None:
    """Statistics, the job list, candidates, metrics and maintenance span every tenant: 403 for
    a key limited to some (an agent key is refused maintenance for its role first); another
    tenant's job is 404."""
    async with running_app(keyed_settings(context_dir)) as client:
        world = await populate(client)
        before = await state(client, context_dir, world)
        spanning = [
            (m, p)
            for m, p in schema_routes()
            # The proxy's routes (/v1) work on the caller's own tasks (tests/proxy).
            if not p.startswith(("/tasks", "/v1")) and (m, p) not in OPEN_ROUTES
        ]
        assert set(spanning) >= CROSS_TENANT
        answers = {
            f"{m} {p}": outcome(await call(client, (m, p), world.url(p), bearer(name)))
            for m, p in spanning
        }
        is_agent = KEYS[name].get("role") != "admin"
        expected = {
            f"{m} {p}": "403 admin_key_required"
            if is_agent and p.startswith("/maintenance")
            else "403 key_scope_too_narrow"
            for m, p in spanning
        }
        expected["GET /jobs/{job_id}"] = "404 job_not_found"  # bob@github's: not its tenant's
        assert answers == expected
        assert await state(client, context_dir, world) == before


@pytest.mark.parametrize("name", SCOPED)
async def test_a_scoped_key_creates_tasks_only_for_its_tenants(
    context_dir: Path, name: str
) -> None:
    async with running_app(keyed_settings(context_dir)) as client:
        world = await populate(client)
        own = bearer(name)
        answers: dict[str, str] = {}
        for tenant in TENANTS:
            body = tenant_body(tenant, uuid=str(uuid_module.uuid4()))
            before = await state(client, context_dir, world)
            response = await send(client, "POST", "/tasks", own, body)
            answers[tenant] = outcome(response)
            if response.status_code == 201:
                seen = await send(client, "GET", f"/tasks/{body['uuid']}", own)
                assert seen.status_code == 200, seen.text
            else:
                assert await state(client, context_dir, world) == before
                assert not paths_naming(context_dir, body["uuid"])
        assert answers == {t: "201" if t in VISIBLE[name] else "403 out_of_scope" for t in TENANTS}
        # A task of no user: only a key not limited to users may create it.
        anonymous = task_body(task_key=key(task_source="gitlab", task_id="anonymous"))
        expected = "201" if KEYS[name].get("users") is None else "403 out_of_scope"
        assert outcome(await send(client, "POST", "/tasks", own, anonymous)) == expected


@pytest.mark.parametrize(
    ("name", "own", "foreign"),
    [("alice", "alice@github", "bob@github"), ("gitlab", "bob@gitlab", "alice@github")],
)
async def test_a_create_on_another_tenants_uuid_says_nothing_of_that_task(
    context_dir: Path, name: str, own: str, foreign: str
) -> None:
    """A uuid taken by another tenant's task: the 409 is word for word the one for the key's
    own task re-posted with another body (only the uuid differs), says nothing of the task
    (its tenant, its body), and changes nothing."""
    async with running_app(keyed_settings(context_dir)) as client:
        world = await populate(client)
        before = await state(client, context_dir, world)
        own_uuid, foreign_uuid = world.tasks[own], world.tasks[foreign]
        body = tenant_body(own, metadata={"attempt": 2})
        taken = await send(client, "POST", "/tasks", bearer(name), body | {"uuid": foreign_uuid})
        mine = await send(client, "POST", "/tasks", bearer(name), body | {"uuid": own_uuid})
        assert assert_error(taken, 409, "task_exists") == {"uuid": foreign_uuid}
        assert taken.text == mine.text.replace(own_uuid, foreign_uuid)
        message = taken.json()["error"]["message"]
        user, source = TENANTS[foreign]
        for told in ("different", "tenant", user, source, foreign):
            assert told not in message, message
        assert await state(client, context_dir, world) == before


@pytest.mark.parametrize("name", SCOPED)
async def test_a_scoped_key_lists_only_its_tenants_tasks(context_dir: Path, name: str) -> None:
    async with running_app(keyed_settings(context_dir)) as client:
        world = await populate(client)
        own = bearer(name)

        async def listed(**params: str) -> list[str]:
            response = await send(client, "GET", "/tasks", own, params=params)
            assert response.status_code == 200, response.text
            return [t["uuid"] for t in response.json()["tasks"]]

        mine = {world.tasks[t] for t in VISIBLE[name]}
        assert set(await listed()) == mine
        assert len(await listed()) == len(mine)
        paged: list[str] = []
        params = {"limit": "1"}
        while True:  # page by page, the cursor never reaches past the key's tenants
            response = await send(client, "GET", "/tasks", own, params=params)
            page = response.json()
            paged += [t["uuid"] for t in page["tasks"]]
            if page["next_cursor"] is None:
                break
            params = {"limit": "1", "cursor": page["next_cursor"]}
        assert sorted(paged) == sorted(mine)
        for tenant, (user, source) in TENANTS.items():
            wanted = [world.tasks[tenant]] if tenant in VISIBLE[name] else []
            assert await listed(user=user, task_source=source) == wanted, tenant
            assert await listed(task_id=tenant) == wanted, tenant
        assert await listed(user="bob", task_source="github") == []
        assert await listed(status="completed") == []  # the finished task is bob@github's


# -- no keys configured ---------------------------------------------------------------------------


async def test_without_keys_every_route_answers_without_a_header(context_dir: Path) -> None:
    async with running_app(fast_settings(context_dir)) as client:
        schema = await client.get("/openapi.json")
        assert schema.status_code == 200
        assert "/tasks/{uuid}" in schema.json()["paths"]
        assert (await client.get("/docs")).status_code == 200
        uuid = (await client.post("/tasks", json=task_body())).json()["uuid"]
        for path in ("/tasks", f"/tasks/{uuid}", "/stats", "/jobs", "/metrics"):
            assert (await client.get(path)).status_code == 200, path
        # A header is not needed, and one the service does not know changes nothing.
        stray = {"Authorization": f"Bearer {UNKNOWN_KEY}"}
        assert (await client.get(f"/tasks/{uuid}", headers=stray)).status_code == 200
        cleanup = await client.post("/maintenance/cleanup", json={"dry_run": True})
        assert cleanup.status_code == 200, cleanup.text
        assert (await client.delete(f"/tasks/{uuid}")).status_code == 204


# -- secrets --------------------------------------------------------------------------------------


@pytest.mark.parametrize("log_format", ["json", "text"])
async def test_no_key_is_ever_logged(
    context_dir: Path, caplog: pytest.LogCaptureFixture, log_format: str
) -> None:
    settings = keyed_settings(context_dir, log={"format": log_format, "level": "DEBUG"})
    secrets = [k["key"] for k in KEYS.values()] + [UNKNOWN_KEY, BASIC]
    answers: list[str] = []
    try:
        async with logged_service(settings) as (client, output):
            caplog.set_level(logging.DEBUG)
            for name in KEYS:
                auth = bearer(name)
                created = await send(client, "POST", "/tasks", auth, tenant_body("alice@gitlab"))
                uuid = created.json().get("uuid", str(uuid_module.uuid4()))
                for response in (
                    created,
                    await send(client, "POST", f"/tasks/{uuid}/messages", auth, {"role": "user"}),
                    await send(client, "GET", f"/tasks/{uuid}/request", auth),
                    await send(client, "GET", "/stats", auth),
                    await send(client, "DELETE", f"/tasks/{uuid}", auth),
                ):
                    answers.append(response.text)
            for bad in BAD_AUTH.values():
                for method, path in (("GET", "/tasks"), ("POST", "/tasks")):
                    refused = await send(client, method, path, bad, task_body())
                    assert refused.status_code == 401
                    answers.append(refused.text)
    finally:
        configure_logging(Settings())
    logged = output.getvalue()
    assert "created" in logged  # the log was written to, at DEBUG
    records = [f"{r.getMessage()} {r.__dict__!r}" for r in caplog.records]
    assert records
    for secret in secrets:
        assert secret not in logged
        assert not [r for r in records if secret in r]
        assert not [a for a in answers if secret in a]


# -- settings -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "entry",
    [
        {"key": "k" * 15},
        {"key": ""},
        {"key": "k" * 16, "role": "root"},
        {"key": "k" * 16, "scopes": ["read"]},
        {"key": "k" * 16, "users": "alice"},
        {"role": "admin"},
    ],
    ids=["15_characters", "empty", "unknown_role", "unknown_field", "users_not_a_list", "no_key"],
)
def test_a_bad_key_entry_is_refused(entry: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Settings.model_validate({"auth": {"api_keys": {"ci": entry}}})


def test_a_16_character_key_is_enough_and_the_defaults_hold() -> None:
    settings = Settings.model_validate({"auth": {"api_keys": {"ci": {"key": "k" * 16}}}})
    config = settings.auth.api_keys["ci"]
    assert (config.role, config.users, config.task_sources) == ("agent", None, None)
    assert Settings.model_validate({}).auth.api_keys == {}  # the default: no authentication


def test_api_keys_come_from_the_environment_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = {
        "ci": {"key": KEYS["admin"]["key"], "role": "admin"},
        "acme": {"key": KEYS["alice"]["key"], "users": ["alice", "carol"]},
    }
    monkeypatch.setenv("API_KEYS", json.dumps(keys))
    settings = Settings()
    assert settings.auth.api_keys == {
        "ci": ApiKeyConfig(key=SecretStr(KEYS["admin"]["key"]), role="admin"),
        "acme": ApiKeyConfig(key=SecretStr(KEYS["alice"]["key"]), users=("alice", "carol")),
    }
    for shown in (repr(settings), str(settings), settings.model_dump_json()):
        assert KEYS["admin"]["key"] not in shown  # settings may be printed; keys never are
    monkeypatch.setenv("API_KEYS", json.dumps({"ci": {"key": "short"}}))
    with pytest.raises(ValidationError):
        Settings()


# -- app/auth/keys.py, pure -----------------------------------------------------------------------

CONFIGS = {name: ApiKeyConfig.model_validate(entry) for name, entry in KEYS.items()}


def test_identify_names_the_key_presented() -> None:
    found = {name: identify(CONFIGS, entry["key"]) for name, entry in KEYS.items()}
    assert found == {
        "agent": Principal(name="agent", role="agent"),
        "admin": Principal(name="admin", role="admin"),
        "alice": Principal(name="alice", role="agent", users=frozenset({"alice"})),
        "gitlab": Principal(name="gitlab", role="agent", task_sources=frozenset({"gitlab"})),
        "alice-gitlab": Principal(
            name="alice-gitlab",
            role="admin",
            users=frozenset({"alice"}),
            task_sources=frozenset({"gitlab"}),
        ),
    }
    assert [p.scoped for p in found.values() if p] == [False, False, True, True, True]


@pytest.mark.parametrize(
    "presented",
    ["", " ", AGENT_KEY[:-1], AGENT_KEY + "x", AGENT_KEY.upper(), f" {AGENT_KEY}", UNKNOWN_KEY],
    ids=["empty", "space", "prefix", "longer", "upper", "leading_space", "unknown"],
)
def test_identify_knows_no_other_string(presented: str) -> None:
    assert identify(CONFIGS, presented) is None


def test_identify_without_keys_knows_no_one() -> None:
    assert identify({}, AGENT_KEY) is None


ALICE = Principal(name="a", role="agent", users=frozenset({"alice"}))
GITLAB = Principal(name="g", role="agent", task_sources=frozenset({"gitlab"}))
BOTH = Principal(
    name="b", role="admin", users=frozenset({"alice"}), task_sources=frozenset({"gitlab"})
)
NOBODY = Principal(name="n", role="agent", users=frozenset())


@pytest.mark.parametrize(
    ("principal", "user", "source", "allowed"),
    [
        (OPEN, None, "github", True),
        (OPEN, "bob", "gitlab", True),
        (ALICE, "alice", "github", True),
        (ALICE, "alice", "anything", True),
        (ALICE, "bob", "github", False),
        (ALICE, None, "github", False),
        (ALICE, "Alice", "github", False),
        (GITLAB, "bob", "gitlab", True),
        (GITLAB, None, "gitlab", True),
        (GITLAB, "alice", "github", False),
        (GITLAB, "alice", None, False),
        (BOTH, "alice", "gitlab", True),
        (BOTH, "alice", "github", False),
        (BOTH, "bob", "gitlab", False),
        (NOBODY, "alice", "gitlab", False),
    ],
)
def test_allows(principal: Principal, user: str | None, source: str | None, allowed: bool) -> None:
    assert principal.allows(user, source) is allowed


def test_scoped_and_open() -> None:
    assert not OPEN.scoped
    assert OPEN.role == "admin"
    assert OPEN.name is None
    assert ALICE.scoped
    assert GITLAB.scoped
    assert BOTH.scoped
    assert NOBODY.scoped  # an empty list limits to no one, it does not lift the limit


async def test_a_scoped_key_reads_its_own_tasks_jobs(context_dir: Path) -> None:
    """A scoped agent checks its webhooks and final summaries: one of its tasks' jobs at a time;
    another tenant's are 404, the unfiltered list 403."""
    async with running_app(keyed_settings(context_dir)) as client:
        world = await populate(client)
        alice = bearer("alice")
        own = world.tasks["alice@github"]
        assert (await send(client, "POST", f"/tasks/{own}/complete", alice)).status_code == 200
        jobs = await settled_jobs(client, own, "final_summary")
        listed = await send(client, "GET", f"/jobs?task_uuid={own}", alice)
        assert listed.status_code == 200, listed.text
        assert [j["id"] for j in listed.json()["jobs"]] == [j["id"] for j in jobs]
        one = await send(client, "GET", f"/jobs/{jobs[0]['id']}", alice)
        assert (one.status_code, one.json()["task_uuid"]) == (200, own)
        other = world.tasks["bob@github"]
        assert_error(
            await send(client, "GET", f"/jobs?task_uuid={other}", alice), 404, "task_not_found"
        )
        assert_error(
            await send(client, "GET", f"/jobs/{world.job_id}", alice), 404, "job_not_found"
        )
        assert_error(await send(client, "GET", "/jobs", alice), 403, "key_scope_too_narrow")


def test_admin_api_keys_and_a_plain_list_of_agent_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """SPEC §11's ADMIN_API_KEYS, and API_KEYS as a comma-separated list; a short or shared key
    is refused at start, its value never echoed."""
    monkeypatch.setenv("API_KEYS", "agent-key-0123456789, agent-key-abcdefghij")
    monkeypatch.setenv("ADMIN_API_KEYS", "admin-key-0123456789")
    keys = Settings().auth.keys
    assert {name: config.role for name, config in keys.items()} == {
        "agent-1": "agent",
        "agent-2": "agent",
        "admin-1": "admin",
    }
    assert keys["agent-2"].key.get_secret_value() == "agent-key-abcdefghij"
    for admins in ("short-secret", "agent-key-0123456789"):
        monkeypatch.setenv("ADMIN_API_KEYS", admins)
        with pytest.raises(ValidationError) as refused:
            Settings()
        assert admins not in str(refused.value)


def test_an_api_keys_name_that_admin_api_keys_also_gives_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ADMIN_API_KEYS names its keys admin-1, admin-2...: an API_KEYS entry of the same name
    was silently replaced (that key stopped working). Refused at start, naming the name."""
    secret = "ci-key-0123456789abcdef"
    monkeypatch.setenv("API_KEYS", json.dumps({"admin-1": {"key": secret}}))
    monkeypatch.setenv("ADMIN_API_KEYS", "admin-key-0123456789")
    with pytest.raises(ValidationError) as refused:
        Settings()
    assert "API_KEYS names ['admin-1'] are the names ADMIN_API_KEYS gives" in str(refused.value)
    assert secret not in str(refused.value)
    monkeypatch.setenv("API_KEYS", json.dumps({"admin-2": {"key": secret}}))
    assert set(Settings().auth.keys) == {"admin-1", "admin-2"}  # no clash: both kept


def test_a_name_given_twice_in_api_keys_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A JSON object naming a key twice kept only the last one, without a word."""
    first, second = "ci-key-0123456789abcdef", "ci-key-fedcba9876543210"
    monkeypatch.setenv("API_KEYS", f'{{"ci": {{"key": "{first}"}}, "ci": {{"key": "{second}"}}}}')
    with pytest.raises(ValidationError) as refused:
        Settings()
    assert "API_KEYS names ['ci'] more than once" in str(refused.value)
    assert first not in str(refused.value)
    assert second not in str(refused.value)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"x-api-key": AGENT_KEY}, "200"),
        ({"x-api-key": UNKNOWN_KEY}, UNAUTHORIZED),
        ({"x-api-key": ""}, UNAUTHORIZED),
        ({"x-api-key": AGENT_KEY, "Authorization": f"Bearer {AGENT_KEY}"}, UNAUTHORIZED),
    ],
    ids=["known", "unknown", "empty", "both_headers"],
)
async def test_a_key_may_come_as_x_api_key(
    context_dir: Path, headers: dict[str, str], expected: str
) -> None:
    """Anthropic's SDK sends its key as x-api-key: it counts as a bearer key would; a request
    with two keys is refused, whichever would have counted."""
    async with running_app(keyed_settings(context_dir)) as client:
        request = client.build_request("GET", "/tasks")
        request.headers.pop("Authorization", None)
        request.headers.update(headers)
        assert outcome(await client.send(request)) == expected
