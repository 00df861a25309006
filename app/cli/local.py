"""The commands that run on this machine, on its CONTEXT_DIR and database: ``serve``,
``migrate``, ``openapi``, ``cleanup``, ``repair`` and ``mcp``."""

import argparse
import asyncio
import json
import uuid

import uvicorn
import yaml

from app.auth.keys import OPEN
from app.config import Settings
from app.db.engine import open_database
from app.errors import AppError
from app.lifespan import open_services, prepare_storage
from app.maintenance.schemas import MAX_DAYS, CleanupReport
from app.storage.layout import Layout
from app.storage.locks import TaskLocks, process_locks


def openapi_yaml() -> str:
    """The app's OpenAPI document, as committed in openapi.yaml."""
    from app.main import create_app

    return yaml.safe_dump(create_app().openapi(), sort_keys=False, allow_unicode=True, width=100)


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
    serve.set_defaults(run=lambda args, parser: _serve(settings, args))

    migrate = commands.add_parser(
        "migrate", help="create or upgrade the database, reconcile CONTEXT_DIR"
    )
    migrate.set_defaults(run=lambda args, parser: _migrate(settings))

    openapi = commands.add_parser("openapi", help="print the OpenAPI document as YAML")
    openapi.set_defaults(run=lambda args, parser: print(openapi_yaml(), end=""))

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
    cleanup.set_defaults(run=lambda args, parser: _cleanup(settings, args, parser))

    repair = commands.add_parser(
        "repair",
        help="accept the loss of a task whose messages.jsonl lost committed messages "
        "(task_files_damaged): serve what remains, never reissue the lost seqs",
    )
    repair.add_argument("uuid", type=_uuid, help="the task's uuid")
    repair.add_argument("--thread-id", type=int, default=0, help="a thread of the task (0: root)")
    repair.set_defaults(run=lambda args, parser: _repair(settings, args, parser))

    mcp = commands.add_parser(
        "mcp",
        help="serve the MCP tools over stdio, on this machine's CONTEXT_DIR and database",
        description="Serve the MCP server (docs/mcp.md) over stdin and stdout, for an MCP "
        "client that starts it. It opens CONTEXT_DIR and the database as `serve` does (and "
        "may run beside it); no API key applies: whoever can run it can read the files.",
    )
    mcp.set_defaults(run=lambda args, parser: _mcp(settings))


def _serve(settings: Settings, args: argparse.Namespace) -> None:
    uvicorn.run(
        "app.main:app",
        host=args.host,
        port=args.port,
        workers=args.workers,
        limit_concurrency=settings.server.max_connections,
        timeout_keep_alive=settings.server.keep_alive_timeout_s,
    )


def _migrate(settings: Settings) -> None:
    async def migrate() -> None:
        layout = Layout(settings.context_dir.resolve())
        db = open_database(settings.effective_database_url)
        locks = TaskLocks(process_locks(layout, db.engine))
        try:
            await prepare_storage(db, layout, locks)
        finally:
            await locks.close()
            await db.dispose()

    asyncio.run(migrate())
    print(f"database at head; {settings.context_dir.resolve()} reconciled")


def _cleanup(settings: Settings, args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    async def cleanup() -> CleanupReport:
        async with open_services(settings) as services:
            return await services.maintenance.cleanup(args.older_than_days, dry_run=args.dry_run)

    try:
        report = asyncio.run(cleanup())
    except AppError as exc:
        parser.error(exc.message)
    print(report.model_dump_json(indent=2))


def _repair(settings: Settings, args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    async def repair() -> dict[str, object]:
        async with open_services(settings) as services:
            lost = await services.store.accept_loss(args.uuid, args.thread_id)
        return {
            "uuid": args.uuid,
            "thread_id": args.thread_id,
            "repaired": lost is not None,
            "lost": lost,
        }

    try:
        repaired = asyncio.run(repair())
    except AppError as exc:
        parser.error(exc.message)
    print(json.dumps(repaired))


def _mcp(settings: Settings) -> None:
    # Here, not at the top: the MCP SDK takes a second to import, which no other command needs.
    from app.mcp_server.server import Caller, build_server

    async def serve() -> None:
        async with open_services(settings) as services:
            caller = Caller(services=services, principal=OPEN)
            await build_server(lambda ctx: caller).run_stdio_async()

    asyncio.run(serve())


def _uuid(value: str) -> str:
    return str(uuid.UUID(value))


def _days(value: str) -> int:
    days = int(value)
    if not 0 <= days <= MAX_DAYS:
        raise ValueError(value)
    return days
