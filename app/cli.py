"""``context-service serve|migrate|openapi|cleanup|repair``."""

import argparse
import asyncio
import json
import uuid

import uvicorn
import yaml

from app.config import Settings
from app.db.engine import open_database
from app.errors import AppError, InvalidInput
from app.lifespan import open_services, prepare_storage
from app.maintenance.schemas import MAX_DAYS, CleanupReport
from app.observability.logs import configure_logging
from app.storage.layout import Layout
from app.storage.locks import TaskLocks, process_locks


def openapi_yaml() -> str:
    """The app's OpenAPI document, as committed in openapi.yaml."""
    from app.main import create_app

    return yaml.safe_dump(create_app().openapi(), sort_keys=False, allow_unicode=True, width=100)


async def _migrate(settings: Settings) -> None:
    layout = Layout(settings.context_dir.resolve())
    db = open_database(settings.effective_database_url)
    locks = TaskLocks(process_locks(layout, db.engine))
    try:
        await prepare_storage(db, layout, locks)
    finally:
        await locks.close()
        await db.dispose()


async def _cleanup(settings: Settings, older_than_days: int | None, dry_run: bool) -> CleanupReport:
    async with open_services(settings) as services:
        return await services.maintenance.cleanup(older_than_days, dry_run=dry_run)


async def _repair(settings: Settings, task_uuid: str, thread_id: int) -> dict[str, object]:
    async with open_services(settings) as services:
        lost = await services.store.accept_loss(task_uuid, thread_id)
    return {"uuid": task_uuid, "thread_id": thread_id, "repaired": lost is not None, "lost": lost}


def _uuid(value: str) -> str:
    return str(uuid.UUID(value))


def _days(value: str) -> int:
    days = int(value)
    if not 0 <= days <= MAX_DAYS:
        raise ValueError(value)
    return days


def main(argv: list[str] | None = None) -> None:
    settings = Settings()
    configure_logging(settings)
    parser = argparse.ArgumentParser(prog="context-service")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the HTTP service")
    serve.add_argument("--host", default=settings.server.host)
    serve.add_argument("--port", type=int, default=settings.server.port)
    serve.add_argument("--workers", type=int, default=1)
    commands.add_parser("migrate", help="create or upgrade the database, reconcile CONTEXT_DIR")
    commands.add_parser("openapi", help="print the OpenAPI document as YAML")
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
    repair = commands.add_parser(
        "repair",
        help="accept the loss of a task whose messages.jsonl lost committed messages "
        "(task_files_damaged): serve what remains, never reissue the lost seqs",
    )
    repair.add_argument("uuid", type=_uuid, help="the task's uuid")
    repair.add_argument("--thread-id", type=int, default=0, help="a thread of the task (0: root)")
    args = parser.parse_args(argv)
    if args.command == "openapi":
        print(openapi_yaml(), end="")
    elif args.command == "migrate":
        asyncio.run(_migrate(settings))
        print(f"database at head; {settings.context_dir.resolve()} reconciled")
    elif args.command == "cleanup":
        try:
            report = asyncio.run(_cleanup(settings, args.older_than_days, args.dry_run))
        except InvalidInput as exc:
            parser.error(exc.message)
        print(report.model_dump_json(indent=2))
    elif args.command == "repair":
        try:
            repaired = asyncio.run(_repair(settings, args.uuid, args.thread_id))
        except AppError as exc:
            parser.error(exc.message)
        print(json.dumps(repaired))
    else:
        uvicorn.run(
            "app.main:app",
            host=args.host,
            port=args.port,
            workers=args.workers,
            limit_concurrency=settings.server.max_connections,
            timeout_keep_alive=settings.server.keep_alive_timeout_s,
        )
