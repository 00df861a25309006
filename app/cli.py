"""``context-service serve|migrate``."""

import argparse
import asyncio

import uvicorn

from app.config import Settings
from app.db.engine import open_database
from app.lifespan import prepare_storage
from app.storage.layout import Layout


async def _migrate(settings: Settings) -> None:
    db = open_database(settings.effective_database_url)
    try:
        await prepare_storage(settings, db, Layout(settings.context_dir.resolve()))
    finally:
        await db.dispose()


def main(argv: list[str] | None = None) -> None:
    settings = Settings()
    parser = argparse.ArgumentParser(prog="context-service")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the HTTP service")
    serve.add_argument("--host", default=settings.host)
    serve.add_argument("--port", type=int, default=settings.port)
    serve.add_argument("--workers", type=int, default=1)
    commands.add_parser("migrate", help="create or upgrade the database, reconcile CONTEXT_DIR")
    args = parser.parse_args(argv)
    if args.command == "migrate":
        asyncio.run(_migrate(settings))
        print(f"database at head; {settings.context_dir.resolve()} reconciled")
    else:
        uvicorn.run("app.main:app", host=args.host, port=args.port, workers=args.workers)
