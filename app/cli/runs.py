"""What the local commands do (app/cli/local.py parses them): each loads the service's
modules, which only the command that runs needs."""

import argparse
import asyncio
import json

import uvicorn
import yaml

from app.auth.keys import OPEN
from app.config import Settings
from app.db.engine import open_database
from app.errors import AppError
from app.lifespan import open_services, prepare_storage
from app.maintenance.schemas import CleanupReport
from app.storage.layout import Layout
from app.storage.locks import TaskLocks, process_locks


def openapi_yaml() -> str:
    """The app's OpenAPI document, as committed in openapi.yaml."""
    from app.main import create_app

    return yaml.safe_dump(create_app().openapi(), sort_keys=False, allow_unicode=True, width=100)


def openapi(settings: Settings, args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    print(openapi_yaml(), end="")


def serve(settings: Settings, args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    uvicorn.run(
        "app.main:app",
        host=args.host,
        port=args.port,
        workers=args.workers,
        limit_concurrency=settings.server.max_connections,
        timeout_keep_alive=settings.server.keep_alive_timeout_s,
    )


def migrate(settings: Settings, args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    async def run() -> None:
        layout = Layout(settings.context_dir.resolve())
        db = open_database(settings.effective_database_url)
        locks = TaskLocks(process_locks(layout, db.engine))
        try:
            await prepare_storage(db, layout, locks)
        finally:
            await locks.close()
            await db.dispose()

    asyncio.run(run())
    print(f"database at head; {settings.context_dir.resolve()} reconciled")


def cleanup(settings: Settings, args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    async def run() -> CleanupReport:
        async with open_services(settings) as services:
            return await services.maintenance.cleanup(args.older_than_days, dry_run=args.dry_run)

    try:
        report = asyncio.run(run())
    except AppError as exc:
        parser.error(exc.message)
    print(report.model_dump_json(indent=2))


def repair(settings: Settings, args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    async def run() -> dict[str, object]:
        async with open_services(settings) as services:
            lost = await services.store.accept_loss(args.uuid, args.thread_id)
        return {
            "uuid": args.uuid,
            "thread_id": args.thread_id,
            "repaired": lost is not None,
            "lost": lost,
        }

    try:
        repaired = asyncio.run(run())
    except AppError as exc:
        parser.error(exc.message)
    print(json.dumps(repaired))


def mcp(settings: Settings, args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    # Here, not at the top: the MCP SDK takes a second to import, which no other command needs.
    from app.mcp_server.server import Caller, build_server

    async def serve() -> None:
        async with open_services(settings) as services:
            caller = Caller(services=services, principal=OPEN)
            await build_server(lambda ctx: caller).run_stdio_async()

    asyncio.run(serve())
