"""The commands that run on this machine, on its CONTEXT_DIR and database: ``serve``,
``migrate``, ``openapi``, ``cleanup``, ``repair`` and ``mcp``.

What each does is in app/cli/runs.py, imported when one of them runs: it loads the whole
service (seconds on a slow machine), which ``--help``, ``--version`` and the commands that
talk to a running service need not wait for."""

import argparse
import uuid
from collections.abc import Callable

from app.config import Settings
from app.maintenance.schemas import MAX_DAYS

Run = Callable[[argparse.Namespace, argparse.ArgumentParser], None]


def _runs(command: str, settings: Settings) -> Run:
    """The body of ``command`` (a function of app/cli/runs.py), run with ``settings``."""

    def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
        from app.cli import runs

        getattr(runs, command)(settings, args, parser)

    return run


def add_commands(
    commands: "argparse._SubParsersAction[argparse.ArgumentParser]", settings: Settings
) -> None:
    """Adds the local commands to the parser's subcommands; each runs with ``settings``."""
    defaults = argparse.ArgumentDefaultsHelpFormatter
    serve = commands.add_parser(
        "serve",
        help="run the HTTP service",
        description="Run the HTTP service. Every other setting comes from the environment "
        "(CONTEXT_DIR, DATABASE_URL, ...: see the README's configuration).",
        formatter_class=defaults,
    )
    serve.add_argument("--host", default=settings.server.host, help="address to listen on")
    serve.add_argument("--port", type=int, default=settings.server.port, help="port to listen on")
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        help="worker processes; they share CONTEXT_DIR and the database",
    )
    serve.set_defaults(run=_runs("serve", settings))

    migrate = commands.add_parser(
        "migrate", help="create or upgrade the database, reconcile CONTEXT_DIR"
    )
    migrate.set_defaults(run=_runs("migrate", settings))

    openapi = commands.add_parser("openapi", help="print the OpenAPI document as YAML")
    openapi.set_defaults(run=_runs("openapi", settings))

    cleanup = commands.add_parser(
        "cleanup", help="remove finished tasks older than N days; print the report as JSON"
    )
    cleanup.add_argument(
        "--older-than-days",
        type=_days,
        metavar="N",
        help=f"0..{MAX_DAYS}; 0: every finished task (default: CLEANUP_DAYS)",
    )
    cleanup.add_argument("--dry-run", action="store_true", help="report only; change nothing")
    cleanup.set_defaults(run=_runs("cleanup", settings))

    repair = commands.add_parser(
        "repair",
        help="accept the loss of a task whose messages.jsonl lost committed messages "
        "(task_files_damaged): serve what remains, never reissue the lost seqs",
    )
    repair.add_argument("uuid", type=_uuid, help="the task's uuid")
    repair.add_argument("--thread-id", type=int, default=0, help="a thread of the task (0: root)")
    repair.set_defaults(run=_runs("repair", settings))

    mcp = commands.add_parser(
        "mcp",
        help="serve the MCP tools over stdio, on this machine's CONTEXT_DIR and database",
        description="Serve the MCP server (docs/mcp.md) over stdin and stdout, for an MCP "
        "client that starts it. It opens CONTEXT_DIR and the database as `serve` does (and "
        "may run beside it); no API key applies: whoever can run it can read the files.",
    )
    mcp.set_defaults(run=_runs("mcp", settings))


def _uuid(value: str) -> str:
    return str(uuid.UUID(value))


def _days(value: str) -> int:
    days = int(value)
    if not 0 <= days <= MAX_DAYS:
        raise ValueError(value)
    return days
