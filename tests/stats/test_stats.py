"""GET /stats over the real app: every figure against figures computed here from what the test
created and from GET /tasks, with and without each filter."""

import statistics
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from app.config import Settings
from app.db.engine import open_database
from app.db.models import Task
from tests.support.errors import assert_error
from tests.support.tasks import create_task, key

STATUSES = ("running", "paused", "completed", "failed")


@dataclass(frozen=True)
class Spec:
    user: str | None
    source: str
    owner: str
    repo: str
    end: str  # running | paused | completed | failed
    calls: int  # assistant turns with usage, each with one tool call
    duration_h: float = 0.0  # completed tasks only


# Three users (one task without a user), two owners, three repos, two sources, every status.
SPECS = [
    Spec("alice", "github", "o1", "r1", "completed", 2, 1.0),
    Spec("alice", "github", "o1", "r2", "failed", 1),
    Spec("alice", "gitlab", "o2", "r1", "running", 3),
    Spec("bob", "github", "o1", "r1", "completed", 1, 3.5),
    Spec("bob", "github", "o2", "r3", "running", 0),
    Spec("bob", "gitlab", "o2", "r3", "paused", 2),
    Spec("carol", "github", "o1", "r2", "failed", 0),
    Spec("carol", "gitlab", "o1", "r1", "completed", 0, 0.25),
    Spec(None, "github", "o2", "r2", "failed", 2),
    Spec(None, "github", "o1", "r1", "running", 1),
]


async def populate(client: httpx.AsyncClient, settings: Settings) -> dict[str, int]:
    """Create SPECS through the API; returns the tokens and calls the test reported."""
    posted = Counter[str]()
    finished: dict[str, float] = {}
    for n, spec in enumerate(SPECS):
        task = await create_task(
            client,
            task_key=key(task_source=spec.source, owner=spec.owner, repo=spec.repo, task_id=str(n)),
            user=spec.user,
            system_prompt="You are a coding agent.",
        )
        uuid = task["uuid"]
        for call in range(spec.calls):
            usage = {"prompt_tokens": 100 * (n + 1) + call, "completion_tokens": 7 + call}
            posted["tokens"] += usage["prompt_tokens"] + usage["completion_tokens"]
            posted["llm_calls"] += 1
            posted["tool_calls"] += 1
            call_id = f"call_{call}"
            batch = [
                {"role": "user", "content": f"step {call} of task {n}"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
                        }
                    ],
                    "usage": usage,
                },
                {"role": "tool", "tool_call_id": call_id, "content": "def main(): ...\n" * 20},
            ]
            response = await client.post(f"/tasks/{uuid}/messages", json={"messages": batch})
            assert response.status_code == 201, response.text
            record = {"tool": "read_file", "args": {"path": "a.py"}, "tool_call_id": call_id}
            response = await client.post(f"/tasks/{uuid}/tools", json=record)
            assert response.status_code == 201, response.text
        if spec.calls >= 2:  # enough history for a truncation to hide something
            response = await client.post(f"/tasks/{uuid}/compress", json={"strategy": "truncate"})
            assert response.status_code == 200, response.text
            posted["compressions"] += response.json()["kind"] != "skipped"
        action = {"paused": "stop", "completed": "complete", "failed": "fail"}.get(spec.end)
        if action:
            body = {"error_message": f"boom {n}"} if action == "fail" else None
            response = await client.post(f"/tasks/{uuid}/{action}", json=body)
            assert response.status_code == 200, response.text
        if spec.end == "completed":
            finished[uuid] = spec.duration_h
    await set_durations(settings, finished)
    return dict(posted)


async def set_durations(settings: Settings, hours: dict[str, float]) -> None:
    """A task completed through the API ran for milliseconds, too little to tell seconds from
    days; these rows get a start hours before their completion, written through the app's
    database (no endpoint sets started_at)."""
    db = open_database(settings.effective_database_url)
    try:
        async with db.transaction() as session:
            for uuid, h in hours.items():
                row = await session.get(Task, uuid)
                assert row is not None
                assert row.completed_at is not None
                await session.execute(
                    update(Task)
                    .where(Task.uuid == uuid)
                    .values(started_at=row.completed_at - timedelta(hours=h))
                )
    finally:
        await db.dispose()


async def listed(client: httpx.AsyncClient, **params: str) -> list[dict[str, Any]]:
    response = await client.get("/tasks", params={"limit": "1000", **params})
    assert response.status_code == 200, response.text
    tasks: list[dict[str, Any]] = response.json()["tasks"]
    return tasks


def when(value: str | None) -> datetime:
    assert value is not None
    return datetime.fromisoformat(value)


def expected_stats(tasks: list[dict[str, Any]], running_limit: int = 100) -> dict[str, Any]:
    """The /stats answer (minus filters) computed in Python from GET /tasks records."""
    by_status = {s: sum(t["status"] == s for t in tasks) for s in STATUSES}
    users: dict[str | None, dict[str, int]] = {}
    for t in tasks:
        counts = users.setdefault(t["user"], dict.fromkeys(STATUSES, 0))
        counts[t["status"]] += 1
    ranked = sorted(users, key=lambda u: (-sum(users[u].values()), u is None, u or ""))
    by_user = [{"user": u, "total": sum(users[u].values()), "by_status": users[u]} for u in ranked]
    running = sorted(
        (t for t in tasks if t["status"] == "running"),
        key=lambda t: (when(t["started_at"]), t["uuid"]),
        reverse=True,
    )
    failed = sorted(
        (t for t in tasks if t["status"] == "failed"),
        key=lambda t: (when(t["completed_at"]), t["uuid"]),
        reverse=True,
    )
    completed = [t for t in tasks if t["status"] == "completed"]
    durations = [
        (when(t["completed_at"]) - when(t["started_at"])).total_seconds() for t in completed
    ]

    def usage(group: list[dict[str, Any]]) -> dict[str, Any]:
        tokens = [t["statistics"]["total_tokens"] for t in group]
        return {
            "tasks": len(group),
            "total": sum(tokens),
            "average": statistics.fmean(tokens) if tokens else None,
        }

    def total(field: str) -> int:
        return sum(t["statistics"][field] for t in tasks)

    return {
        "total_tasks": len(tasks),
        "by_status": by_status,
        "by_user": by_user,
        "running": {
            "total": len(running),
            "tasks": [
                {k: t[k] for k in ("uuid", "task_key", "user", "started_at")}
                for t in running[:running_limit]
            ],
        },
        "latest_failures": [
            {k: t[k] for k in ("uuid", "task_key", "user", "error_message", "created_at")}
            | {"completed_at": t["completed_at"]}
            for t in failed[:10]
        ],
        "average_duration_s": statistics.fmean(durations) if durations else None,
        "tokens": {"completed": usage(completed), "all": usage(tasks)},
        "calls": {
            "llm_calls": total("llm_call_count"),
            "tool_calls": total("tool_call_count"),
            "compressions": total("compression_count"),
        },
    }


def assert_matches(answer: dict[str, Any], expected: dict[str, Any]) -> None:
    """Equal, with floats compared to a millisecond (julianday arithmetic is not exact)."""
    got, want = dict(answer), dict(expected)
    got.pop("filters")
    for section in ("completed", "all"):
        a, b = got["tokens"][section].pop("average"), want["tokens"][section].pop("average")
        assert (a is None) == (b is None), (section, a, b)
        if a is not None:
            assert a == pytest.approx(b)
    a, b = got.pop("average_duration_s"), want.pop("average_duration_s")
    assert (a is None) == (b is None), (a, b)
    if a is not None:
        assert a == pytest.approx(b, abs=1e-3)
    # Timestamps compare as instants (the answer and GET /tasks may spell them alike or not).
    for section in (got["running"]["tasks"], want["running"]["tasks"]):
        for item in section:
            item["started_at"] = when(item["started_at"])
    for section in (got["latest_failures"], want["latest_failures"]):
        for item in section:
            item["created_at"], item["completed_at"] = (
                when(item["created_at"]),
                when(item["completed_at"]),
            )
    assert got == want


async def test_stats_unfiltered_match_what_was_created(
    client: httpx.AsyncClient, settings: Settings
) -> None:
    posted = await populate(client, settings)
    response = await client.get("/stats")
    assert response.status_code == 200, response.text
    answer = response.json()
    tasks = await listed(client)
    assert len(tasks) == len(SPECS)
    assert_matches(answer, expected_stats(tasks))

    # And against what the test itself sent, not only against GET /tasks.
    assert answer["filters"] == dict.fromkeys(
        ("since", "until", "user", "owner", "repo", "task_source")
    )
    assert answer["by_status"] == dict(Counter(s.end for s in SPECS))
    assert answer["tokens"]["all"]["total"] == posted["tokens"]
    assert answer["calls"] == {
        "llm_calls": posted["llm_calls"],
        "tool_calls": posted["tool_calls"],
        "compressions": posted["compressions"],
    }
    assert posted["compressions"] > 0
    hours = [s.duration_h for s in SPECS if s.end == "completed"]
    assert answer["average_duration_s"] == pytest.approx(statistics.fmean(hours) * 3600, abs=1e-3)
    assert [f["error_message"] for f in answer["latest_failures"]] == ["boom 8", "boom 6", "boom 1"]
    assert [u["user"] for u in answer["by_user"]] == ["alice", "bob", "carol", None]


async def test_each_filter_narrows_every_figure(
    client: httpx.AsyncClient, settings: Settings
) -> None:
    await populate(client, settings)
    tasks = sorted(await listed(client), key=lambda t: when(t["created_at"]))
    since, until = tasks[2]["created_at"], tasks[7]["created_at"]
    cases: list[tuple[dict[str, str], dict[str, str]]] = [
        ({"user": "alice"}, {"user": "alice"}),
        ({"user": "nobody"}, {"user": "nobody"}),
        ({"owner": "o2"}, {"owner": "o2"}),
        ({"repo": "r1"}, {"repo": "r1"}),
        ({"task_source": "gitlab"}, {"task_source": "gitlab"}),
        ({"since": since}, {"created_after": since}),
        ({"until": until}, {"created_before": until}),
        ({"since": since, "until": until}, {"created_after": since, "created_before": until}),
        (
            {"user": "bob", "owner": "o2", "since": since},
            {"user": "bob", "owner": "o2", "created_after": since},
        ),
    ]
    for params, list_params in cases:
        response = await client.get("/stats", params=params)
        assert response.status_code == 200, (params, response.text)
        answer = response.json()
        subset = await listed(client, **list_params)
        assert_matches(answer, expected_stats(subset))
        echoed = {k: v for k, v in answer["filters"].items() if v is not None}
        assert echoed.keys() == params.keys()
        for name, value in params.items():
            if name in ("since", "until"):
                assert when(echoed[name]) == when(value)
            else:
                assert echoed[name] == value
    # The range is [since, until): the task created at `since` counts, the one at `until` not.
    answer = (await client.get("/stats", params={"since": since, "until": until})).json()
    assert answer["total_tasks"] == 5
    empty = (await client.get("/stats", params={"user": "nobody"})).json()
    assert empty["by_status"] == dict.fromkeys(STATUSES, 0)
    assert empty["average_duration_s"] is None
    assert empty["tokens"]["all"] == {"tasks": 0, "total": 0, "average": None}


async def test_a_zone_less_bound_is_utc(client: httpx.AsyncClient, settings: Settings) -> None:
    await populate(client, settings)
    tasks = sorted(await listed(client), key=lambda t: when(t["created_at"]))
    cut = when(tasks[4]["created_at"])
    naive = cut.astimezone(UTC).replace(tzinfo=None).isoformat()
    shifted = cut.astimezone(UTC).astimezone(timezone(timedelta(hours=9))).isoformat()
    answers = [
        (await client.get("/stats", params={"since": bound})).json() for bound in (naive, shifted)
    ]
    assert answers[0] == answers[1]
    assert answers[0]["total_tasks"] == len(SPECS) - 4
    assert when(answers[0]["filters"]["since"]) == cut


async def test_running_list_is_capped_with_the_total(
    client: httpx.AsyncClient, settings: Settings
) -> None:
    await populate(client, settings)
    answer = (await client.get("/stats", params={"running_limit": "2"})).json()
    assert answer["running"]["total"] == 3
    tasks = await listed(client)
    assert_matches(answer, expected_stats(tasks, running_limit=2))
    assert len(answer["running"]["tasks"]) == 2


@pytest.mark.parametrize(
    "params",
    [
        {"since": "yesterday"},
        {"until": "2026-13-01T00:00:00Z"},
        {"since": "2026-02-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"},
        {"running_limit": "-1"},
        {"running_limit": "1001"},
        {"created_after": "2026-01-01T00:00:00Z"},  # GET /tasks' name: refused, not ignored
    ],
)
async def test_bad_filters_are_422_in_the_error_shape(
    client: httpx.AsyncClient, params: dict[str, str]
) -> None:
    details = assert_error(await client.get("/stats", params=params), 422, "validation_error")
    assert details["errors"]
