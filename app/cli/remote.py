"""The commands that look at a running service over its HTTP API: ``tasks``, ``task``, ``jobs``
and ``stats``. Tables for people; ``--json`` prints the service's answer as it came."""

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any, get_args

import httpx

from app.cli import tables
from app.jobs.schemas import JobStatus
from app.lifecycle import TaskStatus

DEFAULT_URL = "http://127.0.0.1:8080"
TIMEOUT_S = 30.0

Render = Callable[[Any], str]


def add_commands(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Adds the remote commands to the parser's subcommands."""
    connection = argparse.ArgumentParser(add_help=False)
    connection.add_argument(
        "--url",
        default=os.environ.get("CONTEXT_SERVICE_URL", DEFAULT_URL),
        help="the service's base URL (env CONTEXT_SERVICE_URL; default: %(default)s)",
    )
    connection.add_argument(
        "--api-key",
        default=os.environ.get("CONTEXT_SERVICE_API_KEY"),
        help="sent as 'Authorization: Bearer KEY' (env CONTEXT_SERVICE_API_KEY)",
    )
    connection.add_argument(
        "--json", action="store_true", help="print the service's JSON answer, not a table"
    )

    listing = commands.add_parser(
        "tasks", parents=[connection], help="list a running service's tasks, newest first"
    )
    listing.add_argument("--status", choices=get_args(TaskStatus))
    for name in ("user", "task-source", "owner", "repo", "task-type", "task-id"):
        listing.add_argument(f"--{name}", help=f"only tasks whose {name.replace('-', '_')} is this")
    listing.add_argument("--limit", type=int, default=20, help="at most this many (default: 20)")
    listing.add_argument("--cursor", help="the next page: the cursor a previous listing printed")
    listing.set_defaults(run=_tasks)

    one = commands.add_parser(
        "task", parents=[connection], help="one task: its record, statistics and context"
    )
    one.add_argument("uuid", help="the task's uuid")
    one.set_defaults(run=_task)

    jobs = commands.add_parser(
        "jobs", parents=[connection], help="a running service's background jobs, newest first"
    )
    jobs.add_argument("--status", choices=get_args(JobStatus))
    jobs.add_argument("--task", dest="task_uuid", metavar="UUID", help="only this task's jobs")
    jobs.add_argument("--limit", type=int, default=20, help="at most this many (default: 20)")
    jobs.set_defaults(run=_jobs)

    stats = commands.add_parser(
        "stats", parents=[connection], help="a running service's figures: tasks, tokens, calls"
    )
    stats.set_defaults(run=_stats)


def _tasks(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    filters = ("status", "user", "task_source", "owner", "repo", "task_type", "task_id", "cursor")
    params = {name: getattr(args, name) for name in filters if getattr(args, name) is not None}
    _show(args, "/tasks", params | {"limit": args.limit}, tables.tasks)


def _task(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    _show(args, f"/tasks/{args.uuid}", {}, tables.task)


def _jobs(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    params = {"limit": args.limit, "status": args.status, "task_uuid": args.task_uuid}
    _show(args, "/jobs", {k: v for k, v in params.items() if v is not None}, tables.jobs)


def _stats(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    _show(args, "/stats", {}, tables.stats)


def _show(args: argparse.Namespace, path: str, params: dict[str, Any], render: Render) -> None:
    """GETs ``path`` and prints the answer; exits 1 with the service's error (or why it could
    not be reached) on stderr."""
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    try:
        response = httpx.get(
            args.url.rstrip("/") + path, params=params, headers=headers, timeout=TIMEOUT_S
        )
    except httpx.HTTPError as exc:
        sys.exit(f"error: cannot reach the service at {args.url}: {exc}")
    if response.is_error:
        sys.exit(f"error: {_error_text(response)}")
    body = response.json()
    print(json.dumps(body, indent=2, ensure_ascii=False) if args.json else render(body))


def _error_text(response: httpx.Response) -> str:
    """The service's error answer as one line: ``HTTP 404 task_not_found: ...``."""
    try:
        error = response.json()["error"]
        return f"HTTP {response.status_code} {error['code']}: {error['message']}"
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code}: {response.text[:500]}"
